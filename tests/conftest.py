"""Shared test helpers: deadlines, never sleeps as synchronisation."""
import logging
import pathlib

import gevent
import gevent.subprocess
import pytest

from zactors.actors.sockets import context

context()  # before any test makes a socket: raises libzmq's 1023-socket default


def wait_for(predicate, timeout=5.0, what="condition"):
    """Wait until ``predicate()`` is true, yielding to other greenlets; fail at the deadline."""
    with gevent.Timeout(timeout, False):
        while not predicate():
            gevent.sleep(0.002)
        return
    pytest.fail("timed out after %ss waiting for %s" % (timeout, what))


ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def processes():
    """``start(argv, **popen_options)``: a process run from the project root.

    gevent's subprocess, so waiting on it parks only the test's greenlet.
    Every process started is killed if still running, and reaped, after the test.
    """
    started = []

    def start(argv, **options):
        options.setdefault("cwd", str(ROOT))
        proc = gevent.subprocess.Popen(argv, **options)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


@pytest.fixture
def ctx():
    return context()


@pytest.fixture(autouse=True)
def _quiet_logging(caplog):
    caplog.set_level(logging.INFO)
    yield
