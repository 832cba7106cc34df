"""Streaming reads: per-stream sequence offsets resumed from a checkpoint, starting offsets,
maxRecordsPerTrigger with Trigger.AvailableNow, and data removed by retention."""
import json
import os

import pytest

from zactors.actors.journal import Journal

from .conftest import write_journal

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _run(spark, root, checkpoint, name, **options):
    """Run to the end of what is there (AvailableNow) into Parquet (a sink that recovers from its
    checkpoint); the rows that query run added, and the query."""
    reader = spark.readStream.format("zeps").option("path", str(root))
    for key, value in options.items():
        reader = reader.option(key, value)
    out = str(checkpoint) + "-out"
    before = _table(spark, out)
    query = (reader.load().selectExpr("stream", "seq", "cast(body as string) as body").writeStream
             .format("parquet").option("path", out).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive
    if query.exception() is not None:
        raise query.exception()
    after = _table(spark, out)
    for row in before:
        after.remove(row)
    return after, query


def _table(spark, out):
    if not os.path.isdir(os.path.join(out, "_spark_metadata")):
        return []
    return [(r.stream, r.seq, r.body) for r in spark.read.parquet(out).collect()]


def test_resume_from_checkpoint_in_bounded_batches(spark, tmp_path):
    root = tmp_path / "j"
    write_journal(root, "a", [(b"k", b"a%d" % i) for i in range(250)], segment_bytes=4096)
    write_journal(root, "b", [(b"k", b"b%d" % i) for i in range(50)])
    rows, query = _run(spark, root, tmp_path / "ck", "s1", maxRecordsPerTrigger=100)
    assert sorted(rows) == sorted([("a", i + 1, "a%d" % i) for i in range(250)] +
                                  [("b", i + 1, "b%d" % i) for i in range(50)])
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [100, 100, 100]
    assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {"a": 251, "b": 51}
    # more records, same checkpoint: exactly the new ones, from the next sequence
    write_journal(root, "a", [(b"k", b"a%d" % i) for i in range(250, 260)], segment_bytes=4096)
    rows, _ = _run(spark, root, tmp_path / "ck", "s2", maxRecordsPerTrigger=100)
    assert sorted(rows) == [("a", i + 1, "a%d" % i) for i in range(250, 260)]


def test_starting_offsets(spark, tmp_path):
    root = tmp_path / "j"
    t0 = 1_800_000_000.0
    write_journal(root, "a", [(b"k", b"%d" % i) for i in range(30)], timestamps=[t0 + i for i in range(30)])
    rows, _ = _run(spark, root, tmp_path / "c1", "o1", startingOffsets="latest")
    assert rows == []
    rows, _ = _run(spark, root, tmp_path / "c2", "o2", startingOffsets='{"a": 26}')
    assert sorted(r[1] for r in rows) == [26, 27, 28, 29, 30]
    rows, _ = _run(spark, root, tmp_path / "c3", "o3", startingOffsets=str(t0 + 27))
    assert sorted(r[1] for r in rows) == [28, 29, 30]


def test_data_removed_by_retention(spark, tmp_path):
    root = tmp_path / "j"
    directory = write_journal(root, "a", [(b"k", b"x" * 100) for i in range(100)], segment_bytes=2048)
    rows, _ = _run(spark, root, tmp_path / "ck", "r1", startingOffsets="latest")
    assert rows == []
    write_journal(root, "a", [(b"k", b"y" * 100) for i in range(100)], segment_bytes=2048)
    journal = Journal(directory, segment_bytes=2048, retain_bytes=4096)
    journal.apply_retention()
    first = journal.first_seq
    journal.close()
    assert first > 101                                  # the checkpoint's next sequence is gone
    from zactors.patterns.zeps.spark import explain
    with pytest.raises(Exception) as info:
        _run(spark, root, tmp_path / "ck", "r2")
    message = explain(info.value)
    assert message == ("stream 'a': the query needs sequence 101 but retention removed it (first available: %d);"
                       " set failOnDataLoss=false to carry on from %d" % (first, first))
    rows, _ = _run(spark, root, tmp_path / "ck", "r3", failOnDataLoss="false")
    assert sorted(r[1] for r in rows) == list(range(first, 201))
    assert os.path.isdir(directory)
