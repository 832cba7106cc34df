"""The broker at the wire: commands, credit, replay, late joiners, hostile input."""
import os

import gevent
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from zactors.patterns.zeps import protocol as p

from ...conftest import wait_for

pytestmark = pytest.mark.timeout(120)


def attached(raw, broker, stream=b"s"):
    peer = raw(broker.endpoint)
    peer.send(p.attach(stream))
    peer.expect(p.AttachOk)
    return peer


def publish(peer, messages):
    for key, body in messages:
        peer.send(p.publish(key, body))
    peer.send(p.PING_FRAME)
    peer.expect(p.PingOk)


def test_a_whole_conversation_byte_by_byte(broker, raw):
    pub = attached(raw, broker)
    sub = attached(raw, broker)
    sub.send(p.subscribe(b"a.", 0))
    sub.expect(p.SubscribeOk)
    sub.send(p.credit(1000))
    publish(pub, [(b"a.1", b"one"), (b"b.1", b"skip"), (b"a.2", b"two")])
    assert sub.recv() == p.Deliver(1, b"a.1", b"one")
    assert sub.recv() == p.Deliver(3, b"a.2", b"two")
    sub.send(p.PING_FRAME)
    sub.expect(p.PingOk)
    sub.send(p.DETACH_FRAME)
    sub.expect(p.DetachOk)
    publish(pub, [(b"a.3", b"three")])
    sub.send(p.PING_FRAME)  # no peering any more: the broker says so
    sub.expect(p.Detach)


def test_out_of_order_and_invalid_commands_get_readable_invalid(broker, raw):
    peer = raw(broker.endpoint)
    peer.send(p.publish(b"k", b"v"))
    assert "before ATTACH" in peer.expect(p.Invalid).reason
    peer.expect(p.Detach)
    peer.send(b"\xaa\xa5\x63")
    assert "unknown command id 99" in peer.expect(p.Invalid).reason
    peer.send(b"hello", b"two frames")
    assert "one ZEPS command per message" in peer.expect(p.Invalid).reason
    peer.send(p.attach(b"s", version=2))
    assert "version 2" in peer.expect(p.Invalid).reason
    peer.send(p.attach(b"s"))
    peer.expect(p.AttachOk)
    peer.send(p.attach(b"t"))
    assert "already attached" in peer.expect(p.Invalid).reason
    peer.send(p.deliver(1, b"k", b"v"))
    assert "does not accept DELIVER" in peer.expect(p.Invalid).reason
    peer.send(p.subscribe(b"re:(", 0))
    assert "bad regular expression" in peer.expect(p.Invalid).reason
    assert broker.call("$STATS")["invalid"] >= 7


def test_credit_covers_whole_messages_only(broker, raw):
    pub = attached(raw, broker)
    sub = attached(raw, broker)
    sub.send(p.subscribe(b"", 0))
    sub.expect(p.SubscribeOk)
    cost = p.deliver_cost(b"k", b"x" * 84)  # 101 bytes
    sub.send(p.credit(2 * cost + cost - 1))
    publish(pub, [(b"k", b"x" * 84)] * 5)
    assert [sub.recv().sequence for _ in range(2)] == [1, 2]
    with pytest.raises(Exception):
        sub.recv(timeout=0.3)
    sub.send(p.credit(1))  # now exactly covers the third
    assert sub.recv().sequence == 3
    sub.send(p.credit(10 * cost))
    assert [sub.recv().sequence for _ in range(2)] == [4, 5]
    publish(pub, [(b"k", b"x" * 84)])
    assert sub.recv().sequence == 6  # live again


