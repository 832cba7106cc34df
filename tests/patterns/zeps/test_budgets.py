"""Budgets for what a peer can make the ZEPS broker hold: frame size, credit windows, streams.

Each broker runs in a process of its own, so that its RSS and descriptors are
measured alone.
"""
import json
import os
import sys

import gevent
import gevent.subprocess
import pytest

from zactors.patterns.zeps import protocol as p
from zactors.patterns.zeps.client import Publisher, query

from .conftest import Raw

pytestmark = pytest.mark.timeout(120)
pytest.importorskip("zactors.actors.journal")

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def rss(pid):
    """Resident set size of process ``pid``, bytes (Linux)."""
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for %d" % pid)


def poll(observe, timeout=30.0, step=0.05):
    """Observe another process until ``observe()`` is true (or ``timeout``); its last value."""
    value = observe()
    with gevent.Timeout(timeout, False):
        while not value:
            gevent.sleep(step)
            value = observe()
    return value


class BrokerProcess:
    def __init__(self, start, journal_dir, preexec_fn=None, **options):
        self.proc = start([sys.executable, os.path.join(HERE, "_budget_broker.py"), journal_dir,
                           json.dumps(options)], stdout=gevent.subprocess.PIPE, text=True, preexec_fn=preexec_fn)
        self.endpoint = self.proc.stdout.readline().strip()
        assert self.endpoint.startswith("tcp://"), "the broker did not start"
        self.pid = self.proc.pid

    def info(self):
        return query(self.endpoint, timeout=10.0)

    def counters(self):
        return self.info()["counters"]

    def rss(self):
        return rss(self.pid)


@pytest.fixture
def spawn(journal_dir, processes):
    def make(**options):
        return BrokerProcess(processes, journal_dir, **options)

    return make


def test_a_huge_frame_is_dropped_unread_and_counted(spawn):
    """Defect 4: a 64 MiB frame (max_message 1 MiB) took the broker's RSS up by its size; no longer."""
    broker = spawn()
    with Publisher(broker.endpoint, "s") as pub:  # warm up: the stream and its journal exist
        pub.publish(b"k", b"v")
        pub.flush()
    before = broker.rss()
    attacker = Raw(broker.endpoint)
    try:
        attacker.send(p.attach(b"s"))
        attacker.expect(p.AttachOk)
        attacker.send(p.publish(b"k", bytes(64 * MiB)))
        assert poll(lambda: broker.counters().get("disconnects", 0) >= 1), "the connection was not dropped"
    finally:
        attacker.close()
    grown = broker.rss() - before
    assert grown < 16 * MiB, "the broker grew by %.1f MiB for one refused frame" % (grown / MiB)
    with Publisher(broker.endpoint, "s") as pub:  # everyone else is served
        pub.publish(b"k", b"after")
        pub.flush()
    assert query(broker.endpoint)["streams"]["s"]["last_seq"] == 2
