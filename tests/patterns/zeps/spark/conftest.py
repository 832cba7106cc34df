"""Spark test helpers: one real SparkSession (local[2]) per test session, a broker process,
journals written with the real Journal."""
import os
import subprocess
import sys

import pytest

from zactors.actors.journal import Journal

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def spark_env():
    """Prepare this process for Spark (Java, loopback, this interpreter for workers) and return its
    environment; skip the test, with the reason, when pyspark or a Java runtime is missing."""
    pytest.importorskip("pyspark", reason="the Spark tests need the spark extra: pip install -e '.[test,spark]'")
    from zactors.patterns.zeps.spark.runtime import JavaNotFound, prepare

    try:
        prepare()
    except JavaNotFound as exc:
        pytest.skip(str(exc))
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    return dict(os.environ)


@pytest.fixture(scope="session")
def spark():
    spark_env()
    from pyspark.sql import SparkSession

    from zactors.patterns.zeps.spark import register

    session = (SparkSession.builder.master("local[2]").appName("zactors-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.streaming.stopTimeout", "10s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


class BrokerProcess:
    """A broker subprocess on a journal directory (at ``endpoint``, default a free port); ``endpoint``
    once it serves."""

    def __init__(self, journal_dir, endpoint=None):
        self.journal_dir = journal_dir
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.patterns.zeps.spark._broker", journal_dir]
                                     + ([endpoint] if endpoint else []),
                                     cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.endpoint = self.proc.stdout.readline().decode().strip()
        if not self.endpoint.startswith("tcp://"):
            self.stop()
            raise RuntimeError("the broker process did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def broker_process(tmp_path):
    started = []

    def start(journal_dir=None, endpoint=None):
        b = BrokerProcess(str(journal_dir or tmp_path / "broker"), endpoint)
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


def write_journal(root, stream, records, segment_bytes=1 << 20, timestamps=None):
    """Write ``records`` [(key, body)] to stream ``stream`` under ``root`` with the real Journal."""
    from zactors.patterns.zeps.names import stream_directory

    directory = os.path.join(str(root), stream_directory(stream.encode()))
    os.makedirs(directory, exist_ok=True)
    journal = Journal(directory, segment_bytes=segment_bytes)
    try:
        for i, (key, body) in enumerate(records):
            journal.append(key, body, None if timestamps is None else timestamps[i])
            if i % 512 == 511:
                journal.write()
        journal.write()
    finally:
        journal.close()
    return directory


def publish(endpoint, stream, records):
    """Publish [(key, body)] and wait until the broker has written them all."""
    from zactors.patterns.zeps.client import Publisher
    with Publisher(endpoint, stream) as pub:
        for key, body in records:
            pub.publish(key, body)
        pub.flush()
