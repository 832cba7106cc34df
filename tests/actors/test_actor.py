"""Actor lifecycle, commands, events and failure reporting, through the real pipe."""
import os

import gevent
import pytest
import zmq

from zactors.actors import (Actor, ActorDied, ActorError, ActorExited, ActorTimeout, CommandError, Event,
                    command)
from zactors.actors.sockets import Socket, context

pytestmark = pytest.mark.timeout(30)


class Counter(Actor):
    """ADD n -> total; RESET; SLOW s -> 'done' later; STREAM n emits TICK events."""

    def __init__(self, start=0):
        self.total = start

    @command(reply=True)
    def add(self, n):
        self.total += n
        return self.total

    @command
    def reset(self):
        self.total = 0

    @command(deferred=True)
    def slow(self, reply, seconds):
        self.call_later(seconds, reply, "done after %s" % seconds)

    @command
    def stream(self, n):
        for i in range(n):
            self.emit("TICK", i)

    @command
    def fail(self):
        raise ValueError("no such thing")

    @command
    def crash_later(self):
        self.call_later(0, lambda: 1 / 0)


@pytest.fixture
def counter():
    actor = Counter(5)
    yield actor
    actor.destroy()


def test_creation_is_synchronous_and_commands_reply(counter):
    assert counter.alive
    assert counter.call("ADD", 2) == 7
    assert counter.call("ADD", 3) == 10
    counter.send("RESET")
    assert counter.call("ADD", 1) == 1


def test_setup_exception_is_raised_in_parent():
    class Broken(Actor):
        def setup(self):
            raise KeyError("missing config")

    with pytest.raises(KeyError, match="missing config"):
        Broken()


def test_setup_can_make_sockets_and_readers():
    class Sink(Actor):
        def __init__(self, endpoint):
            self.endpoint = endpoint

        def setup(self):
            self.pull = self.socket(zmq.PULL)
            self.pull.bind(self.endpoint)
            self.add_reader(self.pull, lambda frames: self.emit("GOT", *frames))

    sink = Sink("inproc://actor-sink")
    push = sink_push = zmq.Context.instance().socket(zmq.PUSH, socket_class=Socket)
    push.linger = 0
    push.connect("inproc://actor-sink")
    push.send_multipart([b"a", b"b"])
    assert sink.recv_event(timeout=5) == Event("GOT", (b"a", b"b"))
    sink.destroy()
    sink_push.close()


def test_events_arrive_in_order(counter):
    counter.send("STREAM", 500)
    got = [counter.recv_event(timeout=5) for _ in range(500)]
    assert got == [Event("TICK", (i,)) for i in range(500)]
    assert counter.recv_event(timeout=0.01) is None


def test_deferred_replies_do_not_block_other_callers(counter):
    slow = gevent.spawn(counter.call, "SLOW", 0.2)
    gevent.sleep(0)
    assert counter.call("ADD", 1, timeout=5) == 6  # answered while SLOW waits
    assert not slow.ready()
    assert slow.get(timeout=5) == "done after 0.2"


def test_many_greenlets_call_concurrently(counter):
    calls = [gevent.spawn(counter.call, "ADD", 1, timeout=10) for _ in range(2000)]
    gevent.joinall(calls, timeout=20, raise_error=True)
    results = sorted(g.value for g in calls)
    assert results == list(range(6, 2006)), "each call got its own reply"


def test_handler_error_goes_to_caller_and_actor_survives(counter):
    with pytest.raises(CommandError) as info:
        counter.call("FAIL")
    assert info.value.kind == "ValueError"
    assert "no such thing" in str(info.value)
    assert counter.call("ADD", 0) == 5


def test_unknown_and_malformed_commands_are_rejected_and_counted(counter, caplog):
    with pytest.raises(CommandError, match="UnknownCommand"):
        counter.call("NOPE", 1)
    counter.send("ALSO_NOPE")
    counter._pipe.commands.put(b"\xc1 not msgpack")          # malformed frame
    counter._pipe.commands.put(b"\x92\xa3ADD\xa1x")           # wrong shape: a str request id
    assert counter.call("ADD", 0) == 5
    assert counter.call("$STATS")["rejected"] == 4
    assert "unknown command" in caplog.text


def test_call_timeout(counter):
    with pytest.raises(ActorTimeout):
        counter.call("SLOW", 1, timeout=0.05)
    assert counter.call("ADD", 0) == 5


