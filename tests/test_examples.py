"""The examples run as a user runs them (issue 21: the small app a newcomer builds from the README)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(ROOT, "examples", "jobs_report.py")
JOBS = ["job -1 failed: ValueError: cannot take a negative job: -1",
        "status /jobs/-1 failed", "status /jobs/3 done", "status /jobs/4 done"]


def _run(*args, env=None, timeout=60):
    result = subprocess.run([sys.executable, APP] + list(args), capture_output=True, text=True, timeout=timeout,
                            env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout.splitlines()


@pytest.mark.timeout(90)
def test_jobs_results_and_status_map():
    assert _run("--no-spark") == JOBS


@pytest.mark.timeout(300)
def test_with_the_spark_report():
    from tests.patterns.zeps.spark.conftest import spark_env
    env = spark_env()          # skips, with the reason, without pyspark or Java
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    assert _run(env=env, timeout=280) == JOBS + ["report failed 1", "report worked 2"]
