"""Streams opened and closed off the broker's loop: a flood of new streams does not stall anyone else.

Each journal costs a few fsyncs to create and to close (tens of milliseconds on
a busy disk).  They used to run in the broker's loop: 150 new streams at once
stalled every peer of the broker for seconds (issue #20, the hostile soak).
"""
import time

import gevent
import pytest

from zactors.patterns.zeps import protocol as p

from .conftest import Raw
from .test_budgets import BrokerProcess, poll

pytestmark = pytest.mark.timeout(180)
pytest.importorskip("zactors.actors.journal")

#: a PING round trip this long means the broker's loop stopped (quiet: a few ms; loaded: ~100 ms)
STALL = 0.5


def test_a_flood_of_new_streams_does_not_stall_the_broker(journal_dir, processes):
    broker = BrokerProcess(processes, journal_dir, streams=["good"], max_streams=4096, stream_idle=0.5)
    good = Raw(broker.endpoint)
    good.send(p.attach(b"good"))
    good.expect(p.AttachOk)
    flood = []
    rtts = []
    try:
        for wave in range(3):
            for i in range(150):  # each ATTACHes a new stream and publishes into it at once (pipelined)
                peer = Raw(broker.endpoint)
                peer.send(p.attach(b"flood-%d-%d" % (wave, i)))
                peer.send(p.publish(b"k", b"v"))
                peer.send(p.PING_FRAME)
                flood.append(peer)
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:   # meanwhile: a PING round trip, again and again
                t0 = time.monotonic()
                good.send(p.PING_FRAME)
                good.expect(p.PingOk, timeout=30)
                rtts.append(time.monotonic() - t0)
                gevent.sleep(0.01)
        # each flood peer was attached (then its PUBLISH, held meanwhile, kept and its PING answered) or refused
        attached = refused = 0
        for peer in flood:
            first = peer.recv(timeout=30)
            if type(first) is p.Invalid:
                assert first.reason.startswith(("busy: ", "too many open streams")), first.reason
                refused += 1
                continue
            assert type(first) is p.AttachOk, first
            peer.expect(p.PingOk, timeout=30)
            attached += 1
        info = broker.info()
        kept = [s for name, s in info["streams"].items() if name.startswith("flood-")]
        assert len(kept) == attached > 0 and all(s["last_seq"] == 1 for s in kept)
        assert info["counters"].get("streams_refused", 0) == refused
    finally:
        for peer in flood:
            peer.close()
        good.close()
    print("PING round trips during the flood: max %.0f ms (%d), %d streams attached, %d refused"
          % (max(rtts) * 1000, len(rtts), attached, refused))
    assert max(rtts) < STALL, "the broker stalled %.0f ms while streams opened" % (max(rtts) * 1000)
    # and they turn over: idle, they close off the loop (their files kept: each holds a message)
    assert poll(lambda: broker.info()["stream_budget"]["open"] == 1, timeout=60)


def test_commands_sent_before_attach_ok_are_served_in_order(journal_dir, processes):
    """A pipelined publisher (ATTACH, then PUBLISHes at once) on a stream whose journal opens first."""
    broker = BrokerProcess(processes, journal_dir)
    peer = Raw(broker.endpoint)
    try:
        peer.send(p.attach(b"fresh"))
        for i in range(100):
            peer.send(p.publish(b"k", b"%d" % i))
        peer.send(p.PING_FRAME)
        peer.expect(p.AttachOk)
        peer.expect(p.PingOk)
    finally:
        peer.close()
    reader = Raw(broker.endpoint)
    try:
        reader.send(p.attach(b"fresh"))
        reader.expect(p.AttachOk)
        reader.send(p.subscribe(b"", 0))
        reader.expect(p.SubscribeOk)
        reader.send(p.credit(1 << 20))
        bodies = [reader.expect(p.Deliver, timeout=10).body for _ in range(100)]
    finally:
        reader.close()
    assert bodies == [b"%d" % i for i in range(100)]
