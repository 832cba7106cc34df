"""Acknowledgement levels: with ack="synced" nothing is acknowledged or delivered before an fsync covers it."""
import pytest

from zactors.patterns.zeps import Publisher, Subscriber, protocol as p

from ...conftest import wait_for

pytestmark = pytest.mark.timeout(120)


def _journal(broker, stream=b"s"):
    """The broker's journal for ``stream`` (same process and hub: read the moment a client hears something)."""
    return broker._streams[stream].journal


@pytest.fixture
def synced_broker(journal_dir):
    from zactors.patterns.zeps.broker import Broker
    b = Broker(journal_dir, ack="synced", heartbeat=0.5, expiry=3.0)
    yield b
    b.destroy()


def test_synced_delivers_and_acknowledges_only_what_an_fsync_covered(synced_broker, raw):
    broker = synced_broker
    n = 3000
    early = []          # (seq, synced_seq when the subscriber got it) for any delivery ahead of the fsync
    got = []

    def on_message(message):
        synced = _journal(broker).synced_seq
        got.append(message.seq)
        if synced < message.seq:
            early.append((message.seq, synced))

    sub = Subscriber(broker.endpoint, "s", new=True, callback=on_message, wait=True)
    pub = raw(broker.endpoint)
    pub.send(p.attach(b"s"))
    pub.expect(p.AttachOk)
    try:
        unsynced_pings = []
        for burst in range(30):
            for i in range(n // 30):
                pub.send(p.publish(b"k", b"%d.%d" % (burst, i)))
            pub.send(p.PING_FRAME)
            pub.expect(p.PingOk)
            journal = _journal(broker)
            if journal.synced_seq < (burst + 1) * (n // 30):
                unsynced_pings.append((burst, journal.synced_seq))
        wait_for(lambda: len(got) == n, timeout=30, what="every message delivered")
        assert got == list(range(1, n + 1))
        assert early == []
        assert unsynced_pings == []
        info = broker.call("INFO")
        assert info["ack"] == "synced"
        assert info["streams"]["s"]["synced_seq"] == n
    finally:
        sub.destroy()


def test_written_is_the_default_and_delivers_before_the_fsync(journal_dir, raw):
    """The contrast that makes the test above mean something: "written" runs ahead of a 10 s fsync period."""
    from zactors.patterns.zeps.broker import Broker
    with Broker(journal_dir, fsync=10.0) as broker:
        got = []
        sub = Subscriber(broker.endpoint, "s", new=True, wait=True,
                         callback=lambda m: got.append(_journal(broker).synced_seq))
        try:
            with Publisher(broker.endpoint, "s") as pub:
                for i in range(10):
                    pub.publish(b"k", b"%d" % i)
                pub.flush()
                assert _journal(broker).synced_seq == 0  # flushed: written, not yet synced
            wait_for(lambda: len(got) == 10, timeout=10, what="delivery")
            assert max(got) == 0
            assert broker.call("INFO")["ack"] == "written"
        finally:
            sub.destroy()


def test_publisher_flush_under_synced_means_fsynced(synced_broker):
    with Publisher(synced_broker.endpoint, "s") as pub:
        for i in range(20000):
            pub.publish(b"k", b"%d" % i)
        pub.flush()
        assert _journal(synced_broker).synced_seq == 20000


def test_ack_levels_are_checked():
    from zactors.patterns.zeps.broker import Broker
    with pytest.raises(ValueError, match="ack must be"):
        Broker("/nonexistent", ack="everywhere")
    with pytest.raises(ValueError, match="needs a pair"):  # a level now: tests/patterns/zeps/pair/
        Broker("/nonexistent", ack="replicated")
    with pytest.raises(ValueError, match="cannot be 'never'"):
        Broker("/nonexistent", ack="synced", fsync="never")
