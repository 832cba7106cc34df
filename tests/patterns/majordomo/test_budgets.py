"""Budgets for what a peer can make an MDP broker hold: the frame size (ZMQ_MAXMSGSIZE)."""
import json
import os
import signal
import sys

import gevent
import gevent.subprocess
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.majordomo import Client
from tests.patterns.majordomo.conftest import Echo
from tests.patterns.zeps.test_budgets import MiB, nofile, open_fds, poll, rss

pytestmark = pytest.mark.timeout(120)
HERE = os.path.dirname(os.path.abspath(__file__))


def test_a_huge_frame_is_dropped_unread_and_counted(processes, peers):
    """Defect 4: a 64 MiB request frame (max_message 4 MiB) is never read by the broker; others are served."""
    proc = processes([sys.executable, os.path.join(HERE, "_budget_broker.py"), json.dumps({"max_message": 4 * MiB})],
                     stdout=gevent.subprocess.PIPE, text=True)
    endpoint = proc.stdout.readline().strip()
    assert endpoint.startswith("tcp://")

    def counters():
        proc.send_signal(signal.SIGUSR1)
        return json.loads(proc.stdout.readline())["counters"]

    worker = Echo(endpoint, heartbeat=0.2)
    client = Client(endpoint, timeout=5.0, retries=1)
    try:
        assert client.request("echo", b"x" * MiB) == [[b"x" * MiB]]  # under the limit: served
        before = rss(proc.pid)
        attacker = peers(endpoint)
        attacker.send(b"MDPC02", b"\x01", b"echo", bytes(64 * MiB))
        assert poll(lambda: counters().get("disconnects", 0) >= 1), "the connection was not dropped"
        grown = rss(proc.pid) - before
        assert grown < 16 * MiB, "the broker grew by %.1f MiB for one refused frame" % (grown / MiB)
        assert client.request("echo", b"after") == [[b"after"]]
        assert counters().get("replies") == 2
    finally:
        client.close()
        worker.destroy()


def test_a_connection_flood_under_ulimit_1024_is_refused_and_clients_are_served(processes):
    """Issue 20: 1,500 connections (half of them sharing one routing id) under ``ulimit -n 1024`` pinned the
    broker at every descriptor it had (EMFILE).  Connections past half the fds are shut at once, counted and
    logged once per 1000; the clients are served all along and after."""
    proc = processes([sys.executable, os.path.join(HERE, "_budget_broker.py"), json.dumps({"heartbeat": 0.5})],
                     stdout=gevent.subprocess.PIPE, stderr=gevent.subprocess.PIPE, text=True,
                     preexec_fn=nofile(1024))
    endpoint = proc.stdout.readline().strip()
    assert endpoint.startswith("tcp://")
    log = []
    reader = gevent.spawn(lambda: [log.append(line) for line in proc.stderr])

    def counters():
        proc.send_signal(signal.SIGUSR1)
        return json.loads(proc.stdout.readline())["counters"]

    worker = Echo(endpoint, heartbeat=0.5)
    client = Client(endpoint, timeout=20.0, retries=1)
    flood = []
    try:
        assert client.request("echo", b"first") == [[b"first"]]
        for i in range(1500):
            sock = context().socket(zmq.DEALER, socket_class=Socket)
            sock.linger = 0
            if i % 2:
                sock.routing_id = b"same-id"
            sock.connect(endpoint)
            flood.append(sock)
            if i % 250 == 249:
                assert client.request("echo", b"%d" % i) == [[b"%d" % i]]    # served all along
                assert open_fds(proc.pid) < 1000
        refused = poll(lambda: (lambda n: n if n >= 900 else None)(counters().get("connections_refused", 0)),
                       timeout=60)
        for sock in flood:
            sock.close(0)
        flood = []
        with Client(endpoint, timeout=20.0, retries=1) as late:     # a newcomer once the flood is gone
            assert late.request("echo", b"late") == [[b"late"]]
        assert proc.poll() is None
        print("connections refused: %s of 1500 (budget %d)" % (refused, 1024 // 2 - 64))
        assert refused, counters()
        text = "".join(log)
        assert "Too many open files" not in text and "EMFILE" not in text, text[-2000:]
        assert 1 <= text.count("connections at once") <= 2, text[-2000:]     # logged once per 1000
    finally:
        for sock in flood:
            sock.close(0)
        client.close()
        worker.destroy()
        reader.kill()
