"""Consumer groups: CLAIM, the ACL's consume, compaction of the group journal, the CLI."""
import os

import pytest

from zactors.actors.auth import Authenticator, generate_keypair
from zactors.patterns.zeps import group_store
from zactors.patterns.zeps import groups_protocol as g
from zactors.patterns.zeps import protocol as p
from zactors.patterns.zeps.client import Publisher, ZepsError
from zactors.patterns.zeps.consumer import Consumer
from zactors.patterns.zeps.permissions import Permissions

from .conftest import RawMember, make_broker, publish, wait_for

pytestmark = pytest.mark.timeout(120)


def test_claim_takes_idle_entries_from_another_member(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", [(b"k", b"%d" % i) for i in range(3)])
        slow = RawMember(broker.endpoint)
        slow.send(g.join(b"work", ack_wait=60000), p.credit(1 << 20))
        slow.expect(g.JoinOk)
        assert [slow.expect(g.GroupDeliver).sequence for _ in range(3)] == [1, 2, 3]
        taker = RawMember(broker.endpoint)
        taker.send(g.join(b"work"), p.credit(1 << 20))
        taker.expect(g.JoinOk)
        taker.send(g.claim(0, 2))
        claimed = [taker.expect(g.GroupDeliver) for _ in range(2)]
        assert [(c.sequence, c.deliveries) for c in claimed] == [(1, 2), (2, 2)]
        slow.send(g.ack([1]))                          # no longer its own
        assert slow.expect(p.Invalid).reason.startswith("GROUP:")
        taker.send(g.ack([(1, 2)]))
        slow.send(g.ack([3]))
        wait_for(lambda: broker.info()["groups"][0]["pending"] == 0)
        assert broker.info()["groups"][0]["claimed"] == 2
        slow.close()
        taker.close()
    finally:
        broker.destroy()


def test_consume_permission_guards_joining_and_deleting_groups(journal_dir):
    server, alice, bob = (generate_keypair() for _ in range(3))
    perms = Permissions([(alice.public, "publish,create,consume", "orders"), (bob.public, "subscribe", "orders")])
    auth = Authenticator(curve="*")
    broker = make_broker(journal_dir, curve=server, permissions=perms)
    try:
        pub = Publisher(broker.endpoint, "orders", curve=(server.public, alice))
        pub.publish(b"k", b"v")
        pub.flush()
        pub.close()
        with pytest.raises(ZepsError, match="may not consume"):
            Consumer(broker.endpoint, "orders", "work", curve=(server.public, bob), timeout=2)
        with Consumer(broker.endpoint, "orders", "work", curve=(server.public, alice)) as c:
            c.get(5).ack()
        assert broker.info()["counters"]["refused_consume"] == 1
    finally:
        broker.destroy()
        auth.destroy()


def test_the_group_journal_is_compacted_and_restored(journal_dir, monkeypatch):
    monkeypatch.setattr(group_store, "_MIN_COMPACT", 8)   # compact after 8 records, not 100,000
    broker = make_broker(journal_dir)
    directory = os.path.join(journal_dir, "s.groups")
    publish(broker.endpoint, "s", [(b"k", b"%d" % i) for i in range(400)])
    with Consumer(broker.endpoint, "s", "work", window=4096, ack_wait=0.5) as c:  # (restored entries: 0.5 s)
        for n in range(1, 11):    # ten rounds of 30 acks: an ACK record (and deliveries) each
            for _ in range(30):
                c.get(5).ack()
            wait_for(lambda: broker.info()["groups"][0]["acked"] == 30 * n)
    wait_for(lambda: broker.info()["counters"]["group_compactions"] >= 1 and len(os.listdir(directory)) == 1,
             what="a compaction and the old generation deleted")
    generation = int(os.listdir(directory)[0])
    assert generation > 1
    before = broker.info()["groups"][0]
    broker.destroy()
    broker = make_broker(journal_dir)
    try:
        after = broker.info()["groups"][0]
        for field in ("cursor", "pending", "acked", "delivered"):
            assert after[field] == before[field], field
        with Consumer(broker.endpoint, "s", "work") as c:
            seqs = sorted(c.get(5).seq for _ in range(100))
        assert seqs == list(range(301, 401))
    finally:
        broker.destroy()


def test_cli_consume_prints_and_acks_then_groups_shows_it(journal_dir, capsys):
    from tests.apps.cli_helpers import run_main

    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", [(b"k", b"one"), (b"k", b"two"), (b"k", b"three")])
        status, out, _ = run_main(capsys, "zeps", "consume", "s", "work", "--count", "2", "--connect", broker.endpoint)
        assert (status, out) == (0, "1\tk\tone\n2\tk\ttwo\n")
        wait_for(lambda: broker.info()["groups"][0]["acked"] == 2)
        status, out, _ = run_main(capsys, "zeps", "groups", "--connect", broker.endpoint)
        assert status == 0 and "s/work  cursor 3  lag 0  pending 1" in out  # (the 3rd was handed out, not printed: it waits)
        status, out, _ = run_main(capsys, "zeps", "consume", "s", "work", "--count", "1", "--connect", broker.endpoint)
        assert (status, out) == (0, "3\tk\tthree\n")
        status, _, err = run_main(capsys, "zeps", "consume", "s", "work", "--start", "soon", "--connect",
                                  broker.endpoint)
        assert status != 0 and "earliest, latest or a sequence" in err
    finally:
        broker.destroy()


def test_the_compaction_check_walks_the_groups_once_per_1024_records(journal_dir):
    """Whether to compact was asked with every record logged, after summing every group's pending
    entries: with 10,000 groups on a stream each ACK walked all of them.  The live state is looked at
    once per 1,024 records (and never below the compaction minimum)."""
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", [(b"k", b"x")])
        with Consumer(broker.endpoint, "s", "work") as c:
            c.get(5).ack()
        store = broker._tables[b"s"].store
        looks = []

        def live():
            looks.append(store.appended)
            return 1 << 40          # (never compact here)

        assert not store.should_compact(live)
        assert looks == []          # below the minimum: not looked at
        store.appended = group_store._MIN_COMPACT
        for _ in range(4096):
            store.appended += 1
            assert not store.should_compact(live)
        assert 1 <= len(looks) <= 4
    finally:
        broker.destroy()
