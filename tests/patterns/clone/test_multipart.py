"""Issue 20: a Clone server drops messages of more frames than a kvmsg (collector) or a request (snapshots)
unread, counts them, and goes on serving.  Real TCP sockets."""
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.protocol import encode_kvmsg
from zactors.patterns.clone.server import CloneServer
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(120)


def _raw(kind, endpoint):
    sock = context().socket(kind, socket_class=Socket)
    sock.linger = 0
    sock.sndhwm = 0
    sock.connect(endpoint)
    return sock


def _huge(sock, first):
    """A message of ``first`` and 200,000 more empty frames."""
    sock.send(first, zmq.SNDMORE)
    for _ in range(199999):
        sock.send(b"", zmq.SNDMORE)
    sock.send(b"")


def test_huge_multipart_messages_are_refused_counted_and_the_map_served():
    server = CloneServer()
    made = [server]
    try:
        client = Clone([tuple(server.endpoints[:3])])
        made.append(client)
        assert client.wait_synced(10)
        dealer, pub = _raw(zmq.DEALER, server.endpoints[0]), _raw(zmq.PUB, server.endpoints[2])
        made += [dealer, pub]
        # a PUB drops what it sends until the collector's subscription has come: probe until one lands
        probe = encode_kvmsg(b"probe", 0, b"1")
        wait_for(lambda: pub.send_multipart(probe) or server.call("GET", b"probe") == b"1", 10, "a probe")
        refused = lambda: server.call("INFO")["counters"].get("multipart_refused", 0)  # noqa: E731
        _huge(dealer, b"ICANHAZ?")
        wait_for(lambda: refused() == 1, 30, "the ICANHAZ? of 200,000 frames refused")
        _huge(pub, b"key")
        wait_for(lambda: refused() == 2, 30, "the kvmsg of 200,000 frames refused")
        client.set("still", "served", wait=10)
        assert server.call("GET", b"still") == b"served"
    finally:
        for thing in reversed(made):
            (thing.close if isinstance(thing, zmq.Socket) else thing.destroy)()
