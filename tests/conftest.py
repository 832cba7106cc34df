"""Shared test helpers: deadlines, never sleeps as synchronisation."""
import logging

import gevent
import pytest

from actors.loop import context

context()  # before any test makes a socket: raises libzmq's 1023-socket default


def wait_for(predicate, timeout=5.0, what="condition"):
    """Wait until ``predicate()`` is true, yielding to other greenlets; fail at the deadline."""
    with gevent.Timeout(timeout, False):
        while not predicate():
            gevent.sleep(0.002)
        return
    pytest.fail("timed out after %ss waiting for %s" % (timeout, what))


@pytest.fixture
def ctx():
    return context()


@pytest.fixture(autouse=True)
def _quiet_logging(caplog):
    caplog.set_level(logging.INFO)
    yield
