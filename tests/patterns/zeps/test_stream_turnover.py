"""Streams opened and closed off the broker's loop: a flood of new streams does not stall anyone else.

Each journal costs a few fsyncs to create and to close (tens of milliseconds on
a busy disk).  They used to run in the broker's loop: 150 new streams at once
stalled every peer of the broker for seconds (issue #20, the hostile soak).
"""
import time

import gevent
import pytest

from zactors.patterns.zeps import protocol as p
from zactors.patterns.zeps.broker import Broker

from ...conftest import wait_for
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


def test_a_stream_attached_while_its_journal_closes_opens_after_the_close(journal_dir):
    """Two open at most: ATTACHing a new stream closes the idlest ("a") off the loop, and an ATTACH of
    "a" right behind it waits for that close before its journal opens again (the journal's lock is held
    until then): never an open error, every message kept, in order."""
    from zactors.patterns.zeps.broker import Broker

    broker = Broker(journal_dir, max_open_streams=2)
    peers = []

    def peer(name):
        raw = Raw(broker.endpoint)
        peers.append(raw)
        raw.send(p.attach(name))
        return raw

    def detach(raw):
        raw.send(p.encode(p.Detach()))
        raw.expect(p.DetachOk)

    try:
        for n in range(3):
            for name, body in ((b"a", b"a%d" % n), (b"c", b"c%d" % n)):
                raw = peer(name)
                raw.expect(p.AttachOk)
                raw.send(p.publish(b"k", body))
                raw.send(p.PING_FRAME)
                raw.expect(p.PingOk)
                detach(raw)
            gevent.sleep(1.2)                 # both idle past the 1 s a stream must be idle to be closed for another
            new = peer(b"new-%d" % n)         # closes "a", the idlest
            again = peer(b"a")                # at once: "a" is closing
            again.send(p.publish(b"k", b"again%d" % n))
            again.send(p.PING_FRAME)
            new.expect(p.AttachOk)
            again.expect(p.AttachOk)
            again.expect(p.PingOk)
            detach(new)
            detach(again)
            gevent.sleep(1.2)
        info = broker.info()
        assert info["counters"].get("journal_open_errors", 0) == 0
        reader = peer(b"a")
        reader.expect(p.AttachOk)
        reader.send(p.subscribe(b"", 0))
        reader.expect(p.SubscribeOk)
        reader.send(p.credit(1 << 20))
        bodies = [reader.expect(p.Deliver).body for _ in range(6)]
        assert bodies == [b"a0", b"again0", b"a1", b"again1", b"a2", b"again2"]
        assert info["counters"]["streams_closed"] >= 3
    finally:
        for raw in peers:
            raw.close()
        broker.destroy()


def test_commands_past_the_hold_bound_refuse_the_attach_and_no_ping_ok_covers_a_dropped_publish(tmp_path, raw):
    """A peer pipelines ATTACH (of a new stream: its journal opens off the loop) and more PUBLISHes than
    the broker holds meanwhile (4 MiB), then a PING once the journal is open.  Refusing only the
    PUBLISHes past the bound (as before) let that PING-OK confirm messages never journaled; now the
    whole ATTACH is refused ("busy:"), so nothing past it is confirmed, and the peer attaches again."""
    broker = Broker(str(tmp_path / "j"), "tcp://127.0.0.1:*")
    try:
        peer = raw(broker.endpoint)
        body = b"x" * (64 << 10)
        peer.send(p.attach(b"piped"))
        for i in range(96):                         # 6 MiB behind the ATTACH: read long before the journal opens
            peer.send(p.publish_id(7, i + 1, b"k", body))
        said = []
        wait_for(lambda: "piped" in broker.call("INFO")["streams"], timeout=30, what="the journal to open")
        peer.send(p.PING_FRAME)
        while True:                                  # what the broker answered, up to its PING answer
            message = peer.recv(timeout=30)
            said.append(message)
            if type(message) in (p.PingOk, p.Detach):
                break
        journaled = broker.call("INFO")["streams"]["piped"]["written_seq"]
        if type(said[-1]) is p.PingOk:               # acknowledged means kept
            assert journaled == 96, "a PING-OK confirmed 96 publishes, %d journaled" % journaled
        else:
            assert any(type(m) is p.Invalid and m.reason.startswith("busy: ATTACH refused") for m in said), said
        assert broker.call("$STATS").get("held_refused", 0) >= 1     # (the bound was passed: the case tested)
    finally:
        broker.destroy()
