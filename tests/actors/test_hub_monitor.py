"""The suite's hub-blocking monitor (tests/conftest.py) catches zactors code that holds the hub."""
import time

import pytest

from zactors.actors import Actor, command
from tests.conftest import MAX_BLOCKING_TIME, wait_for

pytestmark = pytest.mark.timeout(30)


class Sleeper(Actor):
    @command(reply=True)
    def ping(self):
        return "pong"


def test_library_code_that_blocks_the_hub_is_recorded(hub_blocks):
    import gevent

    actor = Sleeper()
    try:
        # time.sleep (not gevent's) run by the reactor's posted-call path: library code holds the hub
        actor.post(time.sleep, MAX_BLOCKING_TIME * 3)
        gevent.sleep(0)
        wait_for(lambda: hub_blocks, 10, "the monitor to report")
        assert any("actors/reactor.py" in where for where, _ in hub_blocks), hub_blocks
        assert actor.call("PING", timeout=10) == "pong"
    finally:
        actor.destroy()
        hub_blocks.clear()  # blocked on purpose: this test passes


def test_the_tests_own_busy_work_is_not_counted(hub_blocks):
    until = time.perf_counter() + MAX_BLOCKING_TIME * 3
    while time.perf_counter() < until:  # the test's own code, no greenlet switch
        pass
    import gevent
    gevent.sleep(MAX_BLOCKING_TIME)  # give the monitor a turn to look
    assert hub_blocks == []
