"""The zactors command line, run as a person runs it."""
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)


def zactors(*args, timeout=90):
    return subprocess.run([sys.executable, "-m", "zactors.apps.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_help_lists_commands():
    result = zactors("--help")
    assert result.returncode == 0
    assert "demo" in result.stdout and "web" in result.stdout


def test_version():
    from zactors.actors.speedups import SPEEDUPS
    result = zactors("--version")
    assert result.returncode == 0 and result.stdout.startswith("zactors ")
    assert ("C speedups on" if SPEEDUPS else "C speedups off") in result.stdout


def test_no_command_prints_help_and_fails():
    result = zactors()
    assert result.returncode == 2 and "usage: zactors" in result.stdout


def test_unknown_command_is_a_clear_error():
    result = zactors("frobnicate")
    assert result.returncode == 2 and "invalid choice" in result.stderr


@pytest.mark.slow
def test_demo_runs_every_part():
    result = zactors("demo")
    assert result.returncode == 0, result.stderr
    assert "Demo finished" in result.stdout
    assert "each got its own reply: True" in result.stdout
