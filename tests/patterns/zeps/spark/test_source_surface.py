"""The zeps source as a newcomer meets it (issue 21): misspelled options are refused with the list of valid
ones; one malformed JSON body does not fail a read unless asked (``mode``); a ``broker=`` read never creates
a stream; the streaming reader does not QUERY the broker on every poll."""
import json
import os
import time

import gevent
import pytest

from ....conftest import wait_for
from .conftest import write_journal

pa = pytest.importorskip("pyarrow", reason="the Spark tests need the spark extra")

pytestmark = pytest.mark.timeout(120)


def _opts(**options):
    from zactors.patterns.zeps.spark.options import Options
    return Options(options)


def test_a_misspelled_option_is_refused_with_the_valid_ones():
    from zactors.patterns.zeps.spark.options import ZepsSparkError
    with pytest.raises(ZepsSparkError) as caught:
        _opts(path="/j", keyPatern="eu.")
    message = str(caught.value)
    assert message.startswith("unknown option keypatern: the zeps source takes path, broker, stream")
    assert "keyPattern" in message and "\n" not in message
    with pytest.raises(ZepsSparkError, match="unknown options fromseqq, strem:"):
        _opts(path="/j", strem="s", fromSeqq=1)
    for bad, says in [({"mode": "lenient"}, "option mode: 'lenient' is not one of PERMISSIVE, DROPMALFORMED"),
                      ({"timeout": "soon"}, "option timeout: 'soon' is not a number"),
                      ({"timeout": "0"}, "must be above 0")]:
        with pytest.raises(ZepsSparkError, match=says):
            _opts(path="/j", **bad)
    # Spark's own names, and any case, are fine
    assert _opts(PATH="/j", checkpointLocation="/c", MODE="dropmalformed").mode == "DROPMALFORMED"


RECORDS = [b'{"n": 1, "v": 0.5}', b"not json", b'{"n": 3, "v": 1.5}', b'{"n": "three"}', b'{"n": 5}']


def _read(tmp_path, **options):
    """Read stream 't' (RECORDS) from a journal with bodyFormat json, as an executor does."""
    from zactors.patterns.zeps.spark.reader import plan, read_partition, stream_ranges

    root = tmp_path / "j"
    if not root.exists():
        write_journal(root, "t", [(b"k", body) for body in RECORDS])
    schema = options.pop("schema", "n INT, v DOUBLE")
    opts = _opts(path=str(root), bodyFormat="json", bodySchema=schema, **options)
    fields = [pa.field(name, {"INT": pa.int32(), "DOUBLE": pa.float64(), "STRING": pa.string()}[kind])
              for name, kind in (part.strip().split() for part in schema.split(","))]
    out = pa.schema([pa.field("stream", pa.string()), pa.field("seq", pa.int64()),
                     pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("key", pa.binary())] + fields)
    ranges = [(s, d, first, last) for s, (first, last, d) in stream_ranges(opts).items()]
    rows = []
    for part in plan(opts, ranges):
        for batch in read_partition(opts, part, out, fields):
            rows += batch.to_pylist()
    return [{k: v for k, v in row.items() if k not in ("stream", "timestamp", "key")} for row in rows]


def test_permissive_is_the_default_and_fills_the_corrupt_record_column(tmp_path):
    assert _read(tmp_path) == [{"seq": 1, "n": 1, "v": 0.5}, {"seq": 2, "n": None, "v": None},
                               {"seq": 3, "n": 3, "v": 1.5}, {"seq": 4, "n": None, "v": None},
                               {"seq": 5, "n": 5, "v": None}]
    rows = _read(tmp_path, schema="n INT, _corrupt_record STRING")
    assert [(r["n"], r["_corrupt_record"]) for r in rows] == [
        (1, None), (None, "not json"), (3, None), (None, '{"n": "three"}'), (5, None)]
    rows = _read(tmp_path, schema="n INT, bad STRING", columnNameOfCorruptRecord="bad")
    assert [r["bad"] for r in rows] == [None, "not json", None, '{"n": "three"}', None]


def test_dropmalformed_and_failfast(tmp_path):
    from zactors.patterns.zeps.spark.options import ZepsSparkError
    assert [r["seq"] for r in _read(tmp_path, mode="DROPMALFORMED")] == [1, 3, 5]
    with pytest.raises(ZepsSparkError, match="stream 't': the body at sequence 2 is not a JSON object matching "
                                             "bodySchema \\(mode FAILFAST"):
        _read(tmp_path, mode="FAILFAST")


