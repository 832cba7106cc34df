"""A Clone server with persist=DIR: restarted, it has the same map at the same sequence."""
import pytest

from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.server import CloneServer
from tests.conftest import wait_for
from tests.patterns.clone.conftest import client_of, rebind

pytestmark = pytest.mark.timeout(120)


def _restart(server, make, path):
    endpoints = list(server.endpoints)
    server.destroy()
    return rebind(make, CloneServer, snapshot=endpoints[0], publisher=endpoints[1], collector=endpoints[2],
                  persist=str(path))


def test_restart_keeps_map_sequence_and_ttls(make, tmp_path):
    server = make(CloneServer, persist=str(tmp_path))
    a = make(Clone, [client_of(server)])
    a.wait_synced(5)
    for i in range(100):
        a.set("k%d" % i, "v%d" % i)
    a.delete("k5")
    a.set("short", "1", ttl=0.5)
    a.set("long", "1", ttl=60, wait=5)
    before = server.call("DUMP")
    seq = server.call("INFO")["sequence"]
    server = _restart(server, make, tmp_path)
    assert server.call("DUMP") == before and server.call("INFO")["sequence"] == seq
    wait_for(lambda: server.call("GET", b"short") is None, timeout=5, what="the ttl survived the restart")
    assert server.call("GET", b"long") == b"1" and server.call("GET", b"k5") is None
    b = make(Clone, [client_of(server)])
    assert b.wait_synced(5) and b.set("after", "x", wait=5) == seq + 2  # the expiry took seq + 1


def test_compaction_then_restart(make, tmp_path):
    server = make(CloneServer, persist=str(tmp_path))
    a = make(Clone, [client_of(server)])
    a.wait_synced(5)
    for i in range(12000):
        a.set("k%d" % (i % 10), str(i))
    a.set("last", "1", wait=10)
    wait_for(lambda: server.call("INFO")["persist"]["compactions"] >= 1, timeout=20, what="a compaction")
    a.set("after-compaction", "1", wait=5)
    before, seq = server.call("DUMP"), server.call("INFO")["sequence"]
    assert len(list(tmp_path.iterdir())) == 1  # the old generation is gone
    server = _restart(server, make, tmp_path)
    assert server.call("DUMP") == before and server.call("INFO")["sequence"] == seq
