"""A test kit for actor authors (after Akka's TestKit).

:class:`Probe` asserts an actor's events and replies with deadlines::

    with Probe(tree) as probe:
        crash(tree.child("db"))                     # a crash on purpose: the child dies with $DIED
        probe.expect("CHILD_DIED", "db")            # next event; args given are compared as a prefix
        probe.expect("CHILD_STARTED", "db", 1)
        probe.expect_reply(42, "ADD", 42)           # a call answered within the deadline
        probe.expect_no_event(0.1)

:func:`crash` kills an actor (or a proxy's current incarnation) as a bug in
a handler would.  :class:`Synchronous` runs an actor's commands in the
calling greenlet, with no greenlet, pipe or sockets of its own, and a manual
clock for its timers, to test command logic step by step::

    counter = Synchronous(Counter, 5)
    assert counter.call("ADD", 2) == 7 and counter.actor.total == 7
    counter.advance(1.0)                            # fires the timers due

Failures are ``AssertionError`` s that say what came instead.  Everything
here belongs to the thread of the actors it tests; waits park only the
calling greenlet.
"""
from __future__ import annotations

import heapq
import itertools
import time
from collections import Counter as _Counter
from typing import Any

import msgpack

from .actor import Actor, _DEFERRED, _REPLY, _error_args
from .errors import ActorError, CommandError
from .names import Proxy
from .pipe import DIED, EXIT, RESERVED, Event, pack

__all__ = ["Probe", "crash", "Crash", "Synchronous"]

#: seconds a probe waits by default
DEADLINE = 5.0


class Crash(Exception):
    """What :func:`crash` raises inside an actor."""


def _raise(reason: str) -> None:
    raise Crash(reason)


def crash(target: Actor | Proxy, reason: str = "crashed on purpose") -> Actor:
    """Make ``target`` die as if a handler raised: it emits ``$DIED`` with ``"Crash: <reason>"``.

    Returns the incarnation crashed.  Never blocks (for a proxy: only while
    its actor restarts); the death follows in the actor's next round.
    """
    actor = target.actor if isinstance(target, Proxy) else target
    actor.post(_raise, reason)
    return actor


def _matches(event: Event, name: str, args: tuple[Any, ...]) -> bool:
    return event.name == name and tuple(event.args[:len(args)]) == tuple(args)