def test_many_bodies_with_a_few_malformed_are_found_quickly(tmp_path):
    root = tmp_path / "j"
    bodies = [json.dumps({"n": i}).encode() if i % 10000 != 7 else b"{broken" for i in range(50000)]
    write_journal(root, "t", [(b"k", body) for body in bodies])
    started = time.monotonic()
    rows = _read(tmp_path, schema="n INT", mode="DROPMALFORMED")
    assert len(rows) == 50000 - 5 and all(r["n"] == r["seq"] - 1 for r in rows)
    assert time.monotonic() - started < 20


def test_a_broker_read_of_a_missing_stream_creates_nothing(broker, journal_dir):
    from zactors.patterns.zeps.spark.options import ZepsSparkError
    from zactors.patterns.zeps.spark.reader import stream_ranges

    with pytest.raises(ZepsSparkError, match="no stream 'ghost' on the broker at %s" % broker.endpoint):
        stream_ranges(_opts(broker=broker.endpoint, stream="ghost"))
    assert stream_ranges(_opts(broker=broker.endpoint, stream="ghost"), must_exist=False) == {"ghost": (1, 0, None)}
    assert broker.call("INFO")["streams"] == {}
    assert not os.path.exists(os.path.join(journal_dir, "ghost"))


def _stream_reader(endpoint, stream):
    pytest.importorskip("pyspark")
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType, TimestampType

    from zactors.patterns.zeps.spark.source import _StreamReader

    schema = StructType([StructField("stream", StringType()), StructField("seq", LongType()),
                         StructField("timestamp", TimestampType()), StructField("key", BinaryType()),
                         StructField("body", BinaryType())])
    return _StreamReader(_opts(broker=endpoint, stream=stream), schema)


def test_the_streaming_reader_caches_the_latest_offsets(broker, journal_dir):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from zactors.patterns.zeps import Publisher
    from zactors.patterns.zeps.spark import source

    reader = _stream_reader(broker.endpoint, "ticks")
    assert reader.initialOffset() == {"ticks": 1}          # no stream yet: starts at 1, creates nothing
    assert broker.call("INFO")["streams"] == {}
    queries = broker.call("INFO")["counters"].get("queries", 0)
    started = time.monotonic()
    polls = 0
    while time.monotonic() - started < 1.0:               # Spark polls like this when idle
        assert reader.latestOffset({"ticks": 1}, ReadAllAvailable()) == {"ticks": 1}
        polls += 1
        gevent.sleep(0.001)
    asked = broker.call("INFO")["counters"].get("queries", 0) - queries
    assert polls > 50 and asked <= 1.0 / source.LATEST_OFFSETS_TTL + 2, (polls, asked)
    with Publisher(broker.endpoint, "ticks") as pub:
        pub.publish("k", "v")
        pub.flush()
    wait_for(lambda: reader.latestOffset({"ticks": 1}, ReadAllAvailable()) == {"ticks": 2}, timeout=10,
             what="the new message in the latest offsets")


def test_an_uncaught_error_of_the_source_prints_as_one_line(spark, tmp_path, capsys):
    # Spark raises our error at .load() inside a page of its own (its traceback, its worker's, SQLSTATE);
    # register() made the uncaught case one line, with where in the user's script it happened
    import sys
    with pytest.raises(Exception) as caught:
        spark.read.format("zeps").option("path", str(tmp_path)).option("strem", "s").load()
    assert len(str(caught.value).splitlines()) > 1                      # Spark's page: what the hook undoes
    capsys.readouterr()
    sys.excepthook(caught.type, caught.value, caught.tb)
    err = capsys.readouterr().err
    assert err.startswith("ZepsSparkError: unknown option strem: the zeps source takes path, broker"), err
    assert err.endswith("(at %s, line %d)\n" % (__file__, _line_of("option(\"strem\""))), err
    assert err.count("\n") == 1, err
    sys.excepthook(ValueError, ValueError("not ours"), None)            # anything else: as before
    assert capsys.readouterr().err == "ValueError: not ours\n"


def _line_of(text):
    with open(__file__) as source:
        return next(n for n, line in enumerate(source, 1) if text in line and "_line_of" not in line)


def test_a_broker_in_the_drivers_own_process_is_named_as_the_likely_cause(spark, broker):
    # a newcomer made Broker() next to the SparkSession: while the driver waits on Spark, gevent does not run,
    # so the broker cannot answer; the error said only "no answer", which reads as "no broker there"
    from zactors.patterns.zeps.spark import explain
    with pytest.raises(Exception) as caught:
        (spark.read.format("zeps").option("broker", broker.endpoint).option("stream", "s")
         .option("timeout", "1").load().collect())
    assert explain(caught.value) == ("cannot reach the ZEPS broker at %s: no answer within 1.0s (is it running, "
                                     "in a process of its own? not in this Spark driver)" % broker.endpoint)
