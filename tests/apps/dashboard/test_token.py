"""Where a dashboard token comes from (issue 20): a file or the environment, not only argv (readable in /proc)."""
import os
import subprocess

import gevent.subprocess
import pytest

from ..cli_helpers import ENV, ZACTORS, read_until, zactors

pytestmark = pytest.mark.timeout(90)

TOKEN = "file-token-" + "x" * 16


def _up(processes, tmp_path, *token_args, env=ENV):
    proc = processes(ZACTORS + ["up", "--data", str(tmp_path / "d"), "--no-mdp", "--no-zeps", "--no-clone",
                                "--no-harmony", "--web", "127.0.0.1:0", *token_args],
                     stdout=gevent.subprocess.PIPE, stderr=gevent.subprocess.PIPE, text=True, env=env)
    lines = read_until(proc.stdout, "up: Ctrl-C stops")
    url = [line.split()[1] for line in lines if line.startswith("dashboard")][0].split("?")[0]
    return proc, url


def _status(url, *args, env=ENV):
    return subprocess.run(ZACTORS + ["status", "--url", url, *args], capture_output=True, text=True, timeout=60,
                          env=env)


def test_a_token_from_a_file_never_shows_in_the_process_list(processes, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o600)
    proc, url = _up(processes, tmp_path, "--token-file", str(token_file))
    try:
        with open("/proc/%d/cmdline" % proc.pid, "rb") as f:
            assert TOKEN.encode() not in f.read()
        assert _status(url).returncode == 4                                    # 401: the token is required
        done = _status(url, "--token-file", str(token_file))
        assert done.returncode == 0 and "warning" not in done.stderr.lower(), done.stderr
        assert _status(url, env=dict(ENV, ZACTORS_TOKEN=TOKEN)).returncode == 0
        assert _status(url, env=dict(ENV, ZACTORS_TOKEN="w" * 20)).returncode == 4
        done = _status(url, "--token", TOKEN)                                  # still works, and says why not
        assert done.returncode == 0 and "/proc/PID/cmdline" in done.stderr
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_a_token_from_the_environment(processes, tmp_path):
    proc, url = _up(processes, tmp_path, env=dict(ENV, ZACTORS_TOKEN=TOKEN))
    try:
        assert _status(url).returncode == 4
        assert _status(url, env=dict(ENV, ZACTORS_TOKEN=TOKEN)).returncode == 0
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_bad_token_files_are_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    for args, words in ((("--token-file", str(tmp_path / "missing")), "cannot read the token file"),
                        (("--token-file", str(empty)), "is empty"),
                        (("--token-file", str(empty), "--token", "t" * 20), "not allowed with")):
        done = zactors("up", "--data", str(tmp_path / "d"), "--web", "127.0.0.1:0", *args)
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
