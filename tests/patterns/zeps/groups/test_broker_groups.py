"""Consumer groups on a real broker: shared delivery, acks, redelivery, dead letters, restart, hostile members."""
import json
import os
import time

import gevent
import msgpack
import pytest

from zactors.patterns.zeps import groups_protocol as g
from zactors.patterns.zeps import protocol as p
from zactors.patterns.zeps.client import Subscriber, ZepsError
from zactors.patterns.zeps.consumer import Consumer

from .conftest import RawMember, make_broker, publish, wait_for

pytestmark = pytest.mark.timeout(120)


def items(n, prefix=b"k"):
    return [(prefix, b"m%d" % i) for i in range(n)]


def test_two_members_share_the_messages_each_once(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", items(2000))
        got = {}
        consumers = [Consumer(broker.endpoint, "s", "work", window=4096) for _ in range(2)]

        def run(c, n):
            for message in c:
                got.setdefault(message.seq, []).append(n)
                message.ack()

        workers = [gevent.spawn(run, c, n) for n, c in enumerate(consumers)]
        wait_for(lambda: len(got) == 2000, what="2000 messages")
        assert all(len(v) == 1 for v in got.values())
        assert {n for v in got.values() for n in v} == {0, 1}      # shared, not all to one
        wait_for(lambda: broker.info()["groups"][0]["pending"] == 0, what="all acked")
        group = broker.info()["groups"][0]
        assert (group["cursor"], group["acked"], group["delivered"], group["lag"]) == (2000, 2000, 2000, 0)
        for c in consumers:
            c.destroy()
        gevent.killall(workers)
    finally:
        broker.destroy()


def test_get_many_takes_what_is_queued_in_order_each_acked_on_its_own(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", items(300))
        with Consumer(broker.endpoint, "s", "work") as c:
            seqs = []
            while len(seqs) < 300:
                batch = c.get_many(100, timeout=5)
                assert 1 <= len(batch) <= 100
                for message in batch:
                    seqs.append(message.seq)
                    message.ack()
            assert seqs == list(range(1, 301))
            assert c.get_many(100, timeout=0.05) == []
            wait_for(lambda: broker.info()["groups"][0]["acked"] == 300, what="all acked")
    finally:
        broker.destroy()


def test_a_trickle_of_messages_goes_to_the_members_in_turn(journal_dir):
    """A member's run (messages in a row, one send) ends with its pump step: messages that come one at a
    time go to the members in turn (they all went to one member, 32 in a row, while the others idled)."""
    broker = make_broker(journal_dir)
    try:
        consumers = [Consumer(broker.endpoint, "s", "work") for _ in range(2)]
        got = []

        def run(c, n):
            for message in c:
                got.append(n)
                message.ack()

        workers = [gevent.spawn(run, c, n) for n, c in enumerate(consumers)]
        for i in range(8):
            publish(broker.endpoint, "s", [(b"k", b"%d" % i)])
            wait_for(lambda: len(got) == i + 1, what="message %d" % i)
        assert sorted(got) == [0, 0, 0, 0, 1, 1, 1, 1]
        for c in consumers:
            c.destroy()
        gevent.killall(workers)
    finally:
        broker.destroy()


def test_unacked_message_is_redelivered_after_ack_wait(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", items(1))
        with Consumer(broker.endpoint, "s", "work", ack_wait=0.3) as c:
            first = c.get(5)
            assert (first.seq, first.deliveries) == (1, 1)   # not acked
            again = c.get(5)
            assert (again.seq, again.deliveries) == (1, 2)
            again.ack()
            wait_for(lambda: broker.info()["groups"][0]["pending"] == 0)
            assert broker.info()["groups"][0]["redelivered"] == 1
    finally:
        broker.destroy()


def test_a_member_that_leaves_gives_its_messages_to_the_others(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", items(10))
        a = Consumer(broker.endpoint, "s", "work", ack_wait=60)
        held = [a.get(5) for _ in range(10)]
        assert [m.seq for m in held] == list(range(1, 11))
        b = Consumer(broker.endpoint, "s", "work", ack_wait=60)
        a.destroy()          # DETACH: the broker gives back what it held at once, not after 60 s
        seqs = sorted(b.get(5).seq for _ in range(10))
        assert seqs == list(range(1, 11))
        b.destroy()
    finally:
        broker.destroy()


def test_nack_with_delay_redelivers_later(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", items(1))
        with Consumer(broker.endpoint, "s", "work") as c:
            m = c.get(5)
            t0 = gevent.get_hub().loop.now()
            m.nack(delay=0.2)
            again = c.get(5)
            assert again.seq == 1 and again.deliveries == 2
            assert gevent.get_hub().loop.now() - t0 >= 0.15
    finally:
        broker.destroy()


def test_poison_message_goes_to_the_dead_letter_stream_and_the_group_goes_on(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", [(b"k", b"poison"), (b"k", b"fine")])
        with Consumer(broker.endpoint, "s", "work", max_deliver=3) as c:
            seen = []
            while (1, 3) not in seen or (2, 1) not in seen:
                m = c.get(10)
                assert m is not None
                seen.append((m.seq, m.deliveries))
                if m.body == b"poison":
                    m.nack()
                else:
                    m.ack()
            wait_for(lambda: broker.info()["groups"][0]["dead_letters"] == 1, what="dead letter")
            assert c.get(0.3) is None                      # not delivered a 4th time
            assert broker.info()["groups"][0]["pending"] == 0
        sub = Subscriber(broker.endpoint, "s.dlq.work")
        dead = sub.get(10)
        letter = msgpack.unpackb(dead.body)
        assert dead.key == b"k" and letter["body"] == b"poison" and letter["seq"] == 1
        assert letter["deliveries"] == 3 and "max_deliver" in letter["reason"] and letter["group"] == b"work"
        sub.destroy()
        assert broker.info()["counters"]["group_dead_letters"] == 1
    finally:
        broker.destroy()


def test_restart_resumes_from_the_persisted_cursor_and_pending_list(journal_dir):
    broker = make_broker(journal_dir)
    publish(broker.endpoint, "s", items(100))
    c = Consumer(broker.endpoint, "s", "work", window=1 << 20, ack_wait=0.5)
    taken = [c.get(5) for _ in range(100)]
    for m in taken[:60]:
        m.ack()
    c.destroy()    # flushes the 60 acks; the other 40 go back to the group (pending, unheld)
    wait_for(lambda: broker.info()["groups"][0]["acked"] == 60)
    broker.destroy()
    broker = make_broker(journal_dir, endpoint=broker.endpoint)
    try:
        group = broker.info()["groups"][0]
        assert (group["cursor"], group["pending"], group["acked"]) == (100, 40, 60)
        publish(broker.endpoint, "s", items(10))
        with Consumer(broker.endpoint, "s", "work") as c:
            seqs = []
            while len(seqs) < 50:
                m = c.get(10)
                assert m is not None
                seqs.append(m.seq)
                m.ack()
            assert sorted(seqs) == list(range(61, 111))     # the 40 pending, then the 10 new: none acked again
    finally:
        broker.destroy()


def test_hostile_members_are_refused_and_counted_others_served(journal_dir):
    broker = make_broker(journal_dir, max_groups=5, max_group_members=2)
    try:
        publish(broker.endpoint, "s", items(5))
        good = Consumer(broker.endpoint, "s", "work", ack_wait=60)
        m = good.get(5)
        bad = RawMember(broker.endpoint)
        bad.send(g.ack([(m.seq, m.seq)]))                  # before JOIN
        assert "before JOIN" in bad.expect(p.Invalid).reason
        bad.send(g.join(b"work"), p.credit(0))
        bad.expect(g.JoinOk)
        bad.send(g.ack([(1, 1), (2, 2)]))                  # held by the good member
        assert bad.expect(p.Invalid).reason.startswith("GROUP:")
        bad.send(g.ack([(1, 2 ** 64 - 1)]))                # a huge range: nothing it holds
        assert bad.expect(p.Invalid).reason.startswith("GROUP:")
        for _ in range(100):
            bad.send(g.nack(1, 0))                         # nacks in a loop of what it does not hold
        for _ in range(100):
            assert "NACK" in bad.expect(p.Invalid).reason
        bad.send(g.join(b"other"))                         # a second JOIN on one peering
        assert "already" in bad.expect(p.Invalid).reason
        third = RawMember(broker.endpoint)
        third.send(g.join(b"work"))                        # members budget (2)
        assert "members" in third.expect(p.Invalid).reason
        creators = [RawMember(broker.endpoint) for _ in range(6)]
        for n, peer in enumerate(creators):                # groups budget (5, "work" is one)
            peer.send(g.join(b"g%d" % n))
        answers = [type(peer.recv()) for peer in creators]
        assert answers.count(g.JoinOk) == 4 and answers.count(p.Invalid) == 2
        m.ack()                                            # the good member is served all along
        assert sorted(good.get(5).seq for _ in range(4)) == [2, 3, 4, 5]
        counters = broker.info()["counters"]
        assert counters["group_nacks_refused"] == 100 and counters["group_acks_refused"] >= 3
        assert counters["group_refused"] >= 106
        for peer in [bad, third] + creators:
            peer.close()
        good.destroy()
    finally:
        broker.destroy()


def test_groups_introspection_and_delete(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", items(3))
        peer = RawMember(broker.endpoint)
        peer.send(g.join(b"work", b"k", g.START_SEQ, 2, 5000, 7), p.credit(1 << 20))
        assert peer.expect(g.JoinOk).cursor == 1
        delivered = [peer.expect(g.GroupDeliver) for _ in range(2)]
        assert [(d.sequence, d.deliveries, d.body) for d in delivered] == [(2, 1, b"m1"), (3, 1, b"m2")]
        peer.send(g.ack([2]))
        peer.send(g.groups(b""))
        report = json.loads(peer.expect(g.GroupsOk).report)
        assert len(report) == 1
        r = report[0]
        assert (r["group"], r["pending"], r["members"], r["ack_wait"], r["max_deliver"], r["acked"]) == \
            ("work", 1, 1, 5.0, 7, 1)
        assert r["oldest_pending_age"] >= 0
        other = RawMember(broker.endpoint)
        other.send(g.group_delete(b"work"))
        assert other.expect(g.GroupDeleted).group == b"work"
        assert "deleted" in peer.expect(p.Invalid).reason
        assert broker.info()["groups"] == []
        other.send(g.group_delete(b"work"))
        assert "no group" in other.expect(p.Invalid).reason
        peer.close()
        other.close()
    finally:
        broker.destroy()


def test_a_spec_only_subscriber_beside_a_group_sees_plain_delivers(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", items(5))
        with Consumer(broker.endpoint, "s", "work") as c:
            c.get(5).ack()
            sub = Subscriber(broker.endpoint, "s")
            assert [sub.get(5).seq for _ in range(5)] == [1, 2, 3, 4, 5]
            sub.destroy()
    finally:
        broker.destroy()


def test_join_refused_raises_from_the_constructor(journal_dir):
    broker = make_broker(journal_dir, max_groups=1)
    try:
        with Consumer(broker.endpoint, "s", "a"):
            with pytest.raises(ZepsError, match="GROUP:"):
                Consumer(broker.endpoint, "s", "b")
    finally:
        broker.destroy()


def test_a_member_dropped_by_a_send_mid_delivery_duplicates_nothing(journal_dir):
    """Regression: a send that found a member gone dropped it inside the delivery loop, whose release ran a
    second delivery loop within the first: both handed out the same sequences (a member killed -9 under
    load made ~100 messages be processed twice by the others)."""
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", items(1))
        gone = RawMember(broker.endpoint)
        gone.send(g.join(b"work", b"", g.START_LATEST, 0, 1000), p.credit(1 << 20))  # ack_wait 1 s
        gone.expect(g.JoinOk)
        with Consumer(broker.endpoint, "s", "work", window=64 << 10) as c:
            gone.close()   # its connection ends: the broker learns it from a send (or after ack_wait)
            publish(broker.endpoint, "s", items(500))
            got = []
            while len(got) < 500:
                m = c.get(10)
                assert m is not None, "lost after %d" % len(got)
                got.append((m.seq, m.deliveries))
                m.ack()
            assert c.get(0.5) is None
            assert sorted(seq for seq, _ in got) == list(range(2, 502))
            assert broker.info()["counters"]["peers_lost"] >= 1
    finally:
        broker.destroy()


def test_a_redelivery_goes_to_another_member_than_last_time(journal_dir):
    """Members take runs of messages in turn (their acks make ranges); a message whose wait ran out goes
    to another member than the one that let it time out (alive but stuck), not back to it."""
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", items(1))
        stuck = RawMember(broker.endpoint)
        stuck.send(g.join(b"work", b"", g.START_EARLIEST, 0, 300), p.credit(1 << 20))   # ack_wait 0.3 s
        stuck.expect(g.JoinOk)
        assert stuck.expect(g.GroupDeliver).sequence == 1
        with Consumer(broker.endpoint, "s", "work") as other:
            m = other.get(5)
            assert (m.seq, m.deliveries) == (1, 2)
            m.ack()
        stuck.close()
    finally:
        broker.destroy()


def test_hostile_acks_of_huge_ranges_cost_little(journal_dir):
    """Regression: an ACK of 1023 ranges of 4,000 sequences made the broker look up 4 million sequences
    (seconds of CPU per frame).  Now one ACK names at most 65,536 sequences looked up one by one; past
    that the broker looks only at what the member holds."""
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", items(3))
        peer = RawMember(broker.endpoint)
        peer.send(g.join(b"work"), p.credit(1 << 20))
        peer.expect(g.JoinOk)
        assert [peer.expect(g.GroupDeliver).sequence for _ in range(3)] == [1, 2, 3]
        huge = [(10 + n * 4000, 9 + (n + 1) * 4000) for n in range(g.MAX_RANGES - 1)]
        t0 = time.monotonic()
        for _ in range(40):
            peer.send(g.ack(huge))               # none of these hold 1..3
        for _ in range(40):
            assert peer.expect(p.Invalid).reason.startswith("GROUP:")
        peer.send(g.ack([(1, 3)] + huge))        # holds all three
        wait_for(lambda: broker.info()["groups"][0]["acked"] == 3)
        elapsed = time.monotonic() - t0
        print("40 hostile ACKs of 1023 ranges of 4,000 sequences, then one that acks: %.3fs" % elapsed)
        assert elapsed < 5.0
        assert broker.info()["counters"]["group_acks_refused"] >= 40
        peer.close()
    finally:
        broker.destroy()


def test_pending_entries_retention_removed_are_dropped_and_counted(journal_dir):
    """Regression: the broker named its helper for such entries ``_gone``, which its credit budget's dict
    of departed peers (``self._gone``) shadowed: the first redelivery of a message retention had removed
    raised TypeError in the loop and killed the broker."""
    broker = make_broker(journal_dir, segment_bytes=16 << 10, retain_bytes=32 << 10)
    try:
        publish(broker.endpoint, "s", items(1))
        holder = RawMember(broker.endpoint)
        holder.send(g.join(b"work", b"k", g.START_EARLIEST, 0, 200), p.credit(1 << 20))  # ack_wait 0.2 s
        holder.expect(g.JoinOk)
        assert holder.expect(g.GroupDeliver).sequence == 1
        holder.send(p.credit(0))
        holder.close()       # never acks; its connection ends
        publish(broker.endpoint, "s", [(b"other", b"x" * 1000)] * 200)   # 200 KB: many 16 KB segments
        broker.call("RETAIN")
        wait_for(lambda: broker.info()["streams"]["s"]["first_seq"] > 1, what="retention")
        with Consumer(broker.endpoint, "s", "work") as c:   # the redelivery of 1 finds it gone
            wait_for(lambda: broker.info()["counters"].get("group_gone", 0) == 1, what="the gone entry counted")
            assert broker.info()["groups"][0]["pending"] == 0
            publish(broker.endpoint, "s", items(1))
            m = c.get(10)
            assert m is not None and m.body == b"m0" and m.seq > 201
    finally:
        broker.destroy()


def test_one_consumer_taken_from_by_many_greenlets(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", items(1000))
        got = []
        with Consumer(broker.endpoint, "s", "work", window=8192) as c:

            def take():
                while True:
                    m = c.get(1.0)
                    if m is None:
                        return
                    got.append(m.seq)
                    gevent.sleep(0)       # let the others in between
                    m.ack()

            gevent.joinall([gevent.spawn(take) for _ in range(8)], timeout=60, raise_error=True)
        assert sorted(got) == list(range(1, 1001))
        wait_for(lambda: broker.info()["groups"][0]["acked"] == 1000)
    finally:
        broker.destroy()


def test_a_bad_dead_letter_template_is_refused_up_front(journal_dir):
    with pytest.raises(ValueError, match="group_dlq"):
        make_broker(journal_dir, group_dlq="{stream}.{nope}")


def test_a_groups_journal_that_cannot_open_refuses_the_join_and_the_broker_goes_on(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", items(1))
        with open(os.path.join(journal_dir, "s.groups"), "w") as f:   # where its directory would be
            f.write("not a directory")
        with pytest.raises(ZepsError, match="GROUP: stream s cannot keep groups"):
            Consumer(broker.endpoint, "s", "work")
        assert broker.info()["counters"]["group_store_errors"] == 1
        os.unlink(os.path.join(journal_dir, "s.groups"))
        with Consumer(broker.endpoint, "s", "work") as c:              # once it can, it does
            assert c.get(5).seq == 1
    finally:
        broker.destroy()
