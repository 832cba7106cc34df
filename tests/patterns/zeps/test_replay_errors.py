"""What a subscriber is told when the journal cannot give it what it asked for (issue 19, defects 6 and 7,
and the rollback of a journal restarted lower): an error or a GAP it can see, never a silent stall or skip."""
import os

import pytest

from zactors.patterns.zeps import Publisher, Subscriber, protocol as p
from zactors.patterns.zeps.client import ReplayError, StreamRolledBack

from ...conftest import wait_for
from .test_clients import _rebind
from .test_publisher_loss import broker_process  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(120)


def _segments(journal_dir, stream="s"):
    directory = os.path.join(journal_dir, stream)
    return [os.path.join(directory, name) for name in sorted(os.listdir(directory)) if name.endswith(".seg")]


def _fill(endpoint, n, stream="s"):
    with Publisher(endpoint, stream) as pub:
        for i in range(n):
            pub.publish(b"k.%d" % (i % 3), b"body %05d " % i + b"x" * 50)
        pub.flush()


def test_a_flipped_byte_in_a_sealed_segment_is_an_error_naming_stream_and_sequence(journal_dir, raw):
    from zactors.patterns.zeps.broker import Broker
    with Broker(journal_dir, segment_bytes=8192) as broker:
        _fill(broker.endpoint, 1000)
    sealed = _segments(journal_dir)[1]             # neither the first nor the active one
    base = int(os.path.basename(sealed).split(".")[0])
    with open(sealed, "r+b") as f:
        f.seek(3000)
        byte = f.read(1)
        f.seek(3000)
        f.write(bytes([byte[0] ^ 0x40]))
    with Broker(journal_dir, segment_bytes=8192) as broker:
        sub = Subscriber(broker.endpoint, "s", from_seq=0)
        try:
            got = []
            with pytest.raises(ReplayError) as failed:
                while True:
                    message = sub.get(timeout=20)
                    assert message is not None, "stalled after %d messages with no error" % len(got)
                    got.append(message.seq)
            assert got == list(range(1, len(got) + 1))  # every message before the bad one
            bad = failed.value.seq
            assert bad == len(got) + 1 and base < bad < base + 200
            assert failed.value.stream == b"s"
            assert "stream s: sequence %d cannot be read" % bad in str(failed.value)
            assert sub.error is failed.value
        finally:
            sub.destroy()
        # a spec-only client hears it too: INVALID with the reason, after the messages before
        peer = raw(broker.endpoint)
        peer.send(p.attach(b"s"))
        peer.expect(p.AttachOk)
        peer.send(p.subscribe(b"", bad - 3))
        peer.expect(p.SubscribeOk)
        peer.send(p.credit(1 << 20))
        assert [peer.recv().sequence for _ in range(2)] == [bad - 2, bad - 1]
        assert peer.expect(p.Invalid).reason.startswith("REPLAY: stream s: sequence %d cannot be read" % bad)
        assert broker.call("$STATS")["replay_errors"] >= 2


def _retained(broker):
    broker.send("RETAIN")
    return broker.call("INFO")["streams"]["s"]["first_seq"] > 1


@pytest.mark.parametrize("pattern", [b"", b"k.1"])
def test_a_retention_gap_is_reported(journal_dir, pattern):
    from zactors.patterns.zeps.broker import Broker
    with Broker(journal_dir, segment_bytes=4096, retain_bytes=8192) as broker:
        _fill(broker.endpoint, 400)
        wait_for(lambda: _retained(broker), timeout=30, what="retention to remove segments")
        first = broker.call("INFO")["streams"]["s"]["first_seq"]
        told = []
        sub = Subscriber(broker.endpoint, "s", pattern, from_seq=1, on_gap=lambda a, b: told.append((a, b)))
        try:
            message = sub.get(timeout=20)
            assert message.seq >= first
            wait_for(lambda: sub.gaps, timeout=10, what="the gap to be reported")
            assert sub.gaps == told == [(1, first - 1)]
            assert sub.stats["gaps"] == 1 and sub.stats["gap_sequences"] == first - 1
        finally:
            sub.destroy()


