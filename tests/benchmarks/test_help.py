"""Smoke check of the benchmarks (they are not run here): each one's --help works and offers a deadline."""
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

BENCHMARKS = sorted(p for p in (pathlib.Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py")
                    if not p.name.startswith("_"))


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_help_works_and_every_step_has_a_deadline(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60,
                          cwd=script.parent.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ") and "--deadline SECONDS" in done.stdout, done.stdout


def test_the_bench_extra_names_what_the_benchmarks_import():
    import configparser
    config = configparser.ConfigParser()
    config.read(pathlib.Path(__file__).resolve().parents[2] / "setup.cfg")
    bench = config["options.extras_require"]["bench"]
    for needed in ("redis", "hiredis", "majortomo", "colmena-zeromq-pyre", "zactors[spark]", "psutil"):
        assert needed in bench, needed
