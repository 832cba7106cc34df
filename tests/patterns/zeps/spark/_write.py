"""A batch write in its own process (the test kills and restarts the broker while it runs).

Writes ``N`` rows (body ``r%07d``, key ``k0``..``k3``) in 4 partitions to stream ``STREAM``.
Usage: python -m tests.patterns.zeps.spark._write ENDPOINT STREAM N
Exits 0 once the write returned, 1 with the error's one line if it raised, 3 without Spark.
"""
import sys

from tests.patterns.zeps.spark.conftest import spark_env


def main(endpoint, stream, n):
    import pytest
    try:
        spark_env()
    except pytest.skip.Exception:
        sys.exit(3)
    from pyspark.sql import SparkSession

    from zactors.patterns.zeps.spark import explain, register

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    rows = spark.range(int(n), numPartitions=4).selectExpr(
        "concat('k', cast(id % 4 as string)) as key", "format_string('r%07d', id) as body")
    print("started", flush=True)
    try:
        rows.write.format("zeps").option("broker", endpoint).option("stream", stream).option("timeout", 60) \
            .mode("append").save()
    except Exception as exc:
        print("write failed: %s" % (explain(exc) or str(exc).splitlines()[-1]), file=sys.stderr, flush=True)
        sys.exit(1)
    print("written", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
