"""Fixtures for the Harmony tests: started nodes and raw peers, all stopped afterwards."""
import pytest

from zactors.patterns.harmony import Node
from tests.patterns.harmony.peers import RawPeer


@pytest.fixture
def nodes():
    made = []

    def make(name, **kwargs):
        kwargs.setdefault("beacon", False)
        node = Node(name, **kwargs).start()
        made.append(node)
        return node

    yield make
    for node in made:
        node.stop()


@pytest.fixture
def raw():
    made = []

    def make(node, **kwargs):
        peer = RawPeer(node, **kwargs)
        made.append(peer)
        return peer

    yield make
    for peer in made:
        peer.close()
