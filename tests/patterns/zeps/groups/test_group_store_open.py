"""A stream's first JOIN opens (creates) its groups' journal off the broker's loop: a slow disk does not
stop the broker serving everyone else meanwhile (it blocked the loop for the whole open, fsyncs included)."""
import time

import gevent
import pytest

from zactors.patterns.zeps import broker_groups
from zactors.patterns.zeps.consumer import Consumer

from .conftest import make_broker, publish

pytestmark = pytest.mark.timeout(60)
#: how long the disk takes to open a group journal here
SLOW = 0.8


def test_a_first_join_opens_the_groups_journal_off_the_loop(journal_dir, monkeypatch):
    real = broker_groups.load

    def slow_disk(directory):
        time.sleep(SLOW)                  # (a blocking sleep: where this runs, nothing else does)
        return real(directory)

    monkeypatch.setattr(broker_groups, "load", slow_disk)
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", [(b"k", b"one")])
        joining = gevent.spawn(Consumer, broker.endpoint, "s", "work", timeout=10)
        slowest, before = 0.0, time.monotonic()
        while not joining.ready():        # the broker answers INFO all along (and this greenlet runs)
            broker.call("INFO")
            gevent.sleep(0.02)
            now = time.monotonic()
            slowest, before = max(slowest, now - before), now
        consumer = joining.get()
        try:
            assert consumer.get(timeout=10).body == b"one"
        finally:
            consumer.destroy()
        print("\nINFO every %.3f s at most while the group journal opened (%.1f s)" % (slowest, SLOW))
        assert slowest < SLOW / 2
    finally:
        broker.destroy()
