"""A ZEPS broker pair: replication, the replicated ack level, a passive that refuses clients, catch-up."""
import time

import gevent
import pytest

from zactors.patterns.zeps.broker import Broker
from zactors.patterns.zeps.client import Publisher, Subscriber, ZepsError

from .conftest import pair_info, records, wait_for

pytestmark = pytest.mark.timeout(120)


def test_the_passive_journals_every_record_as_the_active_did(make_pair):
    pair = make_pair(ack="replicated")
    active, passive = pair.up()
    with Publisher(active.endpoint, "orders", idempotent=True) as pub:
        for i in range(3000):
            pub.publish("k%d" % (i % 7), b"body %d" % i)
        pub.flush()           # ack=replicated: the passive has all of them
    mine, my_epochs = records(pair.dirs["primary"], b"orders")
    theirs, their_epochs = records(pair.dirs["backup"], b"orders")
    assert len(mine) == 3000
    assert theirs == mine     # same sequence, timestamp, key, body, producer id and producer sequence
    assert mine[0][4] is not None and mine[-1][5] == 3000
    assert their_epochs == my_epochs
    info = pair_info(active)
    assert info["state"] == "active" and info["following"] and info["replication_lag"] == {"orders": 0}


def test_a_stream_published_plainly_then_with_producer_ids_is_copied_whole(make_pair):
    """Live records of a stream without producers go to the passive from the active's tail cache (which
    keeps no producer ids); once a PUBLISH-ID publisher writes to it, its records come from the files
    again, with their producer ids, as the passive needs them to drop a resend after a failover."""
    pair = make_pair(ack="replicated")
    active, passive = pair.up()
    with Publisher(active.endpoint, "orders") as pub:
        for i in range(500):
            pub.publish("k", b"plain %d" % i)
        pub.flush()
    with Publisher(active.endpoint, "orders", idempotent=True) as pub:
        for i in range(500):
            pub.publish("k", b"with an id %d" % i)
        pub.flush()
    with Publisher(active.endpoint, "orders") as pub:
        for i in range(500):
            pub.publish("k", b"plain again %d" % i)
        pub.flush()
    mine, _ = records(pair.dirs["primary"], b"orders")
    theirs, _ = records(pair.dirs["backup"], b"orders")
    assert len(mine) == 1500
    assert theirs == mine     # sequence, timestamp, key, body, and the producer where there was one
    assert all(len(r) == 4 or r[4] is None for r in mine[:500])
    assert [r[5] for r in mine[500:1000]] == list(range(1, 501))


def test_a_passive_refuses_clients_and_names_the_active(make_pair):
    pair = make_pair()
    active, passive = pair.up()
    with pytest.raises(ZepsError) as caught:
        Publisher(passive.endpoint, "orders", timeout=2)
    assert "PASSIVE" in str(caught.value) and active.endpoint in str(caught.value)
    assert passive.call("INFO")["counters"]["pair_refused"] >= 1


def test_replicated_delivery_waits_for_the_passive(make_pair):
    """A live subscriber gets a message only once the passive has it: with the passive gone, nothing."""
    pair = make_pair(ack="replicated", on_passive_lost="wait", passive_timeout=1.0)
    active, _ = pair.up()
    sub = Subscriber(active.endpoint, "s", wait=True, new=True)
    try:
        with Publisher(active.endpoint, "s", idempotent=True) as pub:
            pub.publish("k", b"one")
            pub.flush()
            assert sub.get(timeout=10).body == b"one"
            pair.stop("backup")
            pub.publish("k", b"two")
            started = time.monotonic()
            with pytest.raises(ZepsError) as caught:
                pub.flush(timeout=10)
            assert "replication" in str(caught.value)
            assert time.monotonic() - started < 5
            assert sub.get(timeout=1.5) is None          # not replicated: not delivered either
            counters = active.call("INFO")["counters"]
            assert counters["replication_timeouts"] >= 1
            assert pair_info(active)["replication_lag"]["s"] == 1
    finally:
        sub.destroy()


def test_degrade_policy_acknowledges_at_the_local_level_and_says_so(make_pair, caplog):
    pair = make_pair(ack="replicated", on_passive_lost="degrade", passive_timeout=0.5)
    active, _ = pair.up()
    sub = Subscriber(active.endpoint, "s", wait=True, new=True)
    try:
        with Publisher(active.endpoint, "s", idempotent=True) as pub:
            pair.stop("backup")
            pub.publish("k", b"alone")
            pub.flush(timeout=10)                        # degraded after 0.5 s: written is enough
            assert sub.get(timeout=10).body == b"alone"
        info = active.call("INFO")
        assert info["pair"]["degraded"] is True
        assert info["counters"]["pair_degraded"] == 1
        assert "degraded to written" in caplog.text
    finally:
        sub.destroy()


