"""Bounded actor events: the window, backpressure onto TCP, drops, fan-out."""
import os
import time

import gevent
from hypothesis import HealthCheck, given, settings, strategies as st
import pytest
import zmq

from zactors.actors import Actor, ActorError, ActorExited, CommandError, Event, Subscription, command
from zactors.actors.sockets import POLLOUT, Socket, context
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(120)


class Emitter(Actor):
    """STREAM n [size]: emits TICK i (with ``size`` bytes); TAGGED tag n: TAG tag i; ADD n -> total;
    EMIT_DROP n: emit(drop=True)."""

    def __init__(self, events_size=None, events_policy=None, events_bytes=None):
        if events_size is not None:
            self.events_size = events_size
        if events_bytes is not None:
            self.events_bytes = events_bytes
        if events_policy is not None:
            self.events_policy = events_policy
        self.total = 0

    @command
    def stream(self, n, size=0):
        payload = b"x" * size
        for i in range(n):
            self.emit("TICK", i, payload)

    @command
    def tagged(self, tag, n):
        for i in range(n):
            self.emit("TAG", tag, i)

    @command
    def emit_drop(self, n):
        for i in range(n):
            self.emit("TICK", i, b"", drop=True)

    @command(reply=True)
    def add(self, n):
        self.total += n
        return self.total

    @command(reply=True)
    def reserved(self):
        self.emit("$REPLY", 1, "forged")


def ticks(source, n, timeout=10):
    """The ``i`` of the next ``n`` TICK events from ``source`` (an actor or a subscription)."""
    recv = source.recv_event if isinstance(source, Actor) else source.recv
    got = []
    for _ in range(n):
        event = recv(timeout)
        assert event is not None, "only %d of %d events arrived" % (len(got), n)
        assert event.name == "TICK"
        got.append(event.args[0])
    return got


def stats(actor):
    return actor.call("$STATS", timeout=10)


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture
def make():
    actors = []

    def make(*args, **kwargs):
        actor = Emitter(*args, **kwargs)
        actors.append(actor)
        return actor

    yield make
    for actor in actors:
        actor.destroy()


# -- the window ---------------------------------------------------------------
def test_a_slow_reader_costs_bounded_memory_and_loses_nothing(make):
    actor = make()  # the default window
    n, size = 300_000, 1024
    base = rss()
    peak_backlog = peak_rss = 0
    actor.send("STREAM", n, size)
    for i in range(n):
        if i % 1000 == 0:
            gevent.sleep(0.001)  # a slow reader: the actor runs ahead meanwhile
            peak_backlog = max(peak_backlog, actor._pipe.backlog)
            peak_rss = max(peak_rss, rss())
        event = actor.recv_event(timeout=10)
        assert event == Event("TICK", (i, b"x" * size))
    assert actor.recv_event(timeout=0.05) is None
    assert 0 < peak_backlog <= actor.events_size
    # Unbounded, the 300k events held about 360 MB.
    assert peak_rss - base < 64 * 2**20, "RSS grew by %d MB" % ((peak_rss - base) >> 20)
    assert stats(actor)["emit_waits"] > 0


def test_big_events_are_bounded_in_bytes_too(make):
    actor = make(events_bytes=64 * 1024)
    lossy = actor.subscribe(policy="drop", max_bytes=40 * 1024)  # two events
    actor.send("STREAM", 40, 16 * 1024)
    wait_for(lambda: stats(actor)["emit_waits"] >= 1, what="the byte window to fill")
    assert actor._pipe.backlog == 4 and actor._pipe.backlog_bytes <= 4 * (16 * 1024 + 64)
    assert ticks(actor, 40) == list(range(40))
    assert lossy.pending == 2 and lossy.dropped == 38
    lossy.close()


def test_one_event_bigger_than_the_byte_window_still_passes(make):
    actor = make(events_bytes=1024)
    actor.send("STREAM", 3, 4096)
    assert ticks(actor, 3) == [0, 1, 2]


def test_calls_are_answered_while_the_events_go_unread(make):
    actor = make(events_size=50)
    actor.send("STREAM", 500)
    for n in range(1, 21):  # the actor is parked in emit: each call runs inside it
        assert actor.call("ADD", 1, timeout=5) == n
    counters = stats(actor)
    assert counters["emit_waits"] >= 1
    assert actor._pipe.backlog <= 50
    assert ticks(actor, 500) == list(range(500))
    assert actor.call("ADD", 0, timeout=5) == 20


