"""The Spark key filter runs the broker's patterns, in linear time (issue 20, defect 1)."""
import time

import pytest

from .conftest import write_journal

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

EVIL_KEY = b"a" * 30 + b"!"


def test_a_redos_key_pattern_reads_in_linear_time(spark, tmp_path):
    root = tmp_path / "j"
    write_journal(root, "t", [(EVIL_KEY, b"evil"), (b"aaaa", b"good"), (b"b" * 200 + b"!", b"other")])
    df = (spark.read.format("zeps").option("path", str(root)).option("keyPattern", "re:(a|a)*$")
          .option("bodyFormat", "utf-8").load())
    started = time.monotonic()
    assert [r.body for r in df.collect()] == ["good"]
    assert time.monotonic() - started < 30   # Spark's own overhead; Python's re took minutes on the first key


def test_a_key_pattern_re2_refuses_is_an_option_error(spark, tmp_path):
    from zactors.patterns.zeps.spark import explain
    root = tmp_path / "j"
    write_journal(root, "t", [(b"k", b"v")])
    with pytest.raises(Exception) as info:
        spark.read.format("zeps").option("path", str(root)).option("keyPattern", r"re:(a)\1").load()
    message = explain(info.value)
    assert message.startswith("option keyPattern: bad regular expression") and "RE2 syntax" in message


def test_the_key_filter_of_the_executors_in_linear_time():
    pa = pytest.importorskip("pyarrow")
    from zactors.patterns.zeps.spark.reader import _KeyFilter
    keys = pa.array([EVIL_KEY, b"aaaa", b"a" * 100000 + b"!", b"aaaa"], pa.binary())
    started = time.monotonic()
    assert _KeyFilter(b"re:(a|a)*$").mask(keys).to_pylist() == [False, True, False, True]
    assert time.monotonic() - started < 1.0
