"""Spark benchmark: the ``zeps`` data source beside Parquet, a naive Python source and the API's ceiling, in one run.

Run: ``python benchmarks/spark.py [--records N] [--size B] [--latency-seconds S]``
(smoke run: ``--records 20000 --latency-seconds 8``).  Needs ``zactors[spark]`` and Java 17.

Batch read, N records of B bytes (default 1M x 100 B), each source read in
full ``--rounds`` times, interleaved, by the same query (``df.write.format("noop")``, every column), on
``--master`` (default ``local[*]``); rows/s and the ratio to Parquet:

- ``zeps`` from the journal directory (``path=``): Arrow batches;
- ``zeps`` from a live broker over tcp (``broker=``; the broker is its own process);
- ``spark.read.parquet`` of the same rows (the ceiling);
- a plain Python data source yielding a tuple per record from
  ``JournalReader.records`` (the naive way);
- the Python Data Source API's own ceiling: a source yielding Arrow batches
  of the same shape built in memory, no I/O, over as many partitions as the
  zeps source plans (no Python source, zeps included, can pass it).

Streaming, publish to aggregate: a publisher sends ``--rate`` readings/s
(each carrying its send time) to the broker; a Structured Streaming query
(``processingTime`` 1 s trigger) counts each micro-batch per key
(``foreachBatch``) and writes each aggregate, with the newest send time it
covers, to a ZEPS stream (the ``zeps`` batch writer); a subscriber takes the latency of each aggregate as receive time
minus that send time.  p50/p90 in seconds.  Targets: journal-dir read >=
0.5x Parquet; p50 < 2 s.

Each round's figure is printed as it is measured, then the medians; the run
has a deadline (``--deadline``; see ``_harness.py``).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from _harness import Steps, add_deadline_option  # noqa: E402 - after the path

STREAM = "bench"


def serve_broker(journal_dir):
    """--serve-broker: a broker in this (separate) process; prints its endpoint, stops when stdin closes."""
    import gevent
    from gevent.fileobject import FileObjectThread

    from zactors.patterns.zeps.broker import Broker
    broker = Broker(journal_dir, "tcp://127.0.0.1:*", fsync="never")
    print(broker.endpoint, flush=True)
    gevent.spawn(FileObjectThread(sys.stdin).read).join()
    broker.destroy()


def write_journal(directory, records, size):
    from zactors.actors.journal import Journal
    body = b"x" * size
    journal = Journal(directory)
    for i in range(records):
        journal.append(b"k%02d" % (i % 16), body)
        if i & 4095 == 4095:
            journal.write()
    journal.write()
    journal.close()


def _source(source_name, make_reader):
    """A Python data source class named ``source_name`` with the zeps columns; ``make_reader(options)``."""
    from pyspark.sql.datasource import DataSource

    class Source(DataSource):
        @classmethod
        def name(cls):
            return source_name

        def schema(self):
            return "stream STRING, seq BIGINT, timestamp TIMESTAMP, key BINARY, body BINARY"

        def reader(self, schema):
            return make_reader(self.options)

    return Source


def tuple_source():
    """The naive way: a Python data source yielding one tuple per record."""
    import datetime

    from pyspark.sql.datasource import DataSourceReader, InputPartition

    class TupleReader(DataSourceReader):
        def __init__(self, directory):
            self.directory = directory

        def partitions(self):
            from zactors.actors.journal import JournalReader
            with JournalReader(self.directory) as reader:
                return [InputPartition((base, seg)) for base, seg, *_ in reader.segments()]

        def read(self, partition):
            from zactors.actors.journal import JournalReader
            utc = datetime.timezone.utc
            stamp = datetime.datetime.fromtimestamp
            with JournalReader(self.directory) as reader:
                for rec in reader.read_segment(partition.value[1]):
                    yield (STREAM, rec.seq, stamp(rec.timestamp, utc), rec.key, rec.body)

    return _source("zeps_tuples", lambda options: TupleReader(options["path"]))


def ceiling_source():
    """The Python Data Source API's own ceiling: Arrow batches of the same shape, built in memory once
    per partition and yielded as fast as Spark takes them (no file, no parsing), over as many
    partitions as the zeps source plans."""
    from pyspark.sql.datasource import DataSourceReader, InputPartition

    class CeilingReader(DataSourceReader):
        def __init__(self, records, size, partitions):
            self.records, self.size, self.count = records, size, partitions

        def partitions(self):
            share = -(-self.records // self.count)
            return [InputPartition(min(share, self.records - i * share)) for i in range(self.count)]

        def read(self, partition):
            import numpy as np
            import pyarrow as pa
            rows = min(65536, partition.value)
            keys = np.arange(rows) % 16
            batch = pa.RecordBatch.from_arrays([
                pa.array([STREAM] * rows), pa.array(np.arange(rows, dtype=np.int64)),
                pa.array(np.arange(rows, dtype=np.int64)).cast(pa.timestamp("us", tz="UTC")),
                pa.array([b"k%02d" % k for k in keys], pa.binary()), pa.array([b"x" * self.size] * rows, pa.binary()),
            ], names=["stream", "seq", "timestamp", "key", "body"])
            left = partition.value
            while left > 0:
                yield batch if left >= rows else batch.slice(0, left)
                left -= rows

    return _source("arrow_ceiling", lambda o: CeilingReader(int(o["records"]), int(o["size"]), int(o["partitions"])))


def timed(df):
    t = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t


def latency(spark, endpoint, seconds, rate):
    """p50, p90 (s) from publish to the aggregate arriving in a ZEPS stream."""
    import gevent

    from zactors.patterns.zeps.client import Publisher, Subscriber

    pool = gevent.get_hub().threadpool
    tmp = tempfile.mkdtemp(prefix="zactors-spark-lat-")
    lat = []
    sub = Subscriber(endpoint, "latency-out", new=True, wait=True,
                     callback=lambda m: lat.append(time.time() - json.loads(m.body)["sent"]))

    def start():
        from pyspark.sql import functions as F

        def aggregate(batch, batch_id):          # per micro-batch: count and newest send time per key
            (batch.groupBy("key").agg(F.count("*").alias("n"), F.max("sent").alias("sent"))
             .selectExpr("key", "to_json(named_struct('n', n, 'sent', sent)) as body")
             .write.format("zeps").option("broker", endpoint).option("stream", "latency-out").mode("append").save())

        src = (spark.readStream.format("zeps").option("broker", endpoint).option("stream", "latency-in")
               .option("startingOffsets", "latest").option("bodyFormat", "json")
               .option("bodySchema", "sent DOUBLE").load())
        return (src.writeStream.foreachBatch(aggregate).option("checkpointLocation", tmp)
                .trigger(processingTime="1 second").start())

    query = pool.apply(start)
    try:
        with Publisher(endpoint, "latency-in") as pub:
            pub.publish(b"warm", json.dumps({"sent": time.time()}).encode())
            deadline = time.time() + 120
            while not lat and time.time() < deadline:           # the first batch pays for the start-up
                gevent.sleep(0.1)
            del lat[:]
            end = time.time() + seconds
            i = 0
            while time.time() < end:
                pub.publish(b"k%d" % (i % 4), json.dumps({"sent": time.time()}).encode())
                i += 1
                gevent.sleep(1.0 / rate)
            pub.flush()
            gevent.sleep(3)
    finally:
        pool.apply(spark.sparkContext.setLogLevel, ("OFF",))     # stopping interrupts a micro-batch: noise
        pool.apply(query.stop)
        sub.destroy()
        shutil.rmtree(tmp, ignore_errors=True)
    lat.sort()
    if not lat:
        return None, None
    return lat[len(lat) // 2], lat[int(len(lat) * 0.9)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=200.0, help="readings/s in the latency run")
    parser.add_argument("--rounds", type=int, default=3, help="batch reads of each source (the median counts)")
    parser.add_argument("--serve-broker", metavar="DIR", help=argparse.SUPPRESS)
    add_deadline_option(parser, 1800)
    args = parser.parse_args()
    if args.serve_broker:
        return serve_broker(args.serve_broker)
    with Steps(args.deadline).guard("spark", "%d rounds of batch reads of %d records, then %gs of streaming"
                                    % (args.rounds, args.records, args.latency_seconds)):
        measure(args)


def measure(args):
    from zactors.apps.commands.spark import spark_environment
    spark_environment()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    tmp = tempfile.mkdtemp(prefix="zactors-spark-bench-")
    broker = None
    try:
        from zactors.patterns.zeps.names import stream_directory
        journal_root = os.path.join(tmp, "journal")
        directory = os.path.join(journal_root, stream_directory(STREAM.encode()))
        t = time.perf_counter()
        write_journal(directory, args.records, args.size)
        print("journal: %d records of %d B written in %.1fs" % (args.records, args.size, time.perf_counter() - t))
        broker = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve-broker", journal_root],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        endpoint = broker.stdout.readline().decode().strip()

        import pyarrow.parquet as pq
        from pyspark.sql import SparkSession

        from zactors.patterns.zeps.spark import register
        from zactors.patterns.zeps.spark.segments import segment_batches
        from zactors.actors.journal import JournalReader
        import pyarrow as pa

        with JournalReader(directory) as reader:
            batches = [b for base, path, *_ in reader.segments() for b in segment_batches(path, base, 1, 10 ** 12)]
        table = pa.Table.from_batches(batches)
        table = table.add_column(0, "stream", pa.array([STREAM] * table.num_rows))
        parquet = os.path.join(tmp, "bench.parquet")
        pq.write_table(table, parquet)
        del table, batches

        spark = (SparkSession.builder.master(args.master).appName("zactors spark benchmark")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "4").config("spark.sql.session.timeZone", "UTC")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(tuple_source())
        spark.dataSource.register(ceiling_source())
        timed(spark.read.parquet(parquet))                      # warm the JVM and the Python workers
        warm = spark.read.format("zeps").option("path", journal_root).load()
        timed(warm)
        partitions = warm.rdd.getNumPartitions()
        runs = [
            ("parquet (ceiling)", lambda: spark.read.parquet(parquet)),
            ("zeps, journal directory", lambda: spark.read.format("zeps").option("path", journal_root).load()),
            ("zeps, live broker (tcp)", lambda: spark.read.format("zeps").option("broker", endpoint)
             .option("stream", STREAM).load()),
            ("python source, tuples", lambda: spark.read.format("zeps_tuples").option("path", directory).load()),
            ("python source API ceiling", lambda: spark.read.format("arrow_ceiling").option("records", args.records)
             .option("size", args.size).option("partitions", partitions).load()),
        ]
        times = {name: [] for name, _ in runs}
        for _ in range(args.rounds):                            # interleaved, so that load hits each alike
            for name, make in runs:
                times[name].append(timed(make()))
                print("    %-26s %12.0f rows/s" % (name, args.records / times[name][-1]), file=sys.stderr, flush=True)
        results = [(name, args.records / statistics.median(times[name])) for name, _ in runs]
        ceiling = results[0][1]
        print("\nbatch read, %d x %d B, %s, median of %d rounds:" % (args.records, args.size, args.master, args.rounds))
        for name, rate in results:
            print("  %-26s %12.0f rows/s  %5.2fx parquet" % (name, rate, rate / ceiling))
        p50, p90 = latency(spark, endpoint, args.latency_seconds, args.rate)
        if p50 is None:
            print("\nstreaming publish -> aggregate: no aggregate arrived")
        else:
            print("\nstreaming publish -> aggregate (1 s trigger, %g readings/s): p50 %.2f s, p90 %.2f s"
                  % (args.rate, p50, p90))
        spark.stop()
    finally:
        if broker is not None:
            broker.stdin.close()
            broker.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
