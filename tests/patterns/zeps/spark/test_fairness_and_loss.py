"""Issue 19, defect 9: failOnDataLoss=false reads what retention left of a broker slice, and
maxRecordsPerTrigger is shared fairly by several streams."""
import pytest

from .conftest import write_journal
from .test_stream import _run

pytestmark = [pytest.mark.timeout(300)]


def test_fair_share_splits_the_budget_and_passes_on_what_one_does_not_need():
    pytest.importorskip("pyspark")
    from zactors.patterns.zeps.spark.source import fair_share
    assert fair_share({"a": 1000, "b": 1000, "c": 1000}, 90) == {"a": 30, "b": 30, "c": 30}
    assert fair_share({"a": 1000, "b": 10, "c": 0}, 90) == {"a": 80, "b": 10, "c": 0}
    assert fair_share({"a": 5, "b": 7}, 100) == {"a": 5, "b": 7}
    assert fair_share({"a": 50, "b": 60, "c": 70}, 2) == {"a": 0, "b": 1, "c": 1}
    assert sum(fair_share({"a": 7, "b": 9, "c": 100, "d": 3}, 50).values()) == 50


@pytest.mark.slow
def test_max_records_per_trigger_does_not_starve_the_later_streams(spark, tmp_path):
    root = tmp_path / "j"
    for name in ("a", "b", "c"):
        write_journal(root, name, [(b"k", b"%s%d" % (name.encode(), i)) for i in range(200)])
    rows, query = _run(spark, root, tmp_path / "ck", "fair", maxRecordsPerTrigger=90)
    assert len(rows) == 600
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert batches[0]["numInputRows"] == 90
    import json
    first = json.loads(batches[0]["sources"][0]["endOffset"])
    assert first == {"a": 31, "b": 31, "c": 31}  # 30 each: not 90 of "a" and none of the others


def _gone_from_the_start(journal_dir):
    """A broker whose retention removed the first segments of stream "a" (300 records)."""
    from zactors.patterns.zeps import Publisher
    from zactors.patterns.zeps.broker import Broker

    from ....conftest import wait_for
    broker = Broker(journal_dir, segment_bytes=2048, retain_bytes=4096)
    with Publisher(broker.endpoint, "a") as pub:
        for i in range(300):
            pub.publish(b"k", b"%04d" % i + b"x" * 40)
        pub.flush()

    def retained():
        broker.send("RETAIN")
        return broker.call("INFO")["streams"]["a"]["first_seq"] > 1
    wait_for(retained, timeout=30, what="retention")
    return broker, broker.call("INFO")["streams"]["a"]["first_seq"]


def _read(endpoint, part, **options):
    import pyarrow as pa

    from zactors.patterns.zeps.spark.options import Options
    from zactors.patterns.zeps.spark.reader import read_partition
    from zactors.patterns.zeps.spark.segments import SCHEMA
    schema = pa.schema([("stream", pa.string()), *SCHEMA])
    opts = Options(dict({"broker": endpoint, "stream": "a"}, **options))
    return [seq for batch in read_partition(opts, [part], schema, None) for seq in batch.column(1).to_pylist()]


def test_a_broker_slice_whose_start_retention_removed_is_read_from_what_is_left(tmp_path):
    """Retention ran between planning and reading: the slice 1..300 starts before the first retained."""
    pytest.importorskip("pyarrow")
    from zactors.patterns.zeps.spark.options import ZepsSparkError
    from zactors.patterns.zeps.spark.reader import BrokerPart
    broker, first = _gone_from_the_start(str(tmp_path / "b"))
    try:
        assert 1 < first < 300
        assert _read(broker.endpoint, BrokerPart("a", 1, 300), failOnDataLoss="false") == list(range(first, 301))
        with pytest.raises(ZepsSparkError, match="removed by retention"):
            _read(broker.endpoint, BrokerPart("a", 1, 300))
        assert _read(broker.endpoint, BrokerPart("a", first, 300)) == list(range(first, 301))
    finally:
        broker.destroy()
