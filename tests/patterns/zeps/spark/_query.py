"""A streaming query in its own process (the test kills it with SIGKILL mid-stream).

zeps stream ``in`` -> upper-cased body -> zeps stream ``out``, checkpointed.
Usage: python -m tests.patterns.zeps.spark._query ENDPOINT CHECKPOINT (slow|now)
"""
import sys

from tests.patterns.zeps.spark.conftest import spark_env


def main(endpoint, checkpoint, mode):
    import pytest
    try:
        spark_env()
    except pytest.skip.Exception:
        sys.exit(3)
    from pyspark.sql import SparkSession

    from zactors.patterns.zeps.spark import register

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.host", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    rows = (spark.readStream.format("zeps").option("broker", endpoint).option("stream", "in")
            .option("maxRecordsPerTrigger", 40).load()
            .selectExpr("key", "upper(cast(body as string)) as body"))
    writer = (rows.writeStream.format("zeps").option("broker", endpoint).option("stream", "out")
              .option("checkpointLocation", checkpoint))
    if mode == "now":
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        print("started", flush=True)
        writer.trigger(processingTime="100 milliseconds").start().awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:4])
