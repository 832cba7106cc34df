"""Idempotent publishing (PUBLISH-ID): unconfirmed messages are sent again after a lost peering and the
broker drops the ones it journaled already.  The producer ids and sequences are in the journal, so this
holds across a broker restart, even a kill -9: exactly once, in order."""
import os
import signal

import pytest

from zactors.patterns.zeps import Publisher, protocol as p

from ...conftest import wait_for
from .test_publisher_loss import broker_process  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(180)


def _bodies(journal_dir, stream="s"):
    from zactors.actors.journal import JournalReader
    with JournalReader(os.path.join(journal_dir, stream)) as reader:
        return [r.body for r in reader.records()]


def test_a_peering_the_broker_dropped_loses_and_duplicates_nothing(journal_dir):
    from zactors.patterns.zeps.broker import Broker
    with Broker(journal_dir, heartbeat=0.2, expiry=0.6) as broker:
        pub = Publisher(broker.endpoint, "s", idempotent=True, heartbeat=30.0, expiry=60.0)  # no keep-alive
        try:
            for i in range(1000):
                pub.publish(b"k", b"%d" % i)
            wait_for(lambda: broker.call("$STATS").get("peers_expired", 0) >= 1, timeout=30,
                     what="the broker to drop the silent publisher")  # the 1000 journaled, never confirmed
            for i in range(1000, 3000):
                pub.publish(b"k", b"%d" % i)  # refused on the dropped peering until it attaches again
            pub.flush()
            assert pub.stats["reattached"] >= 1 and pub.stats["resent"] >= 1000
            assert _bodies(journal_dir) == [b"%d" % i for i in range(3000)]  # each once, in order
            assert broker.call("$STATS").get("duplicates_dropped", 0) >= 1000
        finally:
            pub.close()


def test_a_broker_kill_loses_nothing_and_duplicates_nothing(broker_process, journal_dir):  # noqa: F811
    """kill -9 the broker in the middle of the stream, go on publishing while it is down, restart it on the
    same journal and endpoint, go on publishing: the stream holds each message once, in order."""
    proc, endpoint = broker_process()
    pub = Publisher(endpoint, "s", idempotent=True, heartbeat=0.2, expiry=1.0)
    try:
        n = 60000
        for i in range(n // 3):
            pub.publish(b"k", b"%d" % i)
        proc.send_signal(signal.SIGKILL)  # with many of them in flight, journaled but not confirmed
        proc.wait()
        kept = len(_bodies(journal_dir))
        for i in range(n // 3, 2 * n // 3):
            pub.publish(b"k", b"%d" % i)  # while it is down
        broker_process(endpoint)
        for i in range(2 * n // 3, n):
            pub.publish(b"k", b"%d" % i)
        pub.flush(timeout=60)  # no MessagesLost: what was not confirmed was sent again
        assert _bodies(journal_dir) == [b"%d" % i for i in range(n)]  # each once, in order
        assert kept <= n // 3 and pub.stats["resent"] >= n // 3 - kept
    finally:
        pub.close()


def test_a_restarted_broker_knows_what_its_journal_kept(journal_dir, raw):
    """The producer table is seeded from the journal when the stream opens: a resend of what the previous
    broker journaled is dropped; what it did not journal is journaled."""
    from zactors.patterns.zeps.broker import Broker
    for run in range(2):
        with Broker(journal_dir) as broker:
            peer = raw(broker.endpoint)
            peer.send(p.attach(b"s"))
            peer.expect(p.AttachOk)
            for sequence in range(1, 4 + run * 2):  # run 0: 1..3; run 1 resends 1..3, then 4, 5
                peer.send(p.publish_id(77, sequence, b"k", b"%d" % sequence))
            peer.send(p.publish_id(88 + run, 1, b"k", b"other %d" % run))
            peer.send(p.PING_FRAME)
            peer.expect(p.PingOk)
            stats = broker.call("$STATS")
            assert stats.get("duplicates_dropped", 0) == 3 * run
            assert broker.call("INFO")["streams"]["s"]["producers"] == 2 + run
    assert _bodies(journal_dir) == [b"1", b"2", b"3", b"other 0", b"4", b"5", b"other 1"]


def test_the_producer_table_has_a_budget(journal_dir, raw):
    from zactors.patterns.zeps.broker import Broker
    with Broker(journal_dir, max_producers=2) as broker:
        peer = raw(broker.endpoint)
        peer.send(p.attach(b"s"))
        peer.expect(p.AttachOk)
        for producer in (1, 2, 1, 3, 1, 2):  # 3 evicts 1 (the least recently appended), then 1 evicts 2
            peer.send(p.publish_id(producer, 1, b"k", b"%d" % producer))
        peer.send(p.PING_FRAME)
        peer.expect(p.PingOk)
        stats = broker.call("$STATS")
        assert stats["duplicates_dropped"] == 1 and stats["producers_evicted"] == 3
        assert _bodies(journal_dir) == [b"1", b"2", b"3", b"1", b"2"]
        assert broker.call("INFO")["streams"]["s"]["producers"] == 2


@pytest.mark.parametrize("restart", [False, True])
def test_a_restart_changes_no_duplicate_decision(tmp_path, raw, restart):
    """One producer table, the journal's: the broker decides from what a restart rebuilds, so the same
    resends are dropped (or journaled) with or without a restart between.  (It kept a second table of
    its own, where a duplicate made its producer recent: 1 stayed and 2 went, while the journal, and so
    the broker after a restart, kept 2 and forgot 1.)"""
    from zactors.patterns.zeps.broker import Broker
    journal_dir = str(tmp_path / "j")

    def send(broker, messages):
        peer = raw(broker.endpoint)
        peer.send(p.attach(b"s"))
        peer.expect(p.AttachOk)
        for producer, body in messages:
            peer.send(p.publish_id(producer, 1, b"k", body))
        peer.send(p.PING_FRAME)
        peer.expect(p.PingOk)
        peer.close()

    first = [(1, b"1"), (2, b"2"), (1, b"1"), (3, b"3")]   # the journal keeps 2 and 3 (1 is the oldest)
    resends = [(2, b"2 again"), (1, b"1 again")]
    with Broker(journal_dir, max_producers=2) as broker:
        send(broker, first)
        if not restart:
            send(broker, resends)
    if restart:
        with Broker(journal_dir, max_producers=2) as broker:
            send(broker, resends)
    assert _bodies(journal_dir) == [b"1", b"2", b"3", b"1 again"]  # 2's resend dropped, 1's journaled
