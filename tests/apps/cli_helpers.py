"""Driving the real ``zactors`` command in a subprocess, as a person does."""
import os
import subprocess
import sys

import gevent
import gevent.subprocess

ZACTORS = [sys.executable, "-m", "zactors.apps.cli"]
ENV = dict(os.environ, PYTHONUNBUFFERED="1")


def run_main(capsys, *argv):
    """``zactors ARGV`` in this process: (status, stdout, stderr); stderr holds no traceback."""
    from zactors.apps.cli import main
    try:
        status = main(list(argv))
    except SystemExit as exit:
        status = exit.code
    out, err = capsys.readouterr()
    assert_clean(err)
    return status, out, err


def zactors(*args, timeout=60, input=None):
    """Run ``zactors ARGS`` to its end: a CompletedProcess (text)."""
    return subprocess.run(ZACTORS + list(args), capture_output=True, text=True, timeout=timeout, env=ENV,
                          input=input)


def start(processes, *args, stdin=None):
    """``zactors ARGS`` as a running process (text pipes), killed after the test if still running."""
    return processes(ZACTORS + list(args), stdout=gevent.subprocess.PIPE, stderr=gevent.subprocess.PIPE,
                     stdin=stdin, text=True, env=ENV)


def read_until(stream, text, timeout=20):
    """Lines read from ``stream`` up to the first one containing ``text``; fails at the deadline or EOF."""
    lines = []
    with gevent.Timeout(timeout, AssertionError("no %r within %ss; got %r" % (text, timeout, lines))):
        while True:
            line = stream.readline()
            if not line:
                raise AssertionError("stream ended before %r; got %r" % (text, lines))
            lines.append(line)
            if text in line:
                return lines


def assert_clean(text):
    """No traceback, no gevent noise: what a person should see on stop."""
    for noise in ("Traceback", "KeyboardInterrupt", "Interrupted(", "Broken pipe"):
        assert noise not in text, text
