"""Budgets for what a peer can make an MDP broker hold: the frame size (ZMQ_MAXMSGSIZE)."""
import json
import os
import signal
import sys

import gevent.subprocess
import pytest

from zactors.patterns.majordomo import Client
from tests.patterns.majordomo.conftest import Echo
from tests.patterns.zeps.test_budgets import MiB, poll, rss

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
