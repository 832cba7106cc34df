"""Shared test helpers: deadlines, never sleeps as synchronisation; a hub-blocking monitor."""
import logging
import os
import pathlib
import sys

import gevent
import gevent.subprocess
import pytest
from gevent import events as gevent_events
from gevent.hub import _get_hub as _existing_hub

#: seconds zactors code in an actor (or any greenlet but the test's own) may
#: hold the gevent hub without a greenlet switch before the test fails (real
#: code never comes near: a reactor round is ~1 ms)
MAX_BLOCKING_TIME = 0.5

# Before the hub exists: gevent's monitor thread watches it for greenlet switches.
gevent.config.monitor_thread = True
gevent.config.max_blocking_time = MAX_BLOCKING_TIME
gevent.config.print_blocking_reports = False  # the test that blocked reports it

from zactors.actors.sockets import context

context()  # before any test makes a socket: raises libzmq's 1023-socket default


def wait_for(predicate, timeout=5.0, what="condition"):
    """Wait until ``predicate()`` is true, yielding to other greenlets; fail at the deadline."""
    with gevent.Timeout(timeout, False):
        while not predicate():
            gevent.sleep(0.002)
        return
    pytest.fail("timed out after %ss waiting for %s" % (timeout, what))


def open_under(directory):
    """This process's descriptors on files under ``directory`` (from /proc/self/fd)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(os.path.join("/proc/self/fd", fd))
        except OSError:
            continue
        if target.startswith(str(directory) + os.sep):
            found.append(target)
    return found


ROOT = pathlib.Path(__file__).resolve().parent.parent
_TESTS = str(ROOT / "tests") + os.sep
_PROJECT = str(ROOT) + os.sep
_INSTALLED = os.sep + "zactors" + os.sep

#: where zactors code blocked the hub during the current test: (frame, gevent's report)
_hub_blocks = []


def _blocked_at(hub):
    """The innermost zactors frame the hub's thread is in now, None if that is test code (or none)."""
    frame = sys._current_frames().get(getattr(hub, "thread_ident", None))
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(_TESTS):
            return None  # the test's own work (a busy loop, a million timers): its choice
        if path.startswith(_PROJECT) or _INSTALLED in path:
            return "%s:%d in %s" % (path, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None


def _on_gevent_event(event):
    """In gevent's monitor thread: record zactors code that held the hub past MAX_BLOCKING_TIME.

    Only in greenlets other than the main one (actors, spawned greenlets):
    the main greenlet runs the test itself, whose long synchronous work
    (a million timers, a journal scan) is its own business.
    """
    if (isinstance(event, gevent_events.EventLoopBlocked) and event.hub is not None
            and getattr(event.greenlet, "parent", None) is not None):
        where = _blocked_at(event.hub)
        if where is not None:
            _hub_blocks.append((where, "\n".join(event.info)))


gevent_events.subscribers.append(_on_gevent_event)
# Hub.run() starts the monitor.  Only a hub that runs already needs it started
# here: one made now would keep a stale loop clock until the first test (and
# a monitor started before the hub runs sees it idle and stops for good).
if _existing_hub():
    _existing_hub().start_periodic_monitoring_thread()


@pytest.fixture(autouse=True)
def _hub_monitor():
    """Fail the test during which zactors code blocked the hub for over MAX_BLOCKING_TIME."""
    _hub_blocks.clear()
    yield
    blocks = list(_hub_blocks)
    _hub_blocks.clear()
    if blocks:
        pytest.fail("zactors code blocked the gevent hub for over %ss (%d report(s)), first at %s\n\n%s"
                    % (MAX_BLOCKING_TIME, len(blocks), blocks[0][0], blocks[0][1]), pytrace=False)


@pytest.fixture
def hub_blocks():
    """The hub blockings recorded so far in this test; a test that blocks on purpose clears it."""
    return _hub_blocks


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
