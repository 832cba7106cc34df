"""The Spark source over broker pairs and a cluster map (issue #23): a real SparkSession reads a stream
placed on the second of two pairs, by the map and by that pair's endpoints, and reads it again after
that pair's active was SIGKILLed (the read fails over to the backup)."""
import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import wait_for
from zactors.patterns.zeps.client import Publisher, query
from zactors.patterns.zeps.cluster import ClusterMap

from .conftest import ROOT

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
PAIR_BROKER = os.path.join(ROOT, "tests", "patterns", "zeps", "pair", "_pair_broker.py")


class PairProcesses:
    """A primary and a backup broker process on ipc endpoints under ``root``, ack="replicated"."""

    def __init__(self, root):
        os.makedirs(root)
        self.procs = {}
        ends = {role: ("ipc://%s/%s.zeps" % (root, role), "ipc://%s/%s.pair" % (root, role))
                for role in ("primary", "backup")}
        for role, other in (("primary", "backup"), ("backup", "primary")):
            self.procs[role] = subprocess.Popen(
                [sys.executable, PAIR_BROKER, os.path.join(root, role), ends[role][0], ends[role][1], ends[other][1],
                 role], cwd=ROOT, stdout=subprocess.PIPE)
            assert self.procs[role].stdout.readline().decode().split()[0] == ends[role][0]
        self.endpoints = "%s,%s" % (ends["primary"][0], ends["backup"][0])

    def ready(self):
        return query(self.endpoints, timeout=2).get("pair", {}).get("state") == "active" and \
            (lambda info: info["pair"]["state"] == "passive" and info["pair"]["ready"])(
                query(self.endpoints.split(",")[1], timeout=2))

    def kill(self, role):
        self.procs[role].send_signal(signal.SIGKILL)
        self.procs[role].wait()

    def close(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def cluster(tmp_path):
    from .conftest import spark_env
    spark_env()                                   # skips without pyspark or Java, before any process starts
    pairs = [PairProcesses(str(tmp_path / ("pair%d" % i))) for i in range(2)]
    try:
        for pair in pairs:
            wait_for(pair.ready, 30, "the pair")
        yield pairs
    finally:
        for pair in pairs:
            pair.close()


def _read(spark, broker, stream):
    df = spark.read.format("zeps").option("broker", broker).option("stream", stream).option("timeout", 6).load()
    return sorted((r.seq, bytes(r.key), bytes(r.body)) for r in df.collect())


def test_read_a_stream_on_the_second_pair_by_the_map_and_after_a_failover(spark, cluster):
    cluster_map = ";".join(pair.endpoints for pair in cluster)
    placed = ClusterMap.parse(cluster_map)
    name = next("s%d" % i for i in range(100) if placed.index_for(b"s%d" % i) == 1)   # on the second pair
    records = [(b"k%d" % (i % 3), b"body-%d" % i) for i in range(2000)]
    with Publisher(cluster_map, name, idempotent=True) as pub:
        for key, body in records:
            pub.publish(key, body)
        pub.flush()
    want = [(i + 1, k, b) for i, (k, b) in enumerate(records)]
    assert name in query(cluster[1].endpoints)["streams"] and name not in query(cluster[0].endpoints)["streams"]
    assert _read(spark, cluster_map, name) == want            # the map places it on its pair
    assert _read(spark, cluster[1].endpoints, name) == want   # the pair's endpoints
    cluster[1].kill("primary")                                # replicated: the backup has every record
    assert _read(spark, cluster_map, name) == want            # the read fails over to the backup
    assert query(cluster[1].endpoints)["pair"]["state"] == "active"


def _stream_run(spark, cluster_map, name, checkpoint):
    """One streaming run of ``name`` by the map to the end of what is there (AvailableNow), resumed from
    ``checkpoint``; the (seq, body) rows it added."""
    out = str(checkpoint) + "-out"
    before = set()
    if os.path.isdir(os.path.join(out, "_spark_metadata")):
        before = {(r.seq, r.body) for r in spark.read.parquet(out).collect()}
    query = (spark.readStream.format("zeps").option("broker", cluster_map).option("stream", name)
             .option("timeout", 6).load().selectExpr("seq", "cast(body as string) as body").writeStream
             .format("parquet").option("path", out).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None, query.exception()
    rows = [(r.seq, r.body) for r in spark.read.parquet(out).collect()]
    assert len(rows) == len(set(rows)), "a row twice"
    return sorted(set(rows) - before)


def test_a_streaming_read_by_the_map_resumes_across_a_failover(spark, cluster, tmp_path):
    cluster_map = ";".join(pair.endpoints for pair in cluster)
    name = next("s%d" % i for i in range(100) if ClusterMap.parse(cluster_map).index_for(b"s%d" % i) == 1)
    with Publisher(cluster_map, name, idempotent=True, heartbeat=0.2, expiry=1.0) as pub:
        for i in range(500):
            pub.publish("k", "a%d" % i)
        pub.flush()
        checkpoint = tmp_path / "checkpoint"
        assert _stream_run(spark, cluster_map, name, checkpoint) == [(i + 1, "a%d" % i) for i in range(500)]
        cluster[1].kill("primary")                # the stream's pair fails over; the query's offsets hold
        for i in range(500):
            pub.publish("k", "b%d" % i)
        pub.flush(timeout=15)
    assert _stream_run(spark, cluster_map, name, checkpoint) == [(501 + i, "b%d" % i) for i in range(500)]
    assert query(cluster[1].endpoints)["pair"]["state"] == "active"