def test_destroy_of_an_actor_parked_in_emit_returns_at_once(make):
    actor = make(events_size=10)
    actor.term_timeout = 30.0  # a $TERM ignored would show as 30 s
    actor.send("STREAM", 100_000)
    wait_for(lambda: stats(actor)["emit_waits"] >= 1, what="the actor to park in emit")
    started = time.monotonic()
    actor.destroy()
    assert time.monotonic() - started < 1.0
    assert not actor.alive
    got = []
    while True:
        event = actor.recv_event(timeout=5)
        if event.name == "$EXIT":
            break
        got.append(event.args[0])
    assert got == list(range(len(got))) and 10 <= len(got) <= 11
    with pytest.raises(ActorExited):
        actor.recv_event(timeout=1)


def test_term_from_the_pipe_ends_an_actor_parked_in_emit(make):
    actor = make(events_size=10)
    actor.send("STREAM", 100_000)
    wait_for(lambda: stats(actor)["emit_waits"] >= 1, what="the actor to park in emit")
    actor.send("$TERM")
    events = list(actor.events(timeout=5))
    assert events[-1].name == "$EXIT"
    got = [event.args[0] for event in events[:-1]]
    assert got == list(range(len(got))) and len(got) < 1000  # a window or two, not 100k
    assert gevent.wait([actor._greenlet], timeout=5) and not actor.alive


def test_an_actor_that_drops_never_waits_and_counts_its_losses(make):
    actor = make(events_size=10, events_policy="drop")
    actor.send("STREAM", 100)
    assert actor.call("ADD", 1, timeout=5) == 1
    counters = stats(actor)
    assert counters["events_dropped"] == 90 and counters["emit_waits"] == 0
    assert ticks(actor, 10) == list(range(10))
    assert actor.recv_event(timeout=0.05) is None
    actor.send("STREAM", 5)  # room again
    assert ticks(actor, 5) == list(range(5))


def test_drop_can_be_chosen_per_emit(make):
    actor = make(events_size=10)
    actor.send("EMIT_DROP", 25)
    assert stats(actor)["events_dropped"] == 15
    assert ticks(actor, 10) == list(range(10))
    assert actor.recv_event(timeout=0.05) is None


def test_pipe_verbs_cannot_be_emitted(make):
    actor = make()
    with pytest.raises(CommandError, match="pipe verb"):
        actor.call("RESERVED", timeout=5)
    assert actor.call("ADD", 1, timeout=5) == 1


def test_events_emitted_in_setup_beyond_the_window_do_not_deadlock_the_constructor():
    class Early(Actor):
        events_size = 5

        def setup(self):
            for i in range(50):
                self.emit("TICK", i)

    actor = Early()
    try:
        assert ticks(actor, 50) == list(range(50))
    finally:
        actor.destroy()


def test_a_bad_window_or_policy_is_refused():
    with pytest.raises(ValueError):
        Emitter(events_size=0)
    with pytest.raises(ValueError):
        Emitter(events_policy="lose")


# -- backpressure onto the network -------------------------------------------
class Relay(Actor):
    """Emits MSG for every message on a tcp PULL; RECEIVED -> messages read off the socket."""

    events_size = 100

    def setup(self):
        self.received = 0
        self.pull = self.socket(zmq.PULL, rcvhwm=10, rcvbuf=4096)
        self.pull.bind("tcp://127.0.0.1:*")
        self.endpoint = self.pull.last_endpoint.decode()
        self.add_reader(self.pull, self.on_message)

    def on_message(self, frames):
        self.received += 1
        self.emit("MSG", frames[0])

    @command(reply=True)
    def received_count(self):
        return self.received


def test_an_unread_actor_stops_reading_tcp_and_the_remote_push_is_held_back():
    relay = Relay()
    push = context().socket(zmq.PUSH, socket_class=Socket)
    push.linger = 0
    push.sndhwm = 10
    push.sndbuf = 4096
    total = 20_000
    message = b"m" * 1024
    try:
        push.connect(relay.endpoint)
        sent = 0
        # Send until the PUSH has no room for 0.5 s: the whole path is full.
        while sent < total and push.wait(POLLOUT, timeout=0.5):
            push.send(b"%08d" % sent + message, zmq.NOBLOCK)
            sent += 1
        assert sent < 2000, "the PUSH was never held back (sent %d)" % sent
        read = relay.call("RECEIVED_COUNT", timeout=5)
        assert read <= relay.events_size + 1  # it stopped reading its socket
        assert not push.wait(POLLOUT, timeout=0.3)
        assert relay.call("RECEIVED_COUNT", timeout=5) == read

        def rest():
            for i in range(sent, total):
                push.send_multipart([b"%08d" % i + message], timeout=30)

        sender = gevent.spawn(rest)
        for i in range(total):  # reading resumes the actor, and the PUSH with it
            event = relay.recv_event(timeout=10)
            assert event is not None and event.args[0][:8] == b"%08d" % i
        sender.get(timeout=10)
        assert relay.call("RECEIVED_COUNT", timeout=5) == total
    finally:
        push.close(0)
        relay.destroy()


