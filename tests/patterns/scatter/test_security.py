"""Scatter/Gather secured with CURVE in one call each (actors.auth), over tcp."""
import pytest

from zactors.actors.auth import Authenticator, create_keypair, curve_client, curve_server, generate_keypair, load_keypair
from zactors.patterns.scatter import NoMessage

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def keys(tmp_path):
    create_keypair(str(tmp_path / "clients"), "worker")
    auth = Authenticator(curve=str(tmp_path / "clients"))
    yield load_keypair(str(tmp_path / "clients" / "worker.key_secret"))
    auth.destroy()


def test_only_a_listed_scatter_reaches_a_curve_gather(make, keys):
    server = generate_keypair()
    gather = make.gather()
    curve_server(gather, server)
    endpoint = gather.bind("tcp://127.0.0.1:*")

    stranger = make.scatter()
    curve_client(stranger, generate_keypair(), server.public)
    stranger.connect(endpoint)
    stranger.send(b"from a stranger", timeout=10)  # queued for a peer that will never accept it
    with pytest.raises(NoMessage):
        gather.recv(timeout=1.5)

    friend = make.scatter()
    curve_client(friend, keys, server.public)
    friend.connect(endpoint)
    friend.send(b"from a friend", timeout=10)
    assert gather.recv(timeout=10) == b"from a friend"
