"""Names: lookups wait for a restarting actor, give up at the deadline, and refuse a name held twice."""
import time

import gevent
import pytest

from zactors.actors import Actor, ActorTimeout, NoSuchName, command
from zactors.actors.names import Names

pytestmark = pytest.mark.timeout(30)


class Echo(Actor):
    @command(reply=True)
    def echo(self, value):
        return value


@pytest.fixture
def names():
    return Names()


def test_proxy_reaches_the_registered_actor_and_waits_for_the_next(names):
    first, second = Echo(), Echo()
    try:
        names.register("echo", first)
        proxy = names.proxy("echo", wait=5)
        assert proxy.call("ECHO", 1) == 1 and proxy.actor is first
        names.register("echo", None, replace=True)  # restarting: held, nobody running
        assert names.whereis("echo") is None and not proxy.alive
        waiting = gevent.spawn(proxy.call, "ECHO", 2, timeout=5)
        gevent.sleep(0)
        assert not waiting.ready()
        names.register("echo", second, replace=True)  # its holder restarted it
        assert waiting.get(timeout=5) == 2 and proxy.actor is second
    finally:
        first.destroy()
        second.destroy()


def test_a_dead_holder_is_not_returned(names):
    echo = Echo()
    names.register("echo", echo)
    echo.destroy()
    assert names.whereis("echo") is None
    start = time.monotonic()
    with pytest.raises(ActorTimeout, match="not running"):
        names.lookup("echo", timeout=0.1)
    assert time.monotonic() - start >= 0.1


def test_unregister_wakes_waiters_with_no_such_name(names):
    names.register("gone", None)
    waiting = gevent.spawn(names.lookup, "gone", 5)
    gevent.sleep(0)
    names.unregister("gone")
    with pytest.raises(NoSuchName):
        waiting.get(timeout=5)
    with pytest.raises(NoSuchName):
        names.proxy("never").call("ECHO", 1)


def test_a_live_holder_keeps_its_name(names):
    a, b = Echo(), Echo()
    try:
        names.register("x", a)
        with pytest.raises(ValueError, match="held by"):
            names.register("x", b)
        names.unregister("x", b)  # not the holder: no effect
        assert names.whereis("x") is a and "x" in names and len(names) == 1
        a.destroy()
        names.register("x", b)  # a dead holder's name is free
        assert names.whereis("x") is b
    finally:
        a.destroy()
        b.destroy()


def test_a_name_held_for_a_restart_is_not_taken(names):
    echo = Echo()
    try:
        names.register("x", None)
        with pytest.raises(ValueError, match="restarting"):
            names.register("x", echo)
        names.register("x", echo, replace=True)  # the holder's own restart
        assert names.whereis("x") is echo
    finally:
        echo.destroy()
