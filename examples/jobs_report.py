"""A small app built from the README alone: Majordomo jobs, a ZEPS results stream, a Clone status map, and
a Spark batch report over the results.

    python examples/jobs_report.py            # the whole app (needs the spark extra for the report)
    python examples/jobs_report.py --no-spark # without the Spark report

A worker squares numbers and raises on a negative one: the client gets ``ServiceError`` at once, and the
job is recorded as failed.  Every result goes to the ZEPS stream ``results`` (JSON bodies), every job's
state to the Clone map under ``/jobs/``; all servers take free ports on 127.0.0.1.  Last, Spark reads the
stream's journal and counts the jobs that worked and failed.  tests/test_examples.py runs it.
"""
import json
import shutil
import sys
import tempfile

from zactors.patterns.clone import Clone, CloneServer
from zactors.patterns.majordomo import Client, MajordomoBroker, ServiceError, Worker
from zactors.patterns.zeps import Publisher, ZepsBroker

JOBS = [3, -1, 4]


class Square(Worker):
    service = b"square"

    def handle(self, request):
        n = int(request[0])
        if n < 0:
            raise ValueError("cannot take a negative job: %d" % n)
        return [b"%d" % (n * n)]


def run_jobs(data):
    """Run JOBS through Majordomo; publish each result to ZEPS and its state to Clone."""
    started = []
    try:
        mdp = MajordomoBroker("tcp://127.0.0.1:*")
        started.append(mdp)
        started.append(Square(mdp.endpoint))
        client = Client(mdp.endpoint)
        started.append(client)
        zeps = ZepsBroker(data, "tcp://127.0.0.1:*")
        started.append(zeps)
        results = Publisher(zeps.endpoint, "results")
        started.append(results)
        clone_server = CloneServer(0)                # three free ports; clients need only its endpoint
        started.append(clone_server)
        status = Clone(clone_server.endpoint)
        started.append(status)
        if not status.wait_synced(10):
            raise SystemExit("the Clone map did not sync")
        for job in JOBS:
            key = "/jobs/%d" % job
            try:
                reply = client.request(b"square", b"%d" % job)[-1]     # the FINAL reply's frames
                results.publish(key, json.dumps({"job": job, "result": int(reply[0])}))
                status.set(key, "done", wait=5)
            except ServiceError as err:
                print("job %d failed: %s: %s" % (job, err.kind, err.message))
                results.publish(key, json.dumps({"job": job, "error": err.message}))
                status.set(key, "failed", wait=5)
        results.flush()                              # every result is in the journal
        for key, value in sorted(status.items()):
            print("status %s %s" % (key.decode(), value.decode()))
    finally:
        for actor in reversed(started):
            (actor.close if hasattr(actor, "close") else actor.destroy)()


def report(data):
    """Count the jobs that worked and failed, with Spark, from the results stream's journal."""
    from pyspark.sql import SparkSession

    from zactors.patterns.zeps.spark import explain, prepare, register
    prepare()                                        # Java, and this Python for Spark's workers
    spark = (SparkSession.builder.master("local[2]").appName("jobs-report")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        df = (spark.read.format("zeps").option("path", data).option("stream", "results")
              .option("bodyFormat", "json").option("bodySchema", "job LONG, result LONG, error STRING").load())
        for row in df.groupBy(df.error.isNull().alias("ok")).count().orderBy("ok").collect():
            print("report %s %d" % ("worked" if row.ok else "failed", row["count"]))
    except Exception as exc:
        raise SystemExit(explain(exc) or exc)
    finally:
        spark.stop()


def main(argv):
    data = tempfile.mkdtemp(prefix="jobs-report-")
    try:
        run_jobs(data)
        if "--no-spark" not in argv:
            report(data)
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:                        # Ctrl-C: a clean end, no traceback
        sys.exit(130)
