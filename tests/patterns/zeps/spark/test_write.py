"""Writes: batch (published and flushed by each task) and streaming, exactly-once across a SIGKILL."""
import json
import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import wait_for

from .conftest import ROOT, publish, spark_env

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]


def _stream(endpoint, stream):
    """[(seq, key, body)] of a whole stream, read over the network."""
    from zactors.patterns.zeps.client import Subscriber, query
    last = query(endpoint)["streams"].get(stream, {}).get("last_seq", 0)
    if not last:
        return []
    sub = Subscriber(endpoint, stream, from_seq=1)
    out = []
    try:
        while len(out) < last:
            message = sub.get(10)
            assert message is not None, "the broker stopped delivering %s" % stream
            out.append(tuple(message))
    finally:
        sub.destroy()
    return out


def _last(endpoint, stream):
    from zactors.patterns.zeps.client import query
    return query(endpoint)["streams"].get(stream, {}).get("last_seq", 0)


def test_batch_write(spark, broker_process):
    broker = broker_process()
    df = spark.createDataFrame([("k%d" % (i % 4), "v%d" % i) for i in range(1000)], "key string, body string")
    df.repartition(3).write.format("zeps").option("broker", broker.endpoint).option("stream", "w").mode("append").save()
    got = _stream(broker.endpoint, "w")
    assert sorted((k, b) for _s, k, b in got) == sorted((b"k%d" % (i % 4), b"v%d" % i) for i in range(1000))


def test_write_errors(spark, broker_process):
    from zactors.patterns.zeps.spark import explain
    broker = broker_process()
    df = spark.createDataFrame([(1, 2)], "key int, value int")
    with pytest.raises(Exception) as info:
        df.write.format("zeps").option("broker", broker.endpoint).option("stream", "w").mode("append").save()
    assert explain(info.value) == ("writing to zeps needs a body column of type binary or string; "
                                   "got columns key integer, value integer")
    with pytest.raises(Exception) as info:
        spark.createDataFrame([("a",)], "body string").write.format("zeps").option("stream", "w") \
            .mode("append").save()
    assert explain(info.value).startswith("writing to zeps needs the broker option")


def test_stream_commit_resumes_a_batch_cut_short(broker_process):
    """The recovery path on its own: intent logged, half the rows out, then the replayed commit."""
    pa = pytest.importorskip("pyarrow")
    from pyspark.sql.types import BinaryType, StructField, StructType

    from zactors.patterns.zeps.spark import Options
    from zactors.patterns.zeps.spark.writer import StreamWriter, _Rows, commit_log_stream

    broker = broker_process()
    opts = Options({"broker": broker.endpoint, "stream": "out"})
    schema = StructType([StructField("key", BinaryType()), StructField("body", BinaryType())])
    writer = StreamWriter(opts, schema, False)
    rows = [(b"k", b"r%d" % i) for i in range(10)]
    batch = pa.RecordBatch.from_arrays([pa.array([k for k, _ in rows]), pa.array([b for _, b in rows])],
                                       names=["key", "body"])
    messages = [writer.write(iter([batch.slice(0, 6)])), writer.write(iter([batch.slice(6)]))]
    assert isinstance(messages[0], _Rows)
    writer.commit(messages, 0)
    publish(broker.endpoint, "out", [(b"other", b"noise")])                 # another publisher
    publish(broker.endpoint, commit_log_stream("out", "default"),
            [(b"intent", json.dumps({"batch": 1, "state": "intent", "start": 11, "count": 10}).encode())])
    publish(broker.endpoint, "out", [rows[5], rows[2], rows[7]])           # the crash hit here (another order)
    writer.commit(messages, 1)                                              # Spark replays batch 1
    writer.commit(messages, 1)                                              # and once more: skipped
    writer.commit(messages, 0)                                              # an old batch: skipped
    got = [(k, b) for _s, k, b in _stream(broker.endpoint, "out")]
    assert got == rows + [(b"other", b"noise")] + [rows[5], rows[2], rows[7]] + \
        [r for i, r in enumerate(rows) if i not in (2, 5, 7)]


def test_stream_write_exactly_once_across_sigkill(broker_process, tmp_path, processes):
    spark_env()                                            # skips without pyspark or Java, as the others do
    broker = broker_process()
    total = 600
    publish(broker.endpoint, "in", [(b"k%d" % (i % 3), b"m%04d" % i) for i in range(total)])
    checkpoint = str(tmp_path / "ck")
    argv = [sys.executable, "-m", "tests.patterns.zeps.spark._query", broker.endpoint, checkpoint]
    proc = processes(argv + ["slow"], cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE)
    wait_for(lambda: _last(broker.endpoint, "out") >= 120 or proc.poll() is not None, 240, "output")
    assert proc.poll() is None, "the query process ended early (%s)" % proc.returncode
    os.killpg(proc.pid, signal.SIGKILL)                    # the driver, its JVM and its Python workers
    proc.wait()
    cut = _last(broker.endpoint, "out")
    assert cut < total
    again = processes(argv + ["now"], cwd=ROOT, start_new_session=True)
    assert again.wait() == 0
    got = [b for _s, _k, b in _stream(broker.endpoint, "out")]
    assert sorted(got) == sorted(b"M%04d" % i for i in range(total))      # each once: no loss, no duplicate
