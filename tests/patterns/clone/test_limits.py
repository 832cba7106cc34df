"""Every Clone network socket has a size cap; a frame over it is refused and counted."""
import gevent
import pytest
import zmq

from zactors.patterns.clone.client import Clone
from tests.conftest import wait_for
from tests.patterns.clone.conftest import CloneServer, client_of, pair

pytestmark = pytest.mark.timeout(60)


def _limits():
    from zactors.patterns.clone.protocol import MAX_REQUEST
    return MAX_REQUEST


def _cap(sock):
    return sock.getsockopt(zmq.MAXMSGSIZE)


def test_every_network_socket_has_a_size_cap(make):
    MAX_REQUEST = _limits()
    primary, backup = pair(make, max_value=1 << 20)
    wait_for(lambda: backup.call("INFO")["state"] == "passive" and not backup.call("INFO")["syncing"],
             timeout=10, what="the backup follows")
    for server in (primary, backup):
        assert _cap(server.collector) == 1 << 20
        assert _cap(server.snapshots.router.socket) == _cap(server.pub) == _cap(server.state_pub) == MAX_REQUEST
        assert _cap(server.state_sub) == MAX_REQUEST
    assert _cap(backup.pair.feed) == 1 << 20
    a = make(Clone, [client_of(primary)], max_value=1 << 20)
    assert a.wait_synced(5)
    assert _cap(a.sub) == _cap(a.snapshot) == 1 << 20
    assert all(_cap(sock) == MAX_REQUEST for sock in a._collectors.values())


def test_a_frame_over_the_cap_is_refused_and_counted(make, raw):
    MAX_REQUEST = _limits()
    server = make(CloneServer, max_value=64 << 10)
    big = raw(zmq.XPUB, connect=server.endpoints[2])
    with gevent.Timeout(10):
        assert big.recv_multipart()[0][:1] == b"\x01"          # the collector subscribed: a send is delivered
    big.send_multipart([b"k", bytes(8), b"", b"", b"x" * (128 << 10)])
    wait_for(lambda: server.call("INFO")["counters"].get("collector_disconnects", 0) >= 1,
             what="the oversized sender disconnected")
    assert server.call("INFO")["sequence"] == 0
    request = raw(zmq.DEALER, connect=server.endpoints[0])
    request.send_multipart([b"ICANHAZ?", b"/" + b"x" * MAX_REQUEST + b"/"])
    wait_for(lambda: server.call("INFO")["counters"].get("disconnects", 0) >= 1, what="the oversized request refused")
    a = make(Clone, [client_of(server)])                    # everyone else is served
    assert a.wait_synced(5) and a.set("k", "v", wait=5) == 1

