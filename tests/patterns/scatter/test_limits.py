"""Gather caps what a peer may send (ZMQ_MAXMSGSIZE): a larger message drops that peer's connection unread."""
import pytest

from zactors.patterns.scatter import NoMessage

pytestmark = pytest.mark.timeout(60)


def test_a_message_over_max_message_is_never_delivered_and_the_rest_are(make):
    gather = make.gather(max_message=1000)
    endpoint = gather.bind("tcp://127.0.0.1:*")
    big, small = make.scatter(), make.scatter()
    big.connect(endpoint)
    small.connect(endpoint)
    big.send(b"x" * 1001)
    small.send(b"y" * 1000)
    assert gather.recv(timeout=10) == b"y" * 1000
    with pytest.raises(NoMessage):
        gather.recv(timeout=0.5)
