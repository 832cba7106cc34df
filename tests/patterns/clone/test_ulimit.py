"""Issue 20: a Clone server under ``ulimit -n 1024`` (a process of its own, journaling its map): a flood of
snapshot requests that are never read, on connections past its descriptors, is refused and counted, and a
good client is served all along.  Real TCP, a real journal."""
import resource
import sys

import gevent
import gevent.subprocess
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.protocol import encode_icanhaz
from tests.conftest import wait_for
from tests.patterns.clone.conftest import free_base_port

pytestmark = pytest.mark.timeout(180)


def _nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))



def _counters(lines):
    """The counters of the last ``--stats`` line."""
    for line in reversed(lines):
        if "| " in line:
            return {k: int(v) for k, v in (kv.split("=") for kv in line.split("| ", 1)[1].split())}
    return {}


def test_a_snapshot_and_connection_flood_under_ulimit_1024(processes, make, tmp_path):
    base = free_base_port()
    server = processes([sys.executable, "-m", "zactors.apps.cli", "clone", "server", "--port", str(base),
                        "--persist", str(tmp_path / "map"), "--fsync", "batch", "--stats", "0.2"],
                       preexec_fn=_nofile, stderr=gevent.subprocess.PIPE, text=True)
    lines = []
    reader = gevent.spawn(lambda: [lines.append(line) for line in server.stderr])
    endpoint = "tcp://127.0.0.1:%d" % base
    good = make(Clone, [endpoint], name="good", timeout=30)
    assert good.wait_synced(20)
    for i in range(2000):   # 8 MB: more than a cut's pipe takes, so flooders' cuts stay active and others queue
        good.set("k%04d" % i, "x" * 4096)
    good.set("loaded", "1", wait=20)
    flood = []
    try:
        for i in range(1500):
            sock = context().socket(zmq.DEALER, socket_class=Socket)
            sock.linger = 0
            sock.rcvhwm = 1
            sock.rcvbuf = 4096
            sock.connect(endpoint)
            sock.send_multipart(encode_icanhaz())
            flood.append(sock)
            if i % 100 == 99:
                good.set("tick", str(i), wait=20)       # the good client is served all along
                assert server.poll() is None
        wait_for(lambda: _counters(lines).get("connections_refused", 0) >= 1000, 60,
                 "connections past a quarter of the fds shut at once, and counted")
        assert _counters(lines).get("snapshots_queued", 0) >= 1    # past max_active: waiting for the budget
        for sock in flood:
            sock.close(0)
        flood = []
        # A client that comes while the server still counts the flood's 1,500 disconnections may find
        # its first connection shut as one past the budget, after its request went in (its reply is
        # lost with the connection): it asks again after its timeout, as a Clone client does.
        late = make(Clone, [endpoint], name="late", timeout=2)
        assert late.wait_synced(60) and late.get("tick") == b"1499"
        assert server.poll() is None
    finally:
        reader.kill()
        for sock in flood:
            sock.close(0)
