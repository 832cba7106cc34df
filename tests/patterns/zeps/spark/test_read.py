"""Batch reads through a real SparkSession: journal files and a live broker, options, clear errors."""
import json
import os

import pytest

from .conftest import publish, write_journal

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _rows(df):
    return [tuple(r) for r in df.collect()]


@pytest.fixture
def journal(tmp_path):
    root = tmp_path / "journal"
    t0 = 1_700_000_000.0
    records = [(b"sensor-%d" % (i % 5), json.dumps({"n": i, "v": i * 0.5}).encode()) for i in range(20000)]
    write_journal(root, "readings", records, segment_bytes=256 << 10, timestamps=[t0 + i for i in range(20000)])
    write_journal(root, "other/x", [(b"a", b"1"), (b"b", b"2")])
    return str(root), records, t0


def test_whole_journal_directory(spark, journal):
    root, records, t0 = journal
    df = spark.read.format("zeps").option("path", root).option("partitionBytes", 64 << 10).load()
    assert [f.name for f in df.schema] == ["stream", "seq", "timestamp", "key", "body"]
    assert df.rdd.getNumPartitions() > 10                        # segments split by sparse-index position
    got = sorted((r.stream, r.seq, bytes(r.key), bytes(r.body)) for r in df.collect())
    want = sorted([("readings", i + 1, k, b) for i, (k, b) in enumerate(records)] +
                  [("other/x", 1, b"a", b"1"), ("other/x", 2, b"b", b"2")])
    assert got == want
    first = df.where("stream = 'readings' and seq = 1").select("timestamp").first()[0]
    assert abs(first.timestamp() - t0) < 1e-3


def test_ranges_pattern_and_json_body(spark, journal):
    root, records, t0 = journal
    df = (spark.read.format("zeps").option("path", root).option("stream", "readings")
          .option("fromSeq", 101).option("toSeq", 5000).option("startTime", "2023-11-14T22:30:00Z")   # t0 + 1000
          .option("endTime", t0 + 2000)
          .option("keyPattern", "glob:sensor-[12]")
          .option("bodyFormat", "json").option("bodySchema", "n INT, v DOUBLE").load())
    assert [f.name for f in df.schema][-2:] == ["n", "v"]
    got = sorted((r.seq, r.n, r.v) for r in df.collect())
    want = [(i + 1, i, i * 0.5) for i in range(1000, 2001) if i % 5 in (1, 2)]
    assert got == want


def test_utf8_body(spark, tmp_path):
    root = tmp_path / "j"
    write_journal(root, "t", [(b"k", ("héllo %d" % i).encode()) for i in range(10)])
    df = spark.read.format("zeps").option("path", str(root)).option("bodyFormat", "utf-8").load()
    assert sorted(r.body for r in df.collect()) == sorted("héllo %d" % i for i in range(10))


def test_from_a_live_broker(spark, broker_process):
    broker = broker_process()
    records = [(b"k%d" % (i % 3), b"body-%d" % i) for i in range(3000)]
    publish(broker.endpoint, "live", records)
    df = (spark.read.format("zeps").option("broker", broker.endpoint).option("stream", "live")
          .option("partitionBytes", 64 << 10).option("keyPattern", "k1").load())
    assert df.rdd.getNumPartitions() > 1
    got = sorted((r.seq, bytes(r.key), bytes(r.body), r.timestamp) for r in df.collect())
    assert got == [(i + 1, k, b, None) for i, (k, b) in enumerate(records) if k == b"k1"]


def _error(spark, excinfo_call):
    from zactors.patterns.zeps.spark import explain
    with pytest.raises(Exception) as info:
        excinfo_call()
    return explain(info.value)


def test_clear_errors(spark, journal, tmp_path, broker_process):
    root, _records, _t0 = journal
    read = spark.read.format("zeps")
    assert _error(spark, lambda: read.option("path", str(tmp_path / "nope")).load().collect()) == \
        "no journal directory %s" % (tmp_path / "nope")
    assert _error(spark, lambda: read.option("path", root).option("stream", "missing").load().collect()) == \
        "no stream 'missing' in journal directory %s" % root
    assert "is not one of binary, utf-8, json" in _error(
        spark, lambda: spark.read.format("zeps").option("path", root).option("bodyFormat", "xml").load())
    assert "cannot reach the ZEPS broker at tcp://127.0.0.1:1" in _error(
        spark, lambda: spark.read.format("zeps").option("broker", "tcp://127.0.0.1:1").option("stream", "s")
        .option("timeout", 1).load().collect())
    broker = broker_process()
    assert _error(spark, lambda: spark.read.format("zeps").option("broker", broker.endpoint)
                  .option("stream", "ghost").load().collect()) == \
        "no stream 'ghost' on the broker at %s" % broker.endpoint
    # a corrupt sealed segment: the file and offset are named
    directory = os.path.join(root, "readings")
    first = sorted(n for n in os.listdir(directory) if n.endswith(".seg"))[0]
    with open(os.path.join(directory, first), "r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0x55]))
    message = _error(spark, lambda: spark.read.format("zeps").option("path", root).option("stream", "readings")
                     .load().collect())
    assert "stream 'readings'" in message and first in message and "corrupt record" in message


def test_json_body_that_is_not_json(spark, tmp_path):
    root = tmp_path / "j"
    write_journal(root, "t", [(b"k", b"{\"n\": 1}"), (b"k", b"not json")])
    read = (spark.read.format("zeps").option("path", str(root)).option("bodyFormat", "json")
            .option("bodySchema", "n INT, _corrupt_record STRING"))
    assert sorted((r.seq, r.n, r._corrupt_record) for r in read.load().collect()) == [
        (1, 1, None), (2, None, "not json")]                          # PERMISSIVE, as Spark's JSON reader
    assert [r.seq for r in read.option("mode", "DROPMALFORMED").load().collect()] == [1]
    message = _error(spark, lambda: read.option("mode", "FAILFAST").load().collect())
    assert message.startswith("stream 't': the body at sequence 2 is not a JSON object matching bodySchema")
    assert _error(spark, lambda: read.option("mdoe", "FAILFAST").load()).startswith("unknown option mdoe: ")
