"""Consumer groups in a broker pair: the passive keeps a copy of every group (replication), a passive that
was away gets a snapshot, INFO on the passive shows the groups, and ack="replicated" holds a new group's
JOIN-OK until the passive has it."""
import gevent
import pytest

from zactors.patterns.zeps import groups_protocol as g
from zactors.patterns.zeps.client import Publisher, ZepsError
from zactors.patterns.zeps.consumer import Consumer

from ..groups.conftest import RawMember
from .conftest import pair_info, wait_for

pytestmark = pytest.mark.timeout(120)
#: what a group's summary must show alike on both brokers
SAME = ("cursor", "lag", "pending", "delivered", "acked", "dead_letters", "pattern", "ack_wait", "max_deliver")


def groups(broker):
    return {(x["stream"], x["group"]): {k: x[k] for k in SAME} for x in broker.call("INFO")["groups"]}


def publish(endpoint, n, stream="s"):
    with Publisher(endpoint, stream, idempotent=True) as pub:
        for i in range(n):
            pub.publish("k%d" % (i % 3), b"m%d" % i)
        pub.flush()


def consume(endpoint, group, n, ack, pattern=b"", stream="s", ack_wait=60.0):
    """Take ``n`` messages as a member of ``group``; ack those for which ``ack(seq)``; returns the consumer
    (still a member: what it did not ack stays pending)."""
    consumer = Consumer(endpoint, stream, group, pattern=pattern, ack_wait=ack_wait, heartbeat=0.2, expiry=2.0,
                        timeout=15)   # (a first JOIN creates the group's journal, in the loop: slow under load)
    for _ in range(n):
        message = consumer.get(timeout=10)
        assert message is not None
        if ack(message.seq):
            message.ack()
    return consumer


def test_the_passive_copies_every_group_and_its_info_shows_them(make_pair):
    pair = make_pair(ack="replicated")
    active, passive = pair.up()
    publish(active.endpoint, 1000)
    work = consume(active.endpoint, "work", 1000, lambda seq: seq <= 600)
    k0 = consume(active.endpoint, "k0", 100, lambda seq: True, pattern=b"k0")
    try:
        wait_for(lambda: groups(active)[("s", "work")]["acked"] == 600 and groups(active)[("s", "k0")]["acked"] == 100,
                 20, "the acks on the active")
        wait_for(lambda: groups(passive) == groups(active), 20, "the passive's copy")
        copy = groups(passive)
        assert copy[("s", "work")]["cursor"] == 1000 and copy[("s", "work")]["pending"] == 400
        assert copy[("s", "k0")]["acked"] == 100 and copy[("s", "k0")]["lag"] == 1000 - copy[("s", "k0")]["cursor"]
        assert pair_info(active)["group_replication_lag"] == 0
        assert active.call("INFO")["counters"]["replicated_group_records"] > 0
    finally:
        work.destroy()
        k0.destroy()


def test_a_passive_that_was_away_gets_a_snapshot_of_the_groups(make_pair):
    pair = make_pair(ack="replicated", on_passive_lost="degrade", passive_timeout=0.5)
    active, passive = pair.up()
    publish(active.endpoint, 300)
    consume(active.endpoint, "old", 10, lambda seq: True).destroy()
    wait_for(lambda: ("s", "old") in groups(passive), 20, "the group on the passive")
    pair.stop("backup")
    # while it is away: a group is deleted, another created and worked, a third stream gets a group
    member = RawMember(active.endpoint)
    member.send(g.group_delete(b"old"))
    assert type(member.recv()) is g.GroupDeleted
    member.close()
    publish(active.endpoint, 50, stream="t")
    consume(active.endpoint, "new", 200, lambda seq: seq % 2 == 0).destroy()
    consume(active.endpoint, "t-group", 50, lambda seq: seq <= 10, stream="t").destroy()
    assert ("s", "old") not in groups(active)
    pair.start("backup")
    pair.wait_ready("backup")             # ready: the snapshot is kept there
    assert groups(pair.brokers["backup"]) == groups(active)
    assert set(groups(active)) == {("s", "new"), ("t", "t-group")}


def test_replicated_acknowledges_a_new_group_only_once_the_passive_has_it(make_pair):
    pair = make_pair(ack="replicated", on_passive_lost="wait", passive_timeout=1.0)
    active, _ = pair.up()
    publish(active.endpoint, 10)
    consume(active.endpoint, "kept", 1, lambda seq: True).destroy()
    pair.stop("backup")
    with pytest.raises(ZepsError) as caught:           # a group the passive never got is not acknowledged
        Consumer(active.endpoint, "s", "lonely", timeout=5)
    assert "GROUP: replication" in str(caught.value)
    assert active.call("INFO")["counters"]["group_unreplicated"] == 1
    again = Consumer(active.endpoint, "s", "kept", timeout=15)   # joining a group changes nothing kept
    try:
        assert again.get(timeout=10).seq == 2
    finally:
        again.destroy()


