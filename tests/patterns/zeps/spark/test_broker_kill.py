"""Spark writers while the broker is SIGKILLed and restarted mid-write (issue #19): the batch writer
(at-least-once) loses no row, the streaming writer (exactly-once) ends with every row exactly once.

The writers publish idempotently (PUBLISH-ID): what the broker had not confirmed when it died is sent
again once it is back, and the broker drops what its journal kept already."""
import collections
import os
import subprocess
import sys

import pytest

from tests.conftest import wait_for

from .conftest import ROOT, publish, spark_env
from .test_write import _last, _stream

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def _kill_and_restart(broker_process, broker):
    """SIGKILL ``broker`` and start a new one on its journal and endpoint."""
    broker.proc.kill()
    broker.proc.wait()
    return broker_process(broker.journal_dir, broker.endpoint)


def test_batch_write_loses_no_row_when_the_broker_is_killed(broker_process, processes, tmp_path):
    spark_env()                                            # skips without pyspark or Java
    broker = broker_process()
    n = 200000
    errors = tmp_path / "stderr"
    with open(errors, "wb") as err:
        proc = processes([sys.executable, "-m", "tests.patterns.zeps.spark._write", broker.endpoint, "w", str(n)],
                         cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=err)
    wait_for(lambda: _last(broker.endpoint, "w") >= n // 10 or proc.poll() is not None, 300, "rows to arrive")
    assert proc.poll() is None, "the write ended before the kill (%s)" % proc.returncode
    broker = _kill_and_restart(broker_process, broker)  # tasks are publishing: many rows unconfirmed
    proc.wait(timeout=300)
    assert proc.returncode == 0, errors.read_text(errors="replace")[-2000:]
    counts = collections.Counter(b for _s, _k, b in _stream(broker.endpoint, "w"))
    missing = [i for i in range(n) if not counts[b"r%07d" % i]]
    assert not missing, "%d rows lost, first %s" % (len(missing), missing[:5])
    assert len(counts) == n                                # (at-least-once; in fact each once)
    assert max(counts.values()) == 1


def test_stream_write_exactly_once_when_the_broker_is_killed(broker_process, tmp_path, processes):
    spark_env()
    broker = broker_process()
    total = 600
    publish(broker.endpoint, "in", [(b"k%d" % (i % 3), b"m%04d" % i) for i in range(total)])
    checkpoint = str(tmp_path / "ck")
    argv = [sys.executable, "-m", "tests.patterns.zeps.spark._query", broker.endpoint, checkpoint]
    proc = processes(argv + ["slow"], cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL)
    wait_for(lambda: _last(broker.endpoint, "out") >= 120 or proc.poll() is not None, 300, "output")
    assert proc.poll() is None, "the query process ended early (%s)" % proc.returncode
    broker = _kill_and_restart(broker_process, broker)  # mid-stream: a micro-batch may be half published
    # The query goes on (or fails on a broker it could not reach, as a sink error fails a Spark query,
    # and is run again: it resumes from its checkpoint and the commit log).
    wait_for(lambda: _last(broker.endpoint, "out") >= total or proc.poll() is not None, 300, "the rest")
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
        proc.wait()
    again = processes(argv + ["now"], cwd=ROOT, start_new_session=True)
    assert again.wait() == 0
    got = [b for _s, _k, b in _stream(broker.endpoint, "out")]
    assert sorted(got) == sorted(b"M%04d" % i for i in range(total))      # each once: no loss, no duplicate