def test_live_batches_give_each_subscriber_its_share_in_order_up_to_its_credit(broker, raw):
    """Live delivery goes per subscriber, a round's share at once: interleaved keys, overlapping
    filters and a credit that ends mid-round still give each exactly its messages, in order,
    the ones past its credit by replay once it grants more (none twice)."""
    pub = attached(raw, broker)
    cost = p.deliver_cost(b"a0", b"x" * 50)
    subs = {}
    for name, pattern, credit in (("all", b"", 1 << 20), ("a", b"a", 3 * cost + cost // 2),
                                  ("b", b"re:^b", 1 << 20), ("a-too", b"a", 1 << 20), ("none", b"c", 1 << 20)):
        sub = subs[name] = attached(raw, broker)
        sub.send(p.subscribe(pattern, p.NEW))
        sub.expect(p.SubscribeOk)
        sub.send(p.credit(credit))
        sub.send(p.PING_FRAME)  # its PING-OK: the credit is in
        sub.expect(p.PingOk)
    keys = [b"%s%d" % (k, i) for i in range(10) for k in (b"a", b"b")]
    publish(pub, [(key, b"x" * 50) for key in keys])
    got = {name: [] for name in subs}

    def take(name, count):
        for _ in range(count):
            message = subs[name].recv()
            got[name].append((message.sequence, message.key))

    take("all", 20)
    take("b", 10)
    take("a-too", 10)
    take("a", 3)
    assert got["all"] == [(i + 1, key) for i, key in enumerate(keys)]
    assert got["b"] == [(i + 1, key) for i, key in enumerate(keys) if key[:1] == b"b"]
    assert got["a-too"] == [(i + 1, key) for i, key in enumerate(keys) if key[:1] == b"a"]
    assert got["a"] == got["a-too"][:3]
    subs["a"].send(p.credit(1 << 20))  # the rest of its share, from the journal
    take("a", 7)
    assert got["a"] == got["a-too"]
    for sub in subs.values():  # and nothing more, to anyone
        sub.send(p.PING_FRAME)
        sub.expect(p.PingOk)


def test_latest_semantics_zero_middle_and_new(broker, raw):
    pub = attached(raw, broker)
    publish(pub, [(b"k", b"%d" % i) for i in range(1, 11)])
    results = {}
    for name, latest in (("zero", 0), ("middle", 6), ("new", p.NEW), ("last", 10)):
        sub = attached(raw, broker)
        sub.send(p.subscribe(b"", latest))
        sub.expect(p.SubscribeOk)
        sub.send(p.credit(1 << 20))
        results[name] = sub
    future = attached(raw, broker)  # past the end: the journal lost what it holds (see the rollback test)
    future.send(p.subscribe(b"", 12))
    assert future.expect(p.Invalid).reason.startswith("ROLLBACK: stream s ends at sequence 10, before the 12")
    publish(pub, [(b"k", b"%d" % i) for i in range(11, 14)])
    assert [results["zero"].recv().sequence for _ in range(13)] == list(range(1, 14))
    assert [results["middle"].recv().sequence for _ in range(7)] == list(range(7, 14))
    assert [results["new"].recv().sequence for _ in range(3)] == [11, 12, 13]
    assert [results["last"].recv().sequence for _ in range(3)] == [11, 12, 13]


def test_subscribe_since_replays_from_a_time(broker, raw):
    pub = attached(raw, broker)
    publish(pub, [(b"k", b"old")] * 3)
    gevent.sleep(0.05)  # timestamps must differ: this is the data, not a synchronisation
    import time
    middle = time.time()
    publish(pub, [(b"k", b"new")] * 2)
    sub = attached(raw, broker)
    sub.send(p.subscribe_since(b"", middle))
    sub.expect(p.SubscribeOk)
    sub.send(p.credit(1 << 20))
    assert [sub.recv() for _ in range(2)] == [p.Deliver(4, b"k", b"new"), p.Deliver(5, b"k", b"new")]


def test_several_subscribes_on_one_peering_deliver_each_message_once(broker, raw):
    pub = attached(raw, broker)
    sub = attached(raw, broker)
    sub.send(p.subscribe(b"a", p.NEW))
    sub.send(p.subscribe(b"re:.*1$", 0))
    sub.expect(p.SubscribeOk)
    sub.expect(p.SubscribeOk)
    sub.send(p.credit(1 << 20))
    publish(pub, [(b"a1", b""), (b"b1", b""), (b"a2", b""), (b"c2", b"")])
    assert [sub.recv().key for _ in range(3)] == [b"a1", b"b1", b"a2"]
    sub.send(p.PING_FRAME)
    sub.expect(p.PingOk)  # and nothing else before it


def test_stream_names_never_leave_the_journal_directory(broker, raw, journal_dir):
    for name in (b"../x", b"/etc", b"..", b".", b"a/../../b", b"%2e%2e"):
        pub = attached(raw, broker, name)
        publish(pub, [(b"k", name)])
    entries = os.listdir(journal_dir)
    assert len(entries) == 6
    parent = os.path.dirname(journal_dir)
    assert sorted(os.listdir(parent)) == ["journal"]
    for entry in entries:
        assert "/" not in entry and entry not in (".", "..")
    from zactors.patterns.zeps.names import stream_name
    assert sorted(stream_name(e) for e in entries) == sorted([b"../x", b"/etc", b"..", b".", b"a/../../b", b"%2e%2e"])
    peer = raw(broker.endpoint)
    peer.send(p.attach(b"x" * 81))
    assert "over 80 bytes" in peer.expect(p.Invalid).reason
    peer.send(p.attach(b"$sys"))
    assert "reserved" in peer.expect(p.Invalid).reason


def test_messages_over_the_limit_are_refused(journal_dir, raw):
    pytest.importorskip("zactors.actors.journal")
    from zactors.patterns.zeps.broker import Broker
    with Broker(journal_dir, max_message=100) as broker:
        pub = attached(raw, broker)
        pub.send(p.publish(b"k", b"x" * 100))
        assert "over the limit" in pub.expect(p.Invalid).reason
        publish(pub, [(b"k", b"x" * 99)])
        assert broker.call("INFO")["streams"]["s"]["last_seq"] == 1


def test_ping_ok_means_written(broker, raw, journal_dir):
    from zactors.actors.journal import JournalReader
    pub = attached(raw, broker)
    publish(pub, [(b"k", b"%d" % i) for i in range(500)])
    with JournalReader(os.path.join(journal_dir, "s")) as reader:  # what the OS has, from the files
        assert reader.last_seq == 500
        assert [r.body for r in reader.read(499)] == [b"498", b"499"]


def test_silent_peers_are_pinged_then_dropped(journal_dir, raw):
    pytest.importorskip("zactors.actors.journal")
    from zactors.patterns.zeps.broker import Broker
    with Broker(journal_dir, heartbeat=0.1, expiry=0.4) as broker:
        peer = attached(raw, broker)
        assert type(peer.recv(skip_pings=False)) is p.Ping
        assert type(peer.recv(skip_pings=False)) in (p.Ping, p.Detach)
        wait_for(lambda: broker.call("$STATS").get("peers_expired") == 1, what="the silent peer dropped")
        assert broker.call("INFO")["peers"] == 0


def test_ten_thousand_malformed_commands_while_clients_are_served(broker, raw):
    from zactors.patterns.zeps import Publisher, Subscriber
    bad = raw(broker.endpoint)
    pub = Publisher(broker.endpoint, "s")
    sub = Subscriber(broker.endpoint, "s", b"", window=1 << 16)
    try:
        def flood():
            import random
            rnd = random.Random(7)
            for i in range(10000):
                junk = [b"", b"\xaa", b"\xaa\xa5", b"\xaa\xa5\x06\xff", b"\xaa\xa5\x01\x04ZEPS",
                        bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(40)))][i % 6]
                bad.sock.send(junk)
                if i % 500 == 0:
                    gevent.sleep(0)

        flooder = gevent.spawn(flood)
        for i in range(2000):
            pub.publish(b"k", b"%d" % i)
            if i % 200 == 0:
                gevent.sleep(0)
        pub.flush()
        got = [sub.get(10) for _ in range(2000)]
        assert [m.seq for m in got] == list(range(1, 2001))
        assert [m.body for m in got] == [b"%d" % i for i in range(2000)]
        flooder.get(timeout=30)
        wait_for(lambda: broker.call("$STATS").get("invalid", 0) >= 10000, timeout=20, what="10k INVALIDs")
    finally:
        sub.destroy()
        pub.close()


