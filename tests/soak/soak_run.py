"""Running a soak from a test: ``python -m soak.MODULE`` as a child process, its figures parsed."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_soak(module, *args, timeout):
    """Run ``python -m soak.MODULE ARGS`` from the repository root; its figures (the ``figures:`` line) and output."""
    done = subprocess.run([sys.executable, "-m", "soak." + module, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("figures: ")]
    assert lines, "soak.%s printed no figures (status %d):\n%s\n%s" % (module, done.returncode, done.stdout,
                                                                       done.stderr[-4000:])
    return json.loads(lines[-1][len("figures: "):]), done
