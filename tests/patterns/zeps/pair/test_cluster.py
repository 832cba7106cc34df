"""Streams over three broker pairs on loopback: a static cluster map and a stable hash place each stream."""
import os

import pytest

from zactors.apps.cli import main
from zactors.patterns.zeps import Publisher, Subscriber, query
from zactors.patterns.zeps.cluster import ClusterMap, resolve
from zactors.patterns.zeps.names import stream_directory

from .conftest import Pair, pair_info, wait_for

pytestmark = pytest.mark.timeout(180)


def test_the_hash_is_stable_across_processes_and_runs():
    cluster = ClusterMap.parse("a1,b1;a2,b2;a3,b3")
    assert [cluster.index_for(name) for name in (b"orders", b"trades", b"logs", b"")] == [1, 1, 1, 0]  # pinned: blake2b-64
    assert cluster.pair_for(b"trades") == "a2,b2" and resolve("a,b", b"x") == "a,b"


def test_streams_over_three_pairs_each_on_one_pair_with_failover(tmp_path, capsys):
    pairs = [Pair(tmp_path / ("pair%d" % i), ack="replicated") for i in range(3)]
    try:
        for pair in pairs:
            pair.up()
        cluster = ";".join("%s,%s" % (p.brokers["primary"].endpoint, p.brokers["backup"].endpoint) for p in pairs)
        streams = ["s%d" % i for i in range(12)]
        for name in streams:
            with Publisher(cluster, name, idempotent=True) as pub:
                for i in range(50):
                    pub.publish("k", "%s %d" % (name, i))
                pub.flush()
        placed = ClusterMap.parse(cluster)
        assert len({placed.index_for(n.encode()) for n in streams}) == 3       # all three pairs hold some
        for name in streams:
            home = pairs[placed.index_for(name.encode())]
            for i, pair in enumerate(pairs):  # journaled on its pair (both brokers), nowhere else
                here = os.path.isdir(os.path.join(pair.dirs["primary"], stream_directory(name.encode())))
                assert here == (pair is home), (name, i)
        merged = query(cluster)
        assert sorted(merged["streams"]) == sorted(streams) and len(merged["cluster"]) == 3
        assert all(s["last_seq"] == 50 for s in merged["streams"].values())
        # one pair's primary goes: its streams fail over to its backup, the other pairs do not notice
        victim = pairs[placed.index_for(b"s0")]
        victim.stop("primary")
        for name in streams:
            sub = Subscriber(cluster, name, from_seq=1, timeout=15, heartbeat=0.2, expiry=1.0)
            try:
                assert [sub.get(timeout=10).body for _ in range(50)] == \
                    [("%s %d" % (name, i)).encode() for i in range(50)]
            finally:
                sub.destroy()
        assert pair_info(victim.brokers["backup"])["state"] == "active"
        assert all(pair_info(p.brokers["primary"])["state"] == "active" for p in pairs if p is not victim)
        assert main(["-q", "zeps", "streams", "--connect", cluster]) == 0
        out = capsys.readouterr().out
        assert out.count("pair: ") == 3 and "pair: backup active" in out and "stream s11" in out
    finally:
        for pair in pairs:
            pair.close()


def test_a_query_of_a_pair_whose_first_broker_is_dead_answers_at_once(tmp_path):
    """A dead broker of a pair (nothing listens: connection refused) costs no share of the timeout: the
    dashboard, the CLI and the Spark source ask a pair after its failover."""
    import socket
    import time

    from zactors.patterns.zeps.broker import Broker
    live = Broker(str(tmp_path / "live"), "ipc://%s/live.zeps" % tmp_path)
    left = socket.socket(socket.AF_UNIX)        # the socket file a SIGKILLed broker leaves behind
    left.bind(str(tmp_path / "dead.zeps"))
    left.close()
    try:
        for dead in ("ipc://%s/dead.zeps" % tmp_path, "tcp://127.0.0.1:1"):
            started = time.monotonic()
            assert query("%s,%s" % (dead, live.endpoint), timeout=6)["endpoint"] == live.endpoint
            assert time.monotonic() - started < 2.0, dead
    finally:
        live.destroy()
