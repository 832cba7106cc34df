"""A broker whose disk fills up: publishers are told, nothing is lost silently, it recovers."""
import pytest

from tests.actors.test_journal_enospc import small_disk  # noqa: F401  (fixture: a 256 KiB tmpfs)
from zactors.patterns.zeps import Publisher, Subscriber, ZepsError

from ...conftest import wait_for

pytestmark = pytest.mark.timeout(60)


def test_enospc_is_surfaced_to_publishers_and_the_broker_recovers(small_disk):  # noqa: F811
    from zactors.patterns.zeps.broker import Broker
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (96 << 10))
    broker = Broker(str(small_disk / "journal"), segment_bytes=1 << 20)
    pub = Publisher(broker.endpoint, "s")
    try:
        refused = None
        for batch in range(40):
            for i in range(20):
                pub.publish(b"k", bytes(1000))
            try:
                pub.flush()
            except ZepsError as exc:
                refused = str(exc)
                break
        assert refused is not None and ("space" in refused or "refuse" in refused), refused
        assert broker.alive
        filler.unlink()  # space comes back: the held records are written, appends are taken again
        wait_for(lambda: _flushed(pub), timeout=20, what="the journal writing again")
        pub.publish(b"k", b"after")
        pub.flush()
        last = broker.call("INFO")["streams"]["s"]["last_seq"]
        sub = Subscriber(broker.endpoint, "s", from_seq=1)
        try:
            got = [sub.get(10) for _ in range(last)]
            assert [m.seq for m in got] == list(range(1, last + 1))  # sequenced means kept: no gap
            assert got[-1].body == b"after"
        finally:
            sub.destroy()
        assert broker.call("$STATS").get("journal_refused", 0) + broker.call("$STATS").get(
            "journal_write_errors", 0) >= 1
    finally:
        pub.close()
        broker.destroy()


def _flushed(pub):
    try:
        pub.flush(timeout=2)
        return True
    except ZepsError:
        return False


# -- the JOURNALED field: a refused producer is told exactly what was kept --------------------------
@pytest.mark.parametrize("ack", ["written", "synced"])
def test_an_idempotent_publisher_is_told_exactly_what_was_journaled(small_disk, ack):  # noqa: F811
    from zactors.patterns.zeps.broker import Broker
    (small_disk / "filler").write_bytes(b"\0" * (96 << 10))
    broker = Broker(str(small_disk / "journal"), segment_bytes=1 << 20, ack=ack)
    pub = Publisher(broker.endpoint, "s", idempotent=True)
    try:
        for i in range(4000):
            pub.publish(b"k", b"%0200d" % i)
        with pytest.raises(ZepsError):
            pub.flush(timeout=20)
        stream = broker.call("INFO")["streams"]["s"]
        level = stream["written_seq"] if ack == "written" else broker.call("INFO")["streams"]["s"]["synced_seq"]
        assert 0 < level < 4000
        if ack == "written":
            assert pub.journaled == level == pub.confirmed       # exact: one producer, sequences from 1
            assert pub.held == (stream["last_seq"] if stream["last_seq"] > level else 0)
        else:  # an fsync under way when the refusal left may cover more since: what was said was then true
            assert pub.journaled == pub.confirmed <= level <= max(pub.held, pub.journaled)   # (0: no fsync yet)
            assert pub.held in (0, stream["last_seq"])
        assert "ENOSPC" in pub.refusal and "[journaled" not in pub.refusal, pub.refusal
    finally:
        pub.close()
        broker.destroy()


def test_a_spec_only_client_never_sees_the_journaled_field(small_disk, raw):  # noqa: F811
    from zactors.patterns.zeps import protocol as p
    from zactors.patterns.zeps.broker import Broker
    (small_disk / "filler").write_bytes(b"\0" * (96 << 10))
    broker = Broker(str(small_disk / "journal"), segment_bytes=1 << 20)
    try:
        peer = raw(broker.endpoint)
        peer.send(p.attach(b"s"))
        peer.expect(p.AttachOk)
        reasons = []
        for batch in range(40):           # plain PUBLISH, then PING: as the spec has them
            for i in range(50):
                peer.send(p.publish(b"k", bytes(1000)))
            peer.send(p.PING_FRAME)
            while True:
                message = peer.recv(timeout=20)   # decodes as a spec INVALID / PING-OK
                if type(message) is p.PingOk:
                    break
                assert type(message) is p.Invalid, message
                reasons.append(message.reason)
                if message.reason.startswith("PING:"):
                    break
            if reasons:
                break
        assert reasons and any("ENOSPC" in r for r in reasons), reasons
        assert not any("journaled" in r for r in reasons), reasons
        assert broker.alive
    finally:
        broker.destroy()


def test_an_idempotent_publisher_keeps_every_message_once_in_order_across_a_full_disk(small_disk):  # noqa: F811
    """The broker refuses every message of a producer after the first it refused (so what it keeps is
    always the first N), the publisher sends them again at its next flush: once the disk has room, the
    journal holds every message once, in order (before, the refused ones were confirmed by a later
    PING-OK and never sent again: a silent gap)."""
    from zactors.patterns.zeps.broker import Broker
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (96 << 10))
    broker = Broker(str(small_disk / "journal"), segment_bytes=1 << 20)
    pub = Publisher(broker.endpoint, "s", idempotent=True)
    n = 0
    try:
        for _ in range(40):                   # until the journal refuses
            for _ in range(100):
                pub.publish(b"k", b"%08d" % n + bytes(80))
                n += 1
            try:
                pub.flush(timeout=20)
            except ZepsError:
                break
        else:
            raise AssertionError("the journal never refused")
        for _ in range(200):                  # published while it refuses: refused too, kept by the publisher
            pub.publish(b"k", b"%08d" % n + bytes(80))
            n += 1
        filler.unlink()                       # room again: the next flushes send the refused ones again
        wait_for(lambda: _flushed(pub), timeout=20, what="the refused messages journaled")
        last = broker.call("INFO")["streams"]["s"]["last_seq"]
        sub = Subscriber(broker.endpoint, "s", from_seq=1)
        try:
            got = [sub.get(10) for _ in range(last)]
        finally:
            sub.destroy()
        assert [m.body[:8] for m in got] == [b"%08d" % i for i in range(n)]   # all, once, in order
        assert pub.confirmed == n and pub.stats["resent_refused"] > 0
    finally:
        pub.close()
        broker.destroy()