commands = st.one_of(
    st.builds(p.Attach, st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=90)
              .map(str.encode), st.integers(0, 65535)),
    st.builds(p.Subscribe, st.binary(max_size=255), st.integers(0, 2 ** 64 - 1)),
    st.builds(p.SubscribeSince, st.binary(max_size=255), st.integers(0, 2 ** 64 - 1)),
    st.builds(p.Credit, st.integers(0, 2 ** 64 - 1)),
    st.builds(p.Publish, st.binary(max_size=255), st.binary(max_size=300)),
    st.builds(p.Deliver, st.integers(0, 2 ** 64 - 1), st.binary(max_size=20), st.binary(max_size=20)),
    st.builds(p.Invalid, st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=50)),
    st.sampled_from([p.AttachOk(), p.SubscribeOk(), p.Ping(), p.PingOk(), p.Detach(), p.DetachOk(), p.Query()]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(commands, max_size=30))
def test_well_formed_hostile_commands_never_hurt_the_broker(broker, raw, sequence):
    hostile = raw(broker.endpoint)
    for message in sequence:
        hostile.send(p.encode(message))
    # The broker still serves a well-behaved client, in order, after all that.
    pub = attached(raw, broker, b"healthy")
    sub = attached(raw, broker, b"healthy")
    sub.send(p.subscribe(b"", p.NEW))
    sub.expect(p.SubscribeOk)
    sub.send(p.credit(1 << 20))
    publish(pub, [(b"k", b"v")])
    got = sub.recv()
    assert getattr(got, "key", None) == b"k", got
    assert broker.alive
    hostile.close()