def test_unexpected_death_is_reported_as_event_and_on_next_call(counter):
    counter.send("CRASH_LATER")
    event = counter.recv_event(timeout=5)
    assert event.name == "$DIED"
    assert "ZeroDivisionError" in event.args[0]
    with pytest.raises(ActorDied):
        counter.call("ADD", 1)
    assert not counter.alive


def test_a_death_is_logged_with_its_traceback_which_is_not_formatted_when_nobody_logs_it(counter, caplog,
                                                                                         monkeypatch):
    """Formatting a traceback costs ~0.4 ms, a third of a supervised restart: only for a log that shows it."""
    import logging
    import traceback
    formatted = []
    real = traceback.format_exception
    monkeypatch.setattr(traceback, "format_exception", lambda *a, **k: formatted.append(1) or real(*a, **k))
    with caplog.at_level(logging.CRITICAL, logger="zactors"):
        counter.send("CRASH_LATER")
        assert counter.recv_event(timeout=5).name == "$DIED"
    assert formatted == [] and "died" not in caplog.text
    again = Counter(1)
    with caplog.at_level(logging.ERROR, logger="zactors"):
        again.send("CRASH_LATER")
        assert again.recv_event(timeout=5).name == "$DIED"
    again.destroy()
    assert formatted == [1] and "Counter died: Traceback" in caplog.text and "ZeroDivisionError" in caplog.text


def test_pending_calls_fail_when_actor_dies(counter):
    slow = gevent.spawn(counter.call, "SLOW", 10)
    gevent.sleep(0)
    counter.send("CRASH_LATER")
    with pytest.raises(ActorDied):
        slow.get(timeout=5)


def test_destroy_closes_sockets_and_is_idempotent():
    class Owner(Actor):
        def setup(self):
            self.sock = self.socket(zmq.PULL)
            self.sock.bind("tcp://127.0.0.1:*")

        def teardown(self):
            self.emit("BYE")

    owner = Owner()
    sock = owner.sock
    owner.destroy()
    assert sock.closed
    assert not owner.alive
    owner.destroy()
    with pytest.raises(ActorExited):
        owner.call("ANY")
    assert isinstance(ActorExited("x"), ActorError)


def test_actor_can_stop_itself():
    class Quitter(Actor):
        @command
        def quit(self):
            self.stop()

    q = Quitter()
    q.send("QUIT")
    assert q.recv_event(timeout=5).name == "$EXIT"
    with pytest.raises(ActorExited):
        q.call("QUIT")
    q.destroy()


def test_context_manager_destroys():
    with Counter() as c:
        assert c.call("ADD", 1) == 1
    assert not c.alive


def test_command_verbs_must_be_valid():
    with pytest.raises(ValueError):
        command("BAD VERB")(lambda self: None)


def test_parent_actor_watches_child_in_its_own_loop():
    class Parent(Actor):
        def setup(self):
            self.child = Counter(100)
            self.seen = []
            self.watch(self.child, self.seen.append)

        @command(reply=True)
        def relay(self, n):
            self.child.send("STREAM", n)
            return self.child.call("ADD", n)

        @command(reply=True)
        def seen_count(self):
            return len(self.seen)

        def teardown(self):
            self.child.destroy()

    parent = Parent()
    assert parent.call("RELAY", 3, timeout=5) == 103
    assert parent.call("SEEN_COUNT", timeout=5) == 3
    parent.destroy()


class Pausable(Counter):
    @command
    def pause(self, seconds):
        self.pause_commands()
        if seconds:
            self.call_later(seconds, self.resume_commands)


def test_the_pipe_is_in_memory_no_sockets_and_no_descriptors():
    """A pipe is two in-memory channels: making actors opens no descriptor for it.

    The inproc PAIR it replaced held two sockets per actor, each with an
    eventfd, and paid about thirty system calls a round trip through them
    (a call took four times a gevent.queue round trip).
    """
    def descriptors():
        return len(os.listdir("/proc/self/fd"))

    Counter().destroy()  # the hub, its watchers and the context exist
    before = descriptors()
    actors = [Counter() for _ in range(50)]
    try:
        during = descriptors()
        for actor in actors:
            assert actor.call("ADD", 1, timeout=10) == 1
        assert during - before < 10, "%d descriptors for 50 actors' pipes" % (during - before)
    finally:
        for actor in actors:
            actor.destroy()


