"""``zactors spark pipeline`` on a real standalone Spark cluster (master and worker started from the
pip-installed PySpark's own launcher on loopback), reading and writing a live broker over tcp."""
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.conftest import wait_for

from .conftest import ROOT, spark_env

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]


def _spark_class():
    import pyspark
    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def _log_line(path, pattern, timeout, proc):
    """The first match of ``pattern`` in a growing log file (fails at the deadline or if proc dies)."""
    found = []

    def seen():
        assert proc.poll() is None, "%s ended: %s" % (proc.args[1], open(path).read()[-2000:])
        with open(path) as f:
            match = re.search(pattern, f.read())
        if match:
            found.append(match)
        return bool(found)

    wait_for(seen, timeout, pattern)
    return found[0]


def test_usage_errors():
    cli = [sys.executable, "-m", "zactors.apps.cli", "spark", "pipeline"]
    run = subprocess.run(cli + ["--master", "nowhere"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].startswith(
        "zactors spark pipeline: error: argument --master: 'nowhere': give local[*], local[N], spark://HOST:PORT")
    assert "Traceback" not in run.stderr


def test_pipeline_on_a_standalone_cluster(tmp_path, processes):
    env = spark_env()
    env["SPARK_NO_DAEMONIZE"] = "1"
    logs = tmp_path / "logs"
    logs.mkdir()
    master_log = open(logs / "master.log", "w")
    master = processes([_spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", "0", "--webui-port", "0"], env=env, stdout=master_log, stderr=subprocess.STDOUT,
                       start_new_session=True)
    url = _log_line(logs / "master.log", r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", 120, master)[1]
    worker_log = open(logs / "worker.log", "w")
    worker = processes([_spark_class(), "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                        "--port", "0", "--webui-port", "0", "--cores", "2", "--memory", "2g",
                        "--work-dir", str(tmp_path / "work")],
                       env=env, stdout=worker_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _log_line(logs / "worker.log", r"Successfully registered with master", 120, worker)
        workdir = tmp_path / "pipeline"
        run = processes([sys.executable, "-m", "zactors.apps.cli", "spark", "pipeline", "--master", url,
                         "--workdir", str(workdir), "--duration", "0", "--count", "2", "--window", "4", "--sensors", "2", "--rate", "20"],
                        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        out, err = run.communicate(timeout=300)
        out, err = out.decode(), err.decode()
        assert run.returncode == 0, err[-3000:]
        aggregates = re.findall(r"^(sensor-0[01])  \d\d:\d\d:\d\d\.\.\d\d:\d\d:\d\d  count=\s*(\d+)", out, re.M)
        assert aggregates, out + err[-3000:]
        history = re.findall(r"^(sensor-0[01])\s+\d\d:\d\d\s+(\d+)\s+[\d.]+$", out, re.M)
        assert [s for s, _ in history] == ["sensor-00", "sensor-01"]
        assert all(int(n) > 0 for _, n in history)
        assert any(name.endswith(".parquet") for _, _, files in os.walk(workdir / "aggregates") for name in files)
        with open(logs / "worker.log") as f:
            assert "Asked to launch executor" in f.read()          # the job ran on the cluster's worker
    finally:
        for proc in (worker, master):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except Exception:
                    os.killpg(proc.pid, signal.SIGKILL)


class _Ran:
    published, printed, outliers = 1200, 7, 1


def test_the_last_line_never_points_at_a_removed_directory(tmp_path):
    """Issue 21: without --workdir the output directory is removed at the end, so it is not named."""
    from zactors.apps.commands.spark import done_line
    kept = done_line(_Ran, str(tmp_path))
    assert kept == "done: 1200 readings published, 7 aggregates printed (1 outliers); Parquet in %s" % (
        tmp_path / "aggregates")
    temporary = done_line(_Ran, None)
    assert "zactors-spark-" not in temporary and "Parquet in" not in temporary
    assert temporary.endswith("the temporary journal and Parquet output are removed (--workdir DIR keeps them)")
