"""A primary server PROCESS killed with SIGKILL while clients update at 1,000 updates/s."""
import sys
import time

import gevent
import pytest

from zactors.patterns.clone.client import Clone
from tests.conftest import wait_for
from tests.patterns.clone.conftest import free_base_port

pytestmark = pytest.mark.timeout(120)

CLIENTS = 3
RATE = 1000  # updates per second, all clients together


def test_sigkill_primary_under_load(processes, make):
    p, b = free_base_port(), free_base_port()
    cli = [sys.executable, "-m", "zactors.apps.cli", "-q", "clone", "server"]
    primary = processes(cli + ["--port", str(p), "--primary", "--peer", "tcp://127.0.0.1:%d" % b])
    processes(cli + ["--port", str(b), "--backup", "--peer", "tcp://127.0.0.1:%d" % p])
    servers = ["tcp://127.0.0.1:%d" % p, "tcp://127.0.0.1:%d" % b]
    clients = [make(Clone, servers, name="c%d" % i) for i in range(CLIENTS)]
    for c in clients:
        assert c.wait_synced(20)
    acked = [dict() for _ in clients]  # key -> highest n this client saw published

    def watch(i):
        prefix = b"c%d-" % i

        def seen(key, value, seq):
            if key.startswith(prefix) and value:
                n = int(value)
                if n > acked[i].get(key, -1):
                    acked[i][key] = n
        return seen
    for i, c in enumerate(clients):
        c.on_change(watch(i))
    running = True

    def write(i):
        n, interval = 0, CLIENTS / RATE
        next_at = time.monotonic()
        while running:
            clients[i].set("c%d-%d" % (i, n % 50), str(n))
            n += 1
            next_at += interval
            gevent.sleep(max(0.0, next_at - time.monotonic()))
    writers = [gevent.spawn(write, i) for i in range(CLIENTS)]
    gevent.sleep(1.5)
    backup_ep = "tcp://127.0.0.1:%d" % b
    killed_at = time.monotonic()
    primary.kill()  # SIGKILL
    switched = {}

    def track():
        while len(switched) < CLIENTS:
            for i, c in enumerate(clients):
                if i not in switched and c.server == backup_ep and c.call("INFO")["synced"]:
                    switched[i] = time.monotonic() - killed_at
            gevent.sleep(0.005)
    tracker = gevent.spawn(track)
    tracker.join(10)
    gevent.sleep(1.5)  # go on writing to the new active
    running = False
    gevent.joinall(writers, timeout=5)
    final = make(Clone, [backup_ep], name="checker")
    assert final.wait_synced(10)
    for i, c in enumerate(clients):
        c.set("done-%d" % i, "1", wait=10)
    wait_for(lambda: all(dict(c.items()) == dict(final.items()) for c in clients), timeout=10,
             what="every client ends with the same map")
    state = dict(final.items())
    for i in range(CLIENTS):
        for key, n in acked[i].items():
            assert int(state[key]) >= n, "acknowledged update %s=%d lost (now %s)" % (key, n, state[key])
    assert len(switched) == CLIENTS and max(switched.values()) < 2.0, switched
    assert sum(len(a) for a in acked) == CLIENTS * 50
