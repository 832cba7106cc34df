"""An update is never lost to a reconnect in flight, and is applied once: clients resend, servers deduplicate."""
import uuid

import gevent
import pytest
import zmq

from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.server import CloneServer
from tests.conftest import wait_for
from tests.patterns.clone.conftest import client_of, rebind

pytestmark = pytest.mark.timeout(90)


def _restart(server, make, **options):
    endpoints = list(server.endpoints)
    server.destroy()
    return rebind(make, CloneServer, snapshot=endpoints[0], publisher=endpoints[1], collector=endpoints[2],
                  **options)


def _publisher(raw, collector):
    """A raw XPUB to a server's collector, returned once the collector subscribed (a send is then delivered)."""
    sock = raw(zmq.XPUB, connect=collector)
    with gevent.Timeout(10):
        assert sock.recv_multipart()[0][:1] == b"\x01"
    return sock


def test_a_set_during_a_server_restart_is_applied_once(make, tmp_path):
    """As in ``zactors up``: the server journals its map, and comes back on the same endpoints."""
    options = {"persist": str(tmp_path)}
    server = make(CloneServer, **options)
    a = make(Clone, [client_of(server)], timeout=0.5)
    assert a.wait_synced(5)
    assert a.set("before", "1", wait=5) == 1
    endpoints = list(server.endpoints)
    server.destroy()
    setting = gevent.spawn(a.set, "k", "v", wait=20)
    wait_for(lambda: a.call("INFO")["counters"].get("sets", 0) >= 2, what="the update left while the server was down")
    server = rebind(make, CloneServer, snapshot=endpoints[0], publisher=endpoints[1], collector=endpoints[2],
                    **options)
    try:
        seq = setting.get(timeout=25)
    except Exception:
        print("server", server.call("INFO"), "\nclient", a.call("INFO"))
        raise
    assert server.call("GET", b"k") == b"v"
    assert seq == server.call("INFO")["sequence"] == 2
    assert a.set("after", "1", wait=5) == seq + 1          # nothing applied twice meanwhile
    assert a.call("INFO")["counters"].get("resent", 0) >= 1


def test_the_same_uuid_is_applied_once(make, raw):
    server = make(CloneServer)
    pub = _publisher(raw, server.endpoints[2])
    update = [b"k", bytes(8), uuid.uuid4().bytes, b"", b"v1"]
    pub.send_multipart(update)
    pub.send_multipart(update)
    pub.send_multipart([b"k2", bytes(8), uuid.uuid4().bytes, b"", b"v2"])
    wait_for(lambda: server.call("GET", b"k2") == b"v2", what="the last update applied")
    info = server.call("INFO")
    assert info["sequence"] == 2 and info["counters"]["duplicates"] == 1


def test_a_restarted_server_still_knows_what_it_applied(make, raw, tmp_path):
    server = make(CloneServer, persist=str(tmp_path))
    update = [b"k", bytes(8), uuid.uuid4().bytes, b"", b"v1"]
    _publisher(raw, server.endpoints[2]).send_multipart(update)
    wait_for(lambda: server.call("GET", b"k") == b"v1", what="the update applied")
    server = _restart(server, make, persist=str(tmp_path))
    pub = _publisher(raw, server.endpoints[2])
    pub.send_multipart(update)                               # a client resending after the restart
    pub.send_multipart([b"k2", bytes(8), uuid.uuid4().bytes, b"", b"v2"])
    wait_for(lambda: server.call("GET", b"k2") == b"v2", what="the last update applied")
    info = server.call("INFO")
    assert info["sequence"] == 2 and info["counters"]["duplicates"] == 1