def test_a_backup_catches_up_while_the_active_serves_and_only_then_may_take_over(make_pair):
    n = 20000
    pair = make_pair(ack="written", replication_window=256 << 10)
    primary = pair.start("primary")
    # alone: the primary serves once it has waited two heartbeats for a backup
    pub = Publisher(primary.endpoint, "big", idempotent=True, timeout=5)
    for i in range(n):
        pub.publish("k", b"x" * 200 + b"%d" % i)
    pub.flush()
    backup = pair.start("backup")
    flowing = gevent.spawn(lambda: [pub.publish("k", b"live %d" % i) or gevent.sleep(0.001) for i in range(2000)])
    wait_for(lambda: pair_info(backup)["state"] == "passive", 10, "backup passive")
    # a passive that has not caught up refuses the vote even when the active is silent: it never takes over
    if not pair_info(backup)["ready"]:
        with pytest.raises(ZepsError) as caught:
            Publisher(backup.endpoint, "big", timeout=1)
        assert "PASSIVE" in str(caught.value)
    pair.wait_ready("backup", timeout=60)
    flowing.join(timeout=60)
    pub.flush()
    pub.close()
    primary_records = records(pair.dirs["primary"], b"big")
    wait_for(lambda: records(pair.dirs["backup"], b"big")[0] == primary_records[0], 20, "the backup's copy")
    assert len(primary_records[0]) == n + 2000
    # the primary goes; a client's ATTACH to the backup is its vote: it takes over with everything
    pair.stop("primary")
    deadline = time.monotonic() + 10
    while True:
        try:
            sub = Subscriber(backup.endpoint, "big", from_seq=1, timeout=1)
            break
        except ZepsError:
            assert time.monotonic() < deadline
            gevent.sleep(0.1)
    try:
        seqs = [sub.get(timeout=10).seq for _ in range(n + 2000)]
        assert seqs == list(range(1, n + 2001))
    finally:
        sub.destroy()
    info = backup.call("INFO")
    assert info["pair"]["state"] == "active" and info["counters"]["takeovers"] == 1
    assert records(pair.dirs["backup"], b"big")[1][-1] == (2, n + 2001)   # a new epoch from the takeover


def test_pair_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match="needs a pair"):
        Broker(str(tmp_path / "x"), ack="replicated")
    with pytest.raises(ValueError, match="role"):
        Broker(str(tmp_path / "x"), role="leader")
    with pytest.raises(ValueError, match="on_passive_lost"):
        Broker(str(tmp_path / "x"), role="primary", on_passive_lost="hope")


def test_a_restarted_primary_follows_the_backup_that_took_over_and_keeps_its_copy(make_pair):
    """The active (primary) restarts on its journal: the passive keeps serving (Binary Star: its peer
    restarted without its state), the primary follows it from where it stands: nothing is copied again,
    nothing truncated; then both hold the same records."""
    pair = make_pair(ack="replicated", on_passive_lost="degrade", passive_timeout=0.5)
    primary, backup = pair.up()
    with Publisher(primary.endpoint, "s", idempotent=True) as pub:
        for i in range(100):
            pub.publish("k", b"%d" % i)
        pub.flush()
    pair.stop("primary")
    wait_for(lambda: pair_info(backup)["peer_state"] is None, 10, "the primary silent")
    primary = pair.start("primary")
    pair.wait_state("backup", "active")
    pair.wait_ready("primary")
    endpoints = "%s,%s" % (primary.endpoint, backup.endpoint)
    with Publisher(endpoints, "s", idempotent=True) as pub:
        pub.publish("k", b"after")
        pub.flush()                 # replicated: the primary has it too
    mine, theirs = records(pair.dirs["backup"], b"s"), records(pair.dirs["primary"], b"s")
    assert len(mine[0]) == 101 and theirs == mine
    assert mine[1] == [(1, 1), (2, 101)]       # the backup's takeover epoch, adopted by the primary
    info = primary.call("INFO")
    assert info["pair"]["truncated"] == 0 and info["counters"].get("replicated", 0) == 0   # nothing copied twice
    assert backup.call("INFO")["counters"]["replicated"] == 1