# -- fan-out -------------------------------------------------------------------
def test_a_blocking_subscriber_holds_the_actor_back_and_a_dropping_one_counts(make):
    actor = make(events_size=1000)
    slow = actor.subscribe(size=20)
    lossy = actor.subscribe(size=5, policy="drop")
    assert isinstance(slow, Subscription) and slow.policy == "block" and lossy.policy == "drop"
    actor.send("STREAM", 200)
    wait_for(lambda: stats(actor)["emit_waits"] >= 1, what="the slowest blocking reader to hold the actor")
    assert actor._pipe.backlog <= 21 and actor.call("ADD", 0, timeout=5) == 0
    assert ticks(slow, 200) == list(range(200))
    assert ticks(actor, 200) == list(range(200))
    assert ticks(lossy, 5) == list(range(5))
    assert lossy.recv(timeout=0.05) is None
    assert lossy.dropped == 195 and slow.dropped == 0
    slow.close()
    lossy.close()


def test_a_dropping_subscriber_never_slows_the_actor(make):
    actor = make(events_size=10_000)
    lossy = actor.subscribe(size=10, policy="drop")
    actor.send("STREAM", 5000)
    assert ticks(actor, 5000) == list(range(5000))
    assert stats(actor)["emit_waits"] == 0
    assert lossy.pending == 10 and lossy.dropped == 4990
    lossy.close()
    with pytest.raises(ActorError):
        lossy.recv(timeout=1)


def test_closing_a_blocking_subscription_releases_the_actor(make):
    actor = make(events_size=1000)
    forgotten = actor.subscribe(size=10)
    actor.send("STREAM", 100)
    wait_for(lambda: stats(actor)["emit_waits"] >= 1, what="the actor to park")
    forgotten.close()
    assert ticks(actor, 100) == list(range(100))
    assert stats(actor)["emit_waits"] == 1


def test_every_subscription_sees_the_end_then_stops(make):
    actor = make(events_size=100)
    with actor.subscribe() as sub, actor.subscribe(size=1, policy="drop") as lossy:
        actor.send("STREAM", 3)
        assert ticks(sub, 3) == [0, 1, 2]
        actor.destroy()
        assert [event.name for event in sub] == ["$EXIT"]
        assert [event.name for event in lossy] == ["TICK", "$EXIT"]  # the last word is never dropped
    late = actor.subscribe()
    with pytest.raises(ActorExited):
        late.recv(timeout=1)


def test_many_greenlets_read_many_subscriptions_without_loss(make):
    actor = make(events_size=64)
    n = 20_000
    subs = [actor.subscribe(size=s) for s in (8, 64, 300)]
    per_sub = {}

    def read_sub(i, sub):
        got = per_sub[i] = []
        for event in sub:
            if event.name == "TICK":
                got.append(event.args[0])
            if len(got) % 97 == 0:
                gevent.sleep(0)

    shared = []

    def read_default():  # five readers share the default queue: each event goes to one
        for event in actor.events():
            if event.name == "TICK":
                shared.append(event.args[0])
                if event.args[0] % 13 == 0:
                    gevent.sleep(0)

    readers = [gevent.spawn(read_sub, i, sub) for i, sub in enumerate(subs)]
    readers += [gevent.spawn(read_default) for _ in range(5)]
    callers = [gevent.spawn(lambda: [actor.call("ADD", 1, timeout=20) for _ in range(200)]) for _ in range(5)]
    actor.send("STREAM", n)
    gevent.joinall(callers, timeout=60, raise_error=True)
    wait_for(lambda: len(shared) == n and all(len(g) == n for g in per_sub.values()), timeout=60,
             what="every reader to get every event")
    assert actor.call("ADD", 0, timeout=5) == 1000
    actor.destroy()
    gevent.joinall(readers, timeout=10, raise_error=True)
    for got in per_sub.values():
        assert got == list(range(n))
    assert sorted(shared) == list(range(n))