def test_a_subscriber_resuming_past_a_journal_cut_shorter_is_told_of_the_rollback(journal_dir, raw):
    from zactors.patterns.zeps.broker import Broker
    broker = Broker(journal_dir, heartbeat=0.2, expiry=1.0)
    endpoint = broker.endpoint
    sub = Subscriber(endpoint, "s", heartbeat=0.2, expiry=1.0, wait=True)
    try:
        _fill(endpoint, 500)
        got = [sub.get(timeout=20).seq for _ in range(500)]
        assert got[-1] == 500
        broker.destroy()
        active = _segments(journal_dir)[-1]  # a power loss: the unsynced tail of the active segment is gone
        os.truncate(active, os.path.getsize(active) * 2 // 3)
        broker = _rebind(lambda: Broker(journal_dir, endpoint, heartbeat=0.2, expiry=1.0))
        last = broker.call("INFO")["streams"]["s"]["last_seq"]
        assert 0 < last < 500
        with pytest.raises(StreamRolledBack) as rolled:
            sub.get(timeout=20)  # before: None, and the new messages last+1..500 dropped as duplicates
        assert (rolled.value.last_seq, rolled.value.held, rolled.value.stream) == (last, 500, b"s")
        assert str(rolled.value).startswith("ROLLBACK: stream s") and "sequence %d" % last in str(rolled.value)
        # a spec-only client resuming there: its SUBSCRIBE is answered INVALID "ROLLBACK: ..."
        peer = raw(endpoint)
        peer.send(p.attach(b"s"))
        peer.expect(p.AttachOk)
        peer.send(p.subscribe(b"", 500))
        assert peer.expect(p.Invalid).reason.startswith(
            "ROLLBACK: stream s ends at sequence %d, before the 500 you resume after" % last)
        assert broker.call("$STATS")["rollbacks"] >= 1
        _fill(endpoint, 10)  # the stream goes on from the cut: a new subscriber from there gets the new ones
        with Subscriber(endpoint, "s", from_seq=last + 1) as fresh:
            assert [fresh.get(timeout=20).seq for _ in range(10)] == list(range(last + 1, last + 11))
    finally:
        sub.destroy()
        broker.destroy()


def test_a_rollback_is_seen_even_when_new_messages_took_the_stream_past_what_the_subscriber_holds(
        broker_process, journal_dir):  # noqa: F811
    """The race the ROLLBACK check alone misses: publishers refill the stream past N before the subscriber
    resumes after N; the broker run's EPOCH (its floor is below N) still tells."""
    import signal

    from zactors.patterns.zeps import query
    proc, endpoint = broker_process()
    sub = Subscriber(endpoint, "s", heartbeat=5.0, expiry=30.0, wait=True)  # slow to notice the restart
    try:
        _fill(endpoint, 500)
        assert [sub.get(timeout=20).seq for _ in range(500)][-1] == 500
        proc.send_signal(signal.SIGKILL)  # no DETACH: the subscriber does not know yet
        proc.wait()
        active = _segments(journal_dir)[-1]
        os.truncate(active, os.path.getsize(active) * 2 // 3)
        broker_process(endpoint)
        floor = query(endpoint)["streams"]["s"]["last_seq"]
        _fill(endpoint, 600)  # other messages now hold floor+1..500, and the stream goes past 500
        assert query(endpoint)["streams"]["s"]["last_seq"] == floor + 600 > 500
        assert sub.stats["reattached"] == 0, "the subscriber came back too early for this test"
        with pytest.raises(StreamRolledBack) as rolled:
            sub.get(timeout=30)  # before: 501.. delivered as if nothing happened, floor+1..500 never seen
        assert (rolled.value.last_seq, rolled.value.held) == (floor, 500)
        assert sub.stats["rollbacks"] == 1
        with pytest.raises(StreamRolledBack):  # and nothing past the rollback is handed out
            sub.get(timeout=0.5)
    finally:
        sub.destroy()