class Probe:
    """Assert the events an actor emits from now on, and its replies, with deadlines.

    It reads a lossless (``"block"``) subscription of its own: ``close`` it
    (or use ``with``) when done, or it holds the actor back once full.
    ``timeout`` is the default deadline of every expectation.
    """

    def __init__(self, target: Actor | Proxy, timeout: float = DEADLINE) -> None:
        self.target = target
        self.timeout = timeout
        self._sub = target.subscribe()
        #: every event this probe took, in order
        self.seen: list[Event] = []

    def recv(self, timeout: float | None = None) -> Event | None:
        """The next event, or ``None`` when ``timeout`` (default: the probe's) passes without one."""
        try:
            event = self._sub.recv(self.timeout if timeout is None else timeout)
        except ActorError:
            return None
        if event is not None:
            self.seen.append(event)
        return event

    def expect(self, name: str, *args: Any, timeout: float | None = None) -> Event:
        """The next event must be ``name`` whose first args are ``args``; returns it."""
        event = self.recv(timeout)
        if event is None:
            raise AssertionError("expected %s%r, got nothing within %ss" % (name, args, timeout or self.timeout))
        if not _matches(event, name, args):
            raise AssertionError("expected %s%r, got %s%r" % (name, args, event.name, event.args))
        return event

    def fish(self, name: str, *args: Any, timeout: float | None = None) -> Event:
        """Skip events until one is ``name`` with ``args`` first (Akka's fishForMessage); returns it."""
        deadline = _deadline(self.timeout if timeout is None else timeout)
        skipped: list[Event] = []
        while True:
            event = self.recv(max(0.0, deadline - _now()))
            if event is None:
                raise AssertionError("expected %s%r within %ss; skipped %s"
                                     % (name, args, timeout or self.timeout, _show(skipped)))
            if _matches(event, name, args):
                return event
            skipped.append(event)

    def expect_no_event(self, within: float) -> None:
        """No event may come during ``within`` seconds."""
        event = self.recv(within)
        if event is not None:
            raise AssertionError("expected no event for %ss, got %s%r" % (within, event.name, event.args))

    def expect_end(self, died: bool | None = None, timeout: float | None = None) -> Event:
        """Skip to the actor's last event (``$DIED`` if ``died``, ``$EXIT`` if not ``died``, either if None)."""
        names = {True: (DIED,), False: (EXIT,), None: (DIED, EXIT)}[died]
        deadline = _deadline(self.timeout if timeout is None else timeout)
        while True:
            event = self.recv(max(0.0, deadline - _now()))
            if event is None:
                raise AssertionError("expected %s within %ss" % (" or ".join(names), timeout or self.timeout))
            if event.name in (DIED, EXIT):
                if event.name not in names:
                    raise AssertionError("expected %s, got %s%r" % (names[0], event.name, event.args))
                return event

    def call(self, verb: str, *args: Any, timeout: float | None = None) -> Any:
        """The target's reply to ``verb``, within the deadline (``ActorTimeout`` otherwise)."""
        return self.target.call(verb, *args, timeout=self.timeout if timeout is None else timeout)

    def expect_reply(self, value: Any, verb: str, *args: Any, timeout: float | None = None) -> None:
        """``verb`` must be answered with ``value`` within the deadline."""
        reply = self.call(verb, *args, timeout=timeout)
        if reply != value:
            raise AssertionError("%s%r replied %r, expected %r" % (verb, args, reply, value))

    def expect_error(self, kind: str, verb: str, *args: Any, timeout: float | None = None) -> CommandError:
        """``verb`` must be refused with a :class:`CommandError` of ``kind`` (the exception's type name)."""
        try:
            reply = self.call(verb, *args, timeout=timeout)
        except CommandError as exc:
            if exc.kind != kind:
                raise AssertionError("%s%r failed with %s, expected %s" % (verb, args, exc, kind)) from None
            return exc
        raise AssertionError("%s%r replied %r, expected a %s" % (verb, args, reply, kind))

    def close(self) -> None:
        """Stop watching: close the probe's event subscription (idempotent)."""
        self._sub.close()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_now = time.monotonic


def _deadline(timeout: float) -> float:
    return _now() + timeout


def _show(events: list[Event]) -> str:
    return ", ".join("%s%r" % (e.name, e.args) for e in events) or "nothing"


class _Recorded:
    """The reply a command gives (a deferred one: or not yet) while :class:`Synchronous` runs it."""

    __slots__ = ("done", "value", "failure")
    wanted = True

    def __init__(self):
        self.done = False
        self.value = self.failure = None

    def __call__(self, value=None):
        self.done, self.value = True, value

    def error(self, exc):
        self.done, self.failure = True, CommandError(*_error_args(exc))