def test_existing_and_declared_streams_open_at_start(journal_dir, raw):
    pytest.importorskip("zactors.actors.journal")
    from zactors.patterns.zeps.broker import Broker
    with Broker(journal_dir) as broker:
        pub = attached(raw, broker, b"../old")
        publish(pub, [(b"k", b"v")] * 3)
    with Broker(journal_dir, streams=["fresh"]) as broker:
        streams = broker.call("INFO")["streams"]
        assert streams["../old"]["last_seq"] == 3 and streams["fresh"]["last_seq"] == 0


def test_a_subscriber_behind_retention_starts_at_the_first_retained(journal_dir, raw):
    pytest.importorskip("zactors.actors.journal")
    from zactors.patterns.zeps.broker import Broker
    with Broker(journal_dir, segment_bytes=4096, retain_bytes=8192) as broker:
        pub = attached(raw, broker)
        for _ in range(10):
            publish(pub, [(b"k", b"x" * 200)] * 20)
        broker.call("$STATS")
        wait_for(lambda: _retained(broker), timeout=30, what="retention to remove segments")
        first = broker.call("INFO")["streams"]["s"]["first_seq"]
        sub = attached(raw, broker)
        sub.send(p.subscribe(b"", 0))
        sub.expect(p.SubscribeOk)
        sub.send(p.credit(1 << 20))
        got = [sub.recv().sequence for _ in range(200 - first + 1)]
        assert got == list(range(first, 201))  # from the first retained on: the jump is visible, no hole after
        assert broker.call("$STATS")["replay_skipped_retention"] == 1


def _retained(broker):
    broker.send("RETAIN")
    return broker.call("INFO")["streams"]["s"]["first_seq"] > 1


@pytest.mark.parametrize("fsync", ["batch", 0.05, "never"])
def test_fsync_policies(journal_dir, raw, fsync):
    pytest.importorskip("zactors.actors.journal")
    from zactors.patterns.zeps.broker import Broker
    with Broker(journal_dir, fsync=fsync) as broker:
        pub = attached(raw, broker)
        for _ in range(5):
            publish(pub, [(b"k", b"v")] * 100)
        stream = lambda: broker.call("INFO")["streams"]["s"]  # noqa: E731
        assert stream()["written_seq"] == 500
        if fsync == "never":
            assert stream()["synced_seq"] < 500
        else:
            wait_for(lambda: stream()["synced_seq"] == 500, timeout=10, what="every write synced")
