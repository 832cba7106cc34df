"""Sequences are never reused silently (issue 19): a subscriber resuming after any number of broker runs
is told of a rollback exactly when the journal's epochs say its position was lost (the EPOCH extension)."""
import os

import pytest

from zactors.actors.journal import CLEAN_NAME
from zactors.patterns.zeps import Subscriber, protocol as p
from zactors.patterns.zeps.client import StreamRolledBack

from .test_clients import _rebind
from .test_replay_errors import _fill, _segments

pytestmark = pytest.mark.timeout(120)


def _crash_and_power_loss(journal_dir, stream="s"):
    """What a broker killed before its clean close, on a machine that then lost power, leaves: no
    clean-close marker, and the active segment without its unsynced tail."""
    os.unlink(os.path.join(journal_dir, stream, CLEAN_NAME))
    active = _segments(journal_dir, stream)[-1]
    os.truncate(active, os.path.getsize(active) * 2 // 3)


def _resume(raw, endpoint, epoch, seq):
    """A zactors-style resume at the wire: FEATURES "epochs" (answered EPOCH), then EPOCH and SUBSCRIBE."""
    peer = raw(endpoint)
    peer.send(p.attach(b"s"))
    peer.expect(p.AttachOk)
    peer.send(p.features(b"epochs"))
    told = peer.expect(p.Epoch)
    peer.send(p.epoch(epoch, seq))
    peer.send(p.subscribe(b"", seq))
    return peer, told


def test_a_subscriber_resuming_after_two_broker_runs_is_told_its_position_was_lost(journal_dir, raw):
    from zactors.patterns.zeps.broker import Broker
    broker = Broker(journal_dir, heartbeat=0.2, expiry=1.0)
    endpoint = broker.endpoint
    sub = Subscriber(endpoint, "s", heartbeat=0.2, expiry=1.0, wait=True)
    try:
        _fill(endpoint, 500)
        assert [sub.get(timeout=20).seq for _ in range(500)][-1] == 500
        broker.destroy()
        _crash_and_power_loss(journal_dir)
        # run 2, on another endpoint (the subscriber never sees it): recovery cut the stream and started
        # epoch 2 after the cut; new messages take the stream past 500; then a clean close
        with Broker(journal_dir, heartbeat=0.2, expiry=1.0) as second:
            floor = second.call("INFO")["streams"]["s"]["last_seq"]
            assert 0 < floor < 500
            _fill(second.endpoint, 600)
        # run 3, where the subscriber waits: opened cleanly (still epoch 2), its last sequence past 500
        broker = _rebind(lambda: Broker(journal_dir, endpoint, heartbeat=0.2, expiry=1.0))
        assert broker.call("INFO")["streams"]["s"]["last_seq"] == floor + 600 > 500
        with pytest.raises(StreamRolledBack) as rolled:
            sub.get(timeout=20)  # before: 501.. delivered as if nothing happened, floor+1..500 never seen
        assert (rolled.value.last_seq, rolled.value.held, rolled.value.stream) == (floor, 500, b"s")
        assert str(rolled.value).startswith("ROLLBACK: stream s: epoch 1 ends at sequence %d, before the 500"
                                            % floor)
        assert sub.stats["rollbacks"] == 1
        with pytest.raises(StreamRolledBack):  # and nothing past the rollback is handed out
            sub.get(timeout=0.5)
        rollbacks = broker.call("$STATS")["rollbacks"]

        # exactly when check_resume says so: floor of epoch 1 survived, floor + 1 did not
        kept, told = _resume(raw, endpoint, 1, floor)
        assert told == p.Epoch(2, floor + 1)  # the stream's epoch, and where it started
        kept.expect(p.SubscribeOk)
        kept.send(p.credit(1 << 20))
        assert kept.expect(p.Deliver).sequence == floor + 1
        lost, _ = _resume(raw, endpoint, 1, floor + 1)
        assert lost.expect(p.Invalid).reason.startswith(
            "ROLLBACK: stream s: epoch 1 ends at sequence %d, before the %d you resume after" % (floor, floor + 1))
        current, _ = _resume(raw, endpoint, 2, floor + 600)
        current.expect(p.SubscribeOk)
        unknown, _ = _resume(raw, endpoint, 9, 3)  # an epoch this journal never had: nothing it holds is known
        assert unknown.expect(p.Invalid).reason.startswith("ROLLBACK: stream s: epoch 9 ends at sequence 0,")
        assert broker.call("$STATS")["rollbacks"] == rollbacks + 2

        # a spec-only client (no FEATURES, no EPOCH) resumes as the spec says: it has no epoch to tell
        spec = raw(endpoint)
        spec.send(p.attach(b"s"))
        spec.expect(p.AttachOk)
        spec.send(p.subscribe(b"", 500))
        spec.expect(p.SubscribeOk)
        spec.send(p.credit(1 << 20))
        assert spec.expect(p.Deliver).sequence == 501
        early = raw(endpoint)  # EPOCH is for a peering
        early.send(p.epoch(1, 5))
        assert "EPOCH before ATTACH" in early.expect(p.Invalid).reason
        early.expect(p.Detach)
    finally:
        sub.destroy()
        broker.destroy()