def test_an_actor_parent_consumes_a_childs_events_without_stalling_it():
    class Parent(Actor):
        def setup(self):
            self.seen = []
            self.child = Emitter(events_size=10)
            self.watch(self.child, lambda event: self.seen.append(event.args[0]))

        def teardown(self):
            self.child.destroy()

        @command
        def go(self, n):
            self.child.send("STREAM", n)

        @command(reply=True)
        def seen_count(self):
            return len(self.seen), self.seen == list(range(len(self.seen)))

    parent = Parent()
    try:
        parent.send("GO", 5000)
        wait_for(lambda: parent.call("SEEN_COUNT", timeout=5) == [5000, True], timeout=30,
                 what="the parent to see all 5000 events")
    finally:
        parent.destroy()


def test_a_callers_own_timeout_is_not_turned_into_actor_timeout(make):
    actor = make()
    outer = gevent.Timeout(0.05)
    with pytest.raises(gevent.Timeout) as raised:
        with outer:
            while True:
                actor.call("ADD", 0, timeout=60)  # the outer timeout fires while a call waits
    assert raised.value is outer


def test_destroy_is_prompt_even_when_the_parked_actor_has_paused_its_commands():
    class Deaf(Actor):
        events_size = 5
        term_timeout = 30.0

        @command
        def flood(self):
            self.pause_commands()  # its pipe goes unread: only destroy's direct wake-up reaches it
            for i in range(1000):
                self.emit("TICK", i)

    actor = Deaf()
    actor.send("FLOOD")
    wait_for(lambda: actor._pipe.backlog >= 5, what="the window to fill")
    started = time.monotonic()
    actor.destroy()
    assert time.monotonic() - started < 1.0 and not actor.alive


def test_commands_that_emit_while_the_window_is_full_lose_nothing_and_keep_their_own_order(make):
    actor = make(events_size=4)
    actor.send("TAGGED", "outer", 6)  # parks on its 4th event
    wait_for(lambda: stats(actor)["emit_waits"] >= 1, what="the actor to park")
    # Each command runs inside the parked emit (up to the nesting limit; the
    # rest wait in the pipe) and its events come between the outer ones: in
    # the order emitted, each command's own in order, none lost.
    for tag in range(20):
        actor.send("TAGGED", tag, 3)
    seen = {}
    for _ in range(6 + 20 * 3):
        event = actor.recv_event(timeout=10)
        assert event is not None and event.name == "TAG"
        seen.setdefault(event.args[0], []).append(event.args[1])
    assert seen == {"outer": list(range(6)), **{tag: [0, 1, 2] for tag in range(20)}}
    assert actor.recv_event(timeout=0.05) is None
    assert actor.call("ADD", 1, timeout=5) == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(window=st.integers(1, 40), n=st.integers(0, 300),
       subs=st.lists(st.tuples(st.sampled_from(["block", "drop"]), st.integers(1, 50)), max_size=4),
       bursts=st.lists(st.integers(1, 60), min_size=1, max_size=8))
def test_any_mix_of_readers_gets_what_its_policy_promises(make, window, n, subs, bursts):
    actor = make(events_size=window)
    subscriptions = [actor.subscribe(size=size, policy=policy) for policy, size in subs]
    actor.send("STREAM", n)
    got = {sub: [] for sub in subscriptions}
    default = []
    blocking = [sub for sub in subscriptions if sub.policy == "block"]

    def within_window():
        pipe = actor._pipe
        return pipe.in_flight + pipe._default.pending <= window + 1 and all(
            pipe.in_flight + sub.pending <= sub.size + 1 for sub in blocking)
    # The default reader takes bursts of events; each blocking subscription
    # follows it; drop ones are read at the end.
    burst = 0
    while len(default) < n:
        for _ in range(min(bursts[burst % len(bursts)], n - len(default))):
            assert within_window()
            default.append(actor.recv_event(timeout=10).args[0])
            for sub in subscriptions:
                if sub.policy == "block":
                    got[sub].append(sub.recv(timeout=10).args[0])
        burst += 1
        gevent.sleep(0)
    assert default == list(range(n))
    assert actor.call("ADD", 0, timeout=5) == 0
    for sub in subscriptions:
        while sub.pending:
            got[sub].append(sub.recv(timeout=1).args[0])
        if sub.policy == "block":
            assert got[sub] == list(range(n)) and sub.dropped == 0
        else:
            assert got[sub] == sorted(set(got[sub])) and len(got[sub]) + sub.dropped == n
        sub.close()
    actor.destroy()
