"""A telemetry pipeline on Spark over ZEPS: ``zactors spark pipeline``.

::

    sensors (greenlets) --PUBLISH--> broker, stream "readings" (journaled)
        --> Spark Structured Streaming (format "zeps", over tcp):
            per sensor and 10 s window (event time, 5 s watermark; ``window``): count, mean, max, outliers
            --> Parquet (WORKDIR/aggregates)        exactly-once (file sink)
            --> stream "aggregates" on the broker   exactly-once (zeps sink)
        --> a subscriber prints each aggregate as it lands
    then a batch job over the whole journal: each sensor's busiest minute.

Spark runs with ``local[*]`` by default, or on a cluster (``master`` such as
``spark://host:7077``); its executors read and write the broker over tcp,
so on a cluster bind the broker to an address they reach.  The broker,
sensors and printer run in this process's gevent hub; every Spark driver
call (they block in py4j) goes through the hub's threadpool, so they keep
running meanwhile.  :class:`Pipeline` is for one greenlet.
"""
import json
import logging
import os
import random
import time

import gevent

from .options import client_endpoint

__all__ = ["Pipeline", "OUTLIER"]

log = logging.getLogger(__name__)

OUTLIER = 60.0                       # a reading above this is an outlier (sensors idle around 15-35)
READINGS, AGGREGATES = "readings", "aggregates"


def _spark_call(func, *args):
    """Run a blocking Spark driver call on the hub's threadpool; this greenlet waits, the hub runs."""
    return gevent.get_hub().threadpool.apply(func, args)


