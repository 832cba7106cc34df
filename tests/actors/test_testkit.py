"""The test kit: Probe's expectations and their failures, crash, and Synchronous."""
import time

import pytest

from zactors.actors import Actor, ActorTimeout, CommandError, Event, command
from zactors.actors.testkit import Probe, Synchronous, crash

pytestmark = pytest.mark.timeout(30)


class Ticker(Actor):
    """ADD n -> total (emits ADDED total); FAIL -> ValueError; LATER s -> total after s (deferred);
    EVERY s: emits TICK every s seconds; QUIT: exits."""

    def __init__(self, total=0):
        self.total = total
        self.ticks = 0

    @command(reply=True)
    def add(self, n):
        self.total += n
        self.emit("ADDED", self.total)
        return self.total

    @command
    def fail(self):
        raise ValueError("no")

    @command(deferred=True)
    def later(self, reply, seconds):
        self.call_later(seconds, lambda: reply(self.total))

    @command
    def every(self, seconds):
        self.call_every(seconds, self._tick)

    def _tick(self):
        self.ticks += 1
        self.emit("TICK", self.ticks)

    @command
    def quit(self):
        self.stop()


@pytest.fixture
def ticker():
    actor = Ticker()
    yield actor
    actor.destroy()


def test_probe_expects_events_and_replies(ticker):
    with Probe(ticker) as probe:
        probe.expect_reply(2, "ADD", 2)
        assert probe.expect("ADDED", 2) == Event("ADDED", (2,))
        probe.expect_error("ValueError", "FAIL")
        probe.expect_no_event(0.05)
        ticker.send("ADD", 1)
        ticker.send("ADD", 1)
        probe.fish("ADDED", 4)  # skips ADDED 3
        ticker.send("QUIT")
        probe.expect_end(died=False)
        assert [e.name for e in probe.seen] == ["ADDED", "ADDED", "ADDED", "$EXIT"]


def test_probe_failures_say_what_came(ticker):
    with Probe(ticker, timeout=0.2) as probe:
        ticker.call("ADD", 1)
        with pytest.raises(AssertionError, match=r"expected ADDED\(2,\), got ADDED\(1,\)"):
            probe.expect("ADDED", 2)
        start = time.monotonic()
        with pytest.raises(AssertionError, match="got nothing within 0.2s"):
            probe.expect("ADDED")
        assert time.monotonic() - start >= 0.2
        ticker.call("ADD", 1)
        with pytest.raises(AssertionError, match=r"expected no event for 0.5s, got ADDED\(2,\)"):
            probe.expect_no_event(0.5)
        with pytest.raises(AssertionError, match="replied 2, expected 3"):
            probe.expect_reply(3, "ADD", 0)
        with pytest.raises(AssertionError, match="failed with ValueError: no, expected KeyError"):
            probe.expect_error("KeyError", "FAIL")
        with pytest.raises(AssertionError, match=r"skipped ADDED\(2,\)"):
            probe.fish("TICK")
        with pytest.raises(ActorTimeout):
            probe.call("LATER", 5)


def test_crash_kills_an_actor_as_a_handler_bug_would(ticker):
    with Probe(ticker) as probe:
        assert crash(ticker, "on purpose") is ticker
        event = probe.expect_end(died=True)
    assert event.args == ("Crash: on purpose",)
    assert not ticker.alive
    with pytest.raises(AssertionError, match=r"expected \$EXIT, got \$DIED"):
        other = Ticker()
        with Probe(other) as probe:
            crash(other)
            try:
                probe.expect_end(died=False)
            finally:
                other.destroy()


def test_synchronous_runs_commands_in_the_caller():
    sync = Synchronous(Ticker, 5)
    assert sync.call("ADD", 2) == 7
    assert sync.actor.total == 7 and sync.events == [Event("ADDED", (7,))]
    with pytest.raises(CommandError, match="ValueError: no"):
        sync.call("FAIL")
    with pytest.raises(CommandError, match="UnknownCommand"):
        sync.call("NOPE")
    sync.send("FAIL")  # a send drops the error, as on the pipe
    assert sync.actor.stats["failed"] == 2
    with pytest.raises(TypeError):
        sync.call("ADD", object())  # what the pipe could not carry fails here too


def test_synchronous_timers_run_on_a_manual_clock():
    sync = Synchronous(Ticker)
    with pytest.raises(AssertionError, match="has not replied"):
        sync.call("LATER", 1.0)
    sync.send("EVERY", 0.25)
    assert sync.advance(0.2) == 0
    assert sync.advance(0.3) == 2  # the LATER reply's timer (t=1.0) is not due; TICK at 0.25 and 0.5
    assert sync.events == [Event("TICK", (1,)), Event("TICK", (2,))]
    assert sync.advance(0.5) == 3  # TICKs at 0.75 and 1.0, the LATER timer at 1.0
    assert sync.actor.ticks == 4 and sync.now == 1.0
    sync.send("QUIT")
    assert sync.stopped


def test_synchronous_actor_has_no_sockets():
    class Server(Actor):
        def setup(self):
            self.socket(1)

    with pytest.raises(TypeError, match="without sockets"):
        Synchronous(Server, setup=True)