def test_paused_actor_blocks_senders_then_takes_everything_in_order():
    actor = Pausable(0)
    try:
        actor.send("PAUSE", 0.3)
        sender = gevent.spawn(lambda: [actor.send("ADD", 1) for _ in range(30000)])  # beyond the pipe's HWM
        assert sender.get(timeout=20) is not None, "the blocked sender was woken when the actor read again"
        assert actor.call("ADD", 0, timeout=10) == 30000
    finally:
        actor.destroy()


def test_destroy_does_not_hang_on_a_full_pipe():
    actor = Pausable(0)
    actor.send("PAUSE", 0)  # never resumes
    commands = actor._pipe.commands
    while commands.put(b"\x92\xa3ADD\x00"):  # fill the pipe without blocking
        pass
    with gevent.Timeout(10):
        actor.destroy()
    assert not actor.alive


def test_event_waiters_are_released_when_the_actor_goes():
    actor = Counter()
    waiters = [gevent.spawn(actor.recv_event) for _ in range(2)]
    gevent.sleep(0)
    actor.destroy()
    outcomes = []
    for w in waiters:
        w.join(timeout=5)
        assert w.ready(), "a recv_event waiter hung after destroy"
        outcomes.append(w.value.name if w.successful() else type(w.exception).__name__)
    assert sorted(outcomes) == ["$EXIT", "ActorExited"]


def test_close_socket_with_linger_lets_queued_messages_leave():
    sink = context().socket(zmq.PULL, socket_class=Socket)
    sink.linger = 0
    sink.bind("tcp://127.0.0.1:*")

    class Goodbye(Actor):
        @command(reply=True)
        def bye(self, endpoint):
            push = self.socket(zmq.PUSH)
            push.connect(endpoint)
            push.send(b"goodbye")
            self.close_socket(push, linger=1.0)
            return push.closed

    actor = Goodbye()
    try:
        assert actor.call("BYE", sink.last_endpoint.decode()) is True
        assert sink.recv_multipart(timeout=5) == [b"goodbye"]
    finally:
        actor.destroy()
        sink.close()


class Flooder(Actor):
    """FLOOD n: a timer emits n TICK events (the window holds 2); NOTE x; NOTES -> the xs noted."""

    events_size = 2

    def __init__(self):
        self.notes = []

    @command
    def flood(self, n):
        self.call_later(0, lambda: [self.emit("TICK", i) for i in range(n)])

    @command
    def note(self, x):
        self.notes.append(x)

    @command("NOTES", reply=True)
    def get_notes(self):
        return self.notes


def test_commands_that_came_while_an_emit_waited_are_served_after_it():
    """Commands that woke a parked emit, which then found room before serving them all,
    are served by the loop (their wake-up had gone to the emit, not to the loop)."""
    from tests.conftest import wait_for

    actor = Flooder()
    try:
        actor.send("FLOOD", 3)
        wait_for(lambda: actor._pipe._parked is not None, 10, "the emit to wait for room")
        actor.send("NOTE", 1)  # wakes the parked emit...
        actor.send("NOTE", 2)
        assert [actor.recv_event(timeout=10).args for _ in range(2)] == [(0,), (1,)]  # ...which then has room
        assert actor.call("NOTES", timeout=10) == [1, 2]
        assert actor.recv_event(timeout=10).args == (2,)
    finally:
        actor.destroy()


class Answerer(Actor):
    """ASK -> 42, answered from a deferred reply that an AFTER event follows at once."""

    @command(deferred=True)
    def ask(self, reply):
        reply(42)
        self.emit("AFTER")


class Asker(Actor):
    """Watches an Answerer: ASK -> its answer (a call pumped from this loop); SEEN -> its events' names."""

    def setup(self):
        self.seen = []
        self.child = Answerer()
        self.watch(self.child, lambda event: self.seen.append(event.name))

    def teardown(self):
        self.child.destroy()

    @command(reply=True)
    def ask(self):
        return self.child.call("ASK", timeout=10)

    @command(reply=True)
    def seen_events(self):
        return self.seen


def test_a_watched_childs_event_right_behind_a_reply_is_not_left_in_the_pipe():
    """A call pumped from the parent's loop takes its reply; what came behind it is still dispatched."""
    from tests.conftest import wait_for

    asker = Asker()
    try:
        assert asker.call("ASK", timeout=10) == 42
        wait_for(lambda: "AFTER" in asker.call("SEEN_EVENTS", timeout=10), 10, "the event behind the reply")
    finally:
        asker.destroy()