def test_after_a_takeover_the_copied_entries_are_redelivered_after_ack_wait(make_pair):
    """In one process: the primary goes, a member with both endpoints votes the backup in; what was pending
    comes again after ack_wait, what was acknowledged never does."""
    pair = make_pair(ack="replicated", on_passive_lost="degrade", passive_timeout=0.5)
    active, passive = pair.up()
    publish(active.endpoint, 100)
    held = consume(active.endpoint, "work", 100, lambda seq: seq > 30, ack_wait=2.0)    # 1-30 stay pending
    wait_for(lambda: groups(passive).get(("s", "work"), {}).get("acked") == 70, 20, "the acks on the passive")
    held.destroy()
    endpoints = "%s,%s" % (active.endpoint, passive.endpoint)
    stopped = gevent.get_hub().loop.now()
    pair.stop("primary")
    member = Consumer(endpoints, "s", "work", heartbeat=0.2, expiry=1.0, timeout=20)
    try:
        assert pair_info(passive)["state"] == "active"
        got = []
        while len(got) < 30:
            message = member.get(timeout=20)
            assert message is not None
            got.append((message.seq, message.deliveries))
            message.ack()
            if len(got) == 1:       # members that held them get ack_wait from the takeover to ack them
                assert gevent.get_hub().loop.now() - stopped >= 2.0
        assert sorted(got) == [(seq, 2) for seq in range(1, 31)]     # each delivered once more, none of 31-100
        assert member.get(timeout=0.5) is None
        wait_for(lambda: groups(passive)[("s", "work")]["pending"] == 0, 20, "the acks")
        assert groups(passive)[("s", "work")]["acked"] == 100
    finally:
        member.destroy()


def test_a_takeover_cuts_a_group_back_to_what_the_journal_holds(tmp_path):
    """The old active handed out sequences that never reached us (ack="written"): after the takeover the
    group resumes at our last record, and new messages under those numbers are delivered, not skipped."""
    import msgpack

    from zactors.patterns.zeps.broker import Broker

    from .test_vote import FakeActive

    backup = Broker(str(tmp_path / "b"), role="backup", heartbeat=0.25, name="backup")
    active = FakeActive(backup.pair_endpoint)
    member = None
    try:
        backup.call("PEER", active.endpoint)
        _, _, token, _ = active.recv(b"FOLLOW")
        epochs = [[1, 1]]
        active.send(b"STREAMS", token, msgpack.packb({"s": [1, True, 2, epochs, 0]}), msgpack.packb([]))
        active.send(b"REC", token, b"s", msgpack.packb([epochs, [[1, 1.0, b"k", b"m1", None, 0],
                                                                 [2, 2.0, b"k", b"m2", None, 0]]]))
        group = ["S", b"work", b"", 5, 1.0, 5, {"delivered": 4}, [1, 1, 2, 1, 4, 1, 5, 1]]   # 4, 5: not ours
        active.send(b"GREC", token, msgpack.packb([7, [[None, ["B"]], ["s", group], [None, ["E"]]]]))
        wait_for(lambda: pair_info(backup)["ready"], 10, "the backup ready")
        assert groups(backup)[("s", "work")]["cursor"] == 5
        wait_for(lambda: pair_info(backup)["peer_state"] is None, 5, "the fake active to be silent")
        member = Consumer(backup.endpoint, "s", "work", heartbeat=0.2, expiry=2.0, timeout=15)   # its vote
        assert pair_info(backup)["state"] == "active"
        assert groups(backup)[("s", "work")]["cursor"] == 2
        got = sorted((m.seq, m.deliveries, m.body) for m in (member.get(timeout=10), member.get(timeout=10)))
        assert got == [(1, 2, b"m1"), (2, 2, b"m2")]
        with Publisher(backup.endpoint, "s") as pub:
            pub.publish("k", b"m3")
            pub.flush()
        third = member.get(timeout=10)
        assert (third.seq, third.deliveries, third.body) == (3, 1, b"m3")
        assert backup.call("INFO")["counters"]["group_cut_back"] == 1
    finally:
        if member is not None:
            member.destroy()
        active.close()
        backup.destroy()


@pytest.mark.parametrize("items", [
    [[None, ["B"]], ["s", ["R"]]],                  # a record too short
    [[None, ["B"]], [7, ["X", b"g"]]],              # a stream name that is not one
    [["s", ["S", b"g", b"", 0, 1.0, 5, {}, []]]],   # a session that does not start with its snapshot
])
def test_bad_group_records_make_the_passive_follow_again(tmp_path, items):
    import msgpack

    from zactors.patterns.zeps.broker import Broker

    from .test_vote import FakeActive

    backup = Broker(str(tmp_path / "b"), role="backup", heartbeat=0.25, name="backup")
    active = FakeActive(backup.pair_endpoint)
    try:
        backup.call("PEER", active.endpoint)
        _, _, token, _ = active.recv(b"FOLLOW")
        active.send(b"STREAMS", token, msgpack.packb({}), msgpack.packb([]))
        active.send(b"GREC", token, msgpack.packb([1, items]))
        _, _, again, _ = active.recv(b"FOLLOW")           # a new session, and the broker goes on
        assert again != token and not pair_info(backup)["ready"]
        counters = backup.call("INFO")["counters"]
        assert counters.get("pair_malformed", 0) + counters.get("pair_resyncs", 0) == 1
    finally:
        active.close()
        backup.destroy()