class Pipeline:
    """One run of the pipeline (see the module docstring).

    ``out(line)`` receives results (the aggregates, the history answer),
    ``progress(line)`` the progress lines.  Blocks in :meth:`run`.
    """

    def __init__(self, workdir, *, master="local[*]", bind="tcp://127.0.0.1:*", advertise=None, sensors=8,
                 rate=50.0, duration=60.0, window=10, count=0, out=print, progress=None):
        self.workdir = os.path.abspath(workdir)
        self.master = master
        self.bind = bind
        self.advertise = advertise
        self.sensors = sensors
        self.rate = rate                    # readings per second per sensor
        self.duration = duration
        self.count = count                  # stop streaming after this many aggregates (0: no limit)
        self.window = window                # seconds per aggregate window; the watermark is half of it
        self.out = out
        self.progress = progress or (lambda line: None)
        self.published = 0
        self.printed = 0
        self.outliers = 0
        self.answer = None
        self._broker = self._spark = None
        self._queries = []
        self._greenlets = []
        self._printer = None

    # -- the parts ----------------------------------------------------------------------
    def _endpoint(self):
        endpoint = self._broker.endpoint
        if not self.advertise:
            return client_endpoint(endpoint)
        return "tcp://%s:%s" % (self.advertise, endpoint.rsplit(":", 1)[1])

    def _sensor_loop(self, endpoint):
        from zactors.patterns.zeps.client import Publisher

        rng = random.Random(7)
        baselines = [15.0 + 20.0 * i / max(1, self.sensors - 1) for i in range(self.sensors)]
        period = 1.0 / self.rate
        with Publisher(endpoint, READINGS) as pub:
            next_at = time.monotonic()
            last_flush = next_at
            while True:
                now = time.time()
                for i, base in enumerate(baselines):
                    value = rng.gauss(base, 1.0)
                    if rng.random() < 0.002:
                        value += 50.0 + 20.0 * rng.random()        # a spike
                    body = json.dumps({"sensor": "sensor-%02d" % i, "value": round(value, 3), "ts": now})
                    pub.publish(b"sensor-%02d" % i, body.encode())
                self.published += self.sensors
                next_at += period
                if next_at - last_flush >= 1.0:
                    pub.flush()
                    last_flush = next_at
                gevent.sleep(max(0.0, next_at - time.monotonic()))

    def _print_aggregate(self, message):
        row = json.loads(message.body)
        self.printed += 1
        self.outliers += row["outliers"]
        self.out("%s  %s..%s  count=%-4d mean=%7.2f  max=%7.2f%s" % (
            row["sensor"], row["window_start"][11:19], row["window_end"][11:19], row["count"], row["mean"],
            row["max"], "  OUTLIERS=%d" % row["outliers"] if row["outliers"] else ""))

    def _start_spark(self, endpoint):
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        from zactors.patterns.zeps.spark import register

        spark = (SparkSession.builder.master(self.master).appName("zactors telemetry pipeline")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "4")
                 .config("spark.sql.session.timeZone", "UTC")
                 .config("spark.sql.streaming.stopTimeout", "10s")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        self._spark = spark
        readings = (spark.readStream.format("zeps").option("broker", endpoint).option("stream", READINGS)
                    .option("startingOffsets", "latest")
                    .option("bodyFormat", "json").option("bodySchema", "sensor STRING, value DOUBLE, ts DOUBLE")
                    .load().withColumn("event_time", F.timestamp_seconds("ts")))
        stats = (readings.withWatermark("event_time", "%g seconds" % (self.window / 2))
                 .groupBy(F.window("event_time", "%d seconds" % self.window), "sensor")
                 .agg(F.count("*").alias("count"), F.round(F.avg("value"), 3).alias("mean"),
                      F.max("value").alias("max"),
                      F.sum((F.col("value") > OUTLIER).cast("int")).alias("outliers"))
                 .select(F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss").alias("window_start"),
                         F.date_format("window.end", "yyyy-MM-dd'T'HH:mm:ss").alias("window_end"),
                         "sensor", "count", "mean", "max", "outliers"))
        checkpoints = os.path.join(self.workdir, "checkpoints")
        self._queries.append(stats.writeStream.queryName("aggregates-to-parquet").format("parquet")
                             .option("path", os.path.join(self.workdir, "aggregates"))
                             .option("checkpointLocation", os.path.join(checkpoints, "parquet"))
                             .outputMode("append").trigger(processingTime="1 second").start())
        self._queries.append(stats.selectExpr("sensor as key", "to_json(struct(*)) as body").writeStream
                             .queryName("aggregates-to-zeps").format("zeps")
                             .option("broker", endpoint).option("stream", AGGREGATES)
                             .option("checkpointLocation", os.path.join(checkpoints, "zeps"))
                             .outputMode("append").trigger(processingTime="1 second").start())

    def _status(self):
        """(batches, input rows/s, an error) of the streaming queries, read from the driver."""
        batches, rate, error = 0, 0.0, None
        for query in self._queries:
            if not query.isActive and query.exception() is not None:
                error = query.exception()
            p = query.lastProgress
            if p:
                batches = max(batches, p["batchId"] + 1)
                rate = max(rate, p.get("processedRowsPerSecond") or 0.0)
        return batches, rate, error

    def _history(self, endpoint):
        """The batch job: each sensor's busiest minute over the whole journal."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        spark = self._spark
        df = (spark.read.format("zeps").option("broker", endpoint).option("stream", READINGS)
              .option("bodyFormat", "json").option("bodySchema", "sensor STRING, value DOUBLE, ts DOUBLE").load())
        per_minute = (df.groupBy("sensor", F.window(F.timestamp_seconds("ts"), "1 minute").alias("minute"))
                      .agg(F.count("*").alias("readings"), F.max("value").alias("max")))
        rank = Window.partitionBy("sensor").orderBy(F.desc("readings"), "minute")
        best = (per_minute.withColumn("rank", F.row_number().over(rank)).where("rank = 1")
                .select("sensor", F.date_format("minute.start", "HH:mm").alias("minute"), "readings", "max")
                .orderBy("sensor"))
        return [tuple(r) for r in best.collect()]

    # -- the run ------------------------------------------------------------------------
    def run(self):
        """Stream for ``duration`` seconds or until ``count`` aggregates were printed (both 0: until
        interrupted), then run the history job.  Returns 0."""
        from zactors.patterns.zeps.broker import Broker
        from zactors.patterns.zeps.client import Subscriber

        os.makedirs(self.workdir, exist_ok=True)
        self._broker = Broker(os.path.join(self.workdir, "journal"), self.bind)
        endpoint = self._endpoint()
        self.progress("broker on %s (journal %s)" % (endpoint, os.path.join(self.workdir, "journal")))
        try:
            self._printer = Subscriber(endpoint, AGGREGATES, new=True, wait=True, callback=self._print_aggregate)
            self.progress("starting Spark (%s)..." % self.master)
            _spark_call(self._start_spark, endpoint)
            self._greenlets.append(gevent.spawn(self._sensor_loop, endpoint))
            self.progress("%d sensors publishing %g readings/s each; aggregates appear once a %d s window "
                          "closes (about %d s)" % (self.sensors, self.rate, self.window, self.window * 1.5 + 1))
            started = time.monotonic()
            while (not self.duration or time.monotonic() - started < self.duration) and \
                    (not self.count or self.printed < self.count):
                gevent.sleep(2.0)
                batches, rate, error = _spark_call(self._status)
                if error is not None:
                    raise RuntimeError("the streaming query failed: %s" % _reason(error))
                self.progress("%6.0fs  published %d readings | Spark: %d micro-batches, %.0f rows/s | "
                              "%d aggregates printed" % (time.monotonic() - started, self.published, batches,
                                                         rate, self.printed))
            self._stop_streaming()
            self.progress("history: each sensor's busiest minute, from the journal...")
            self.answer = _spark_call(self._history, endpoint)
            self.out("%-10s %-6s %9s %8s" % ("sensor", "minute", "readings", "max"))
            for sensor, minute, readings, top in self.answer:
                self.out("%-10s %-6s %9d %8.2f" % (sensor, minute, readings, top))
            return 0
        finally:
            self.close()

    def _stop_streaming(self):
        for g in self._greenlets:
            g.kill()
        self._greenlets = []
        queries, self._queries = self._queries, []
        if queries and self._spark is not None:
            # Stopping interrupts the running micro-batch: Spark then logs errors about it. It is
            # harmless (the checkpoint and both exactly-once sinks replay it), so keep it quiet.
            _spark_call(self._spark.sparkContext.setLogLevel, "OFF")
            logging.getLogger("py4j").setLevel(logging.WARNING)
        for query in queries:
            _spark_call(query.stop)

    def close(self):
        """Stop everything this run started (safe to call twice)."""
        try:
            self._stop_streaming()
        finally:
            if self._spark is not None:
                spark, self._spark = self._spark, None
                _spark_call(spark.stop)
            if self._printer is not None:
                self._printer.destroy()
                self._printer = None
            if self._broker is not None:
                self._broker.destroy()
                self._broker = None


def _reason(error):
    from zactors.patterns.zeps.spark import explain
    return explain(error) or str(error).splitlines()[0]