class Synchronous:
    """An actor whose commands run in the calling greenlet, step by step.

    ``Synchronous(ActorClass, *args, setup=False, **kwargs)`` runs the
    class's ``__init__`` (and ``setup`` if asked) without starting it: no
    greenlet, no pipe, and no sockets (``socket`` raises).  ``call``/``send``
    dispatch by the class's own command table, with arguments and replies
    through msgpack as on the pipe, and raise :class:`CommandError` as a
    real call would.  ``emit`` appends to :attr:`events`; ``call_later``,
    ``call_every`` and ``post`` wait for :meth:`advance`, which moves a
    manual clock and fires what is due.  ``actor`` is the instance, for
    looking at its state.  Not thread-safe; blocks nothing.
    """

    def __init__(self, actor_class: type[Actor], *args: Any, setup: bool = False, **kwargs: Any) -> None:
        actor = actor_class.__new__(actor_class)
        actor_class.__init__(actor, *args, **kwargs)
        self.actor = actor
        self.events: list[Event] = []
        self.now = 0.0
        self.stopped = False
        self._timers: list[tuple[float, int, list[Any]]] = []  # heap of (due, seq, [handler, args, interval, live])
        self._seq = itertools.count()
        actor.name = getattr(actor, "name", None) or actor_class.__name__
        actor.stats = _Counter()
        kernel = {"emit": self._emit, "call_later": self._call_later, "call_every": self._call_every,
                  "post": lambda func, *a: self._call_later(0, func, *a), "stop": self._stop,
                  "socket": self._no_socket}
        for attr, stand_in in kernel.items():  # the instance's own attributes shadow the kernel's methods
            setattr(actor, attr, stand_in)
        if setup:
            actor.setup()

    def call(self, verb: str, *args: Any) -> Any:
        """Run command ``verb`` now and return its reply (a deferred one must be answered by then)."""
        box = self._dispatch(verb, args, True)
        if not box.done:
            raise AssertionError("%s%r has not replied (deferred): advance() the clock first" % (verb, args))
        if box.failure is not None:
            raise box.failure
        return _through_msgpack(box.value)

    def send(self, verb: str, *args: Any) -> None:
        """Run command ``verb`` now; its reply and errors are dropped, as for ``Actor.send``."""
        self._dispatch(verb, args, False)

    def advance(self, seconds: float) -> int:
        """Move the clock on by ``seconds`` and fire every timer and post due by then, in order; returns how many."""
        end = self.now + seconds
        fired = 0
        timers = self._timers
        while timers and timers[0][0] <= end:
            due, _, entry = heapq.heappop(timers)
            handler, args, interval, live = entry
            if not live:
                continue
            self.now = max(self.now, due)
            if interval is not None:
                heapq.heappush(timers, (due + interval, next(self._seq), entry))
            handler(*args)
            fired += 1
        self.now = end
        return fired

    # -- what the actor calls instead of its kernel ---------------------------
    def _dispatch(self, verb, args, wanted):
        box = _Recorded()
        entry = type(self.actor)._commands.get(verb)
        if entry is None:
            box.done, box.failure = True, CommandError("UnknownCommand", "%s has no command %s"
                                                       % (self.actor.name, verb))
            return box
        attr, mode = entry
        handler = getattr(self.actor, attr)
        args = _through_msgpack(list(args))
        try:
            if mode == _DEFERRED:
                handler(box, *args)
                return box
            result = handler(*args)
        except Exception as exc:
            self.actor.stats["failed"] += 1
            box.error(exc)
            return box
        box(result if mode == _REPLY else None)
        return box

    def _emit(self, name, *args, drop=None):
        if name in RESERVED:
            raise ValueError("%s: %r is a pipe verb, not an event name" % (self.actor.name, name))
        self.events.append(Event(name, tuple(_through_msgpack(list(args)))))
        return True

    def _call_later(self, delay, handler, *args):
        return self._push(delay, handler, args, None)

    def _call_every(self, interval, handler, *args):
        if interval <= 0:
            raise ValueError("interval must be positive")
        return self._push(interval, handler, args, interval)

    def _push(self, delay, handler, args, interval):
        entry = [handler, args, interval, True]
        heapq.heappush(self._timers, (self.now + delay, next(self._seq), entry))
        return _ManualTimer(entry)

    def _stop(self):
        self.stopped = True

    def _no_socket(self, *args, **kwargs):
        raise TypeError("Synchronous runs an actor without sockets: test socket handlers on a started actor")


class _ManualTimer:
    __slots__ = ("_entry",)

    def __init__(self, entry):
        self._entry = entry

    @property
    def cancelled(self):
        return not self._entry[3]

    def cancel(self):
        self._entry[3] = False


def _through_msgpack(value: Any) -> Any:
    """What the other end of a pipe would get (so a test catches values the pipe cannot carry)."""
    return msgpack.unpackb(pack(value), raw=False, strict_map_key=False)

