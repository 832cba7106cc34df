"""Consumers of one actor's events: bounded queues in the parent, a policy each.

Every reader of an actor's events is a :class:`Subscription`: the default
one behind ``Actor.recv_event``/``Actor.events()``, and one more per
``Actor.subscribe(size, policy, max_bytes)``.  Each event the actor emits
goes to every subscription open when the event reaches the parent.  A queue
is bounded twice: ``size`` events and ``max_bytes`` bytes (the events'
encoded size on the pipe), whichever comes first.

Policies:

``"block"`` (lossless)
    The subscription counts toward the actor's event window: while any
    blocking subscription holds ``size`` events or ``max_bytes`` bytes
    (counting those still in the pipe), the actor's :meth:`~zactors.actors.Actor.emit` waits, the actor
    stops reading its sockets and the senders upstream are pushed back.  The
    slowest blocking reader sets the pace; nothing is lost.  The default
    subscription is always a blocking one.
``"drop"``
    Never holds the actor back: an event that finds the queue full is
    dropped and counted in :attr:`Subscription.dropped`.  The last event
    (``$EXIT``/``$DIED``) is always delivered.  For dashboards and monitors.

A subscription belongs to the thread of its actor's parent; it may be read
from several greenlets of that thread (each event goes to one of them), and
is not safe across OS threads.  ``recv`` parks only the calling greenlet.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Self

from gevent.queue import Empty, Queue

from .errors import ActorError

if TYPE_CHECKING:
    from .pipe import Event, PipeEnd

__all__ = ["Subscription", "BLOCK", "DROP", "POLICIES", "low_mark"]

BLOCK = "block"
DROP = "drop"
POLICIES = (BLOCK, DROP)

_CLOSED = object()  # the last item of a closed subscription's queue


def low_mark(limit: int) -> int:
    """Where a parked actor is woken again: a quarter of the window free (at least one)."""
    return limit - max(1, limit >> 2)


class Subscription:
    """One reader's bounded queue of an actor's events.

    Iterate over it (until the actor ends), or :meth:`recv` with a timeout.
    :meth:`close` it when done: an open blocking subscription nobody reads
    holds the actor back.  Made by ``Actor.subscribe``; not for direct
    construction.
    """

    __slots__ = ("_pipe", "_queue", "_end", "_bytes", "_low_size", "_low_bytes", "size", "max_bytes", "policy",
                 "dropped", "received")

    def __init__(self, pipe: PipeEnd, size: int, policy: str, max_bytes: int) -> None:
        if policy not in POLICIES:
            raise ValueError("event policy must be one of %s, not %r" % (", ".join(POLICIES), policy))
        for what, value in (("size", size), ("max_bytes", max_bytes)):
            if type(value) is not int or value < 1:
                raise ValueError("event queue %s must be a positive int, not %r" % (what, value))
        self._pipe = pipe
        # (event, bytes) items, bounded by the pipe's window (block) or by _put (drop)
        self._queue = Queue()
        self._bytes = 0  # the encoded size of what is queued
        self._end: ActorError | None = None  # the ActorError recv raises once the queue is empty for good
        #: events this queue holds at most (a blocking one may briefly hold one more per nested emit)
        self.size = size
        #: bytes (encoded on the pipe) this queue holds at most; one event larger than that still passes alone
        self.max_bytes = max_bytes
        self._low_size = low_mark(size)
        self._low_bytes = low_mark(max_bytes)
        #: ``"block"`` or ``"drop"`` (these very objects, so ``is`` compares)
        self.policy = BLOCK if policy == BLOCK else DROP
        #: events dropped because the queue was full (``"drop"`` policy only)
        self.dropped = 0
        #: events taken off the queue by readers
        self.received = 0

    @property
    def pending(self) -> int:
        """Events waiting in this queue."""
        return self._queue.qsize()

    @property
    def closed(self) -> bool:
        return self._end is not None

    def recv(self, timeout: float | None = None) -> Event | None:
        """The next :class:`~zactors.actors.Event`; ``None`` after ``timeout`` seconds.

        Parks the calling greenlet.  After the actor is gone its
        ``$EXIT``/``$DIED`` event is delivered, then every further call
        raises the matching :class:`~zactors.actors.ActorError` (after
        :meth:`close`: an ``ActorError`` at once).
        """
        queue = self._queue
        if self._end is not None and not queue.qsize():
            raise self._end
        try:
            item = queue.get(timeout=timeout)
        except Empty:
            return None
        if item is _CLOSED:  # wakes every waiter once closed
            queue.put_nowait(_CLOSED)
            raise self._end  # type: ignore[misc]  # set before _CLOSED is queued
        event, nbytes = item
        self._bytes -= nbytes
        self.received += 1
        if self._pipe._parked is not None and self.policy is BLOCK:
            self._pipe.consumed()
        return event

    def __iter__(self) -> Iterator[Event]:
        """Events until the actor ends (its ``$EXIT``/``$DIED`` is the last) or the subscription closes."""
        while True:
            try:
                event = self.recv()
            except ActorError:
                return
            yield event  # type: ignore[misc]  # recv without a timeout never returns None

    def close(self) -> None:
        """Stop receiving; what is queued is discarded and the actor is no longer held back.  Idempotent."""
        if self._end is not None:
            return
        self._queue.queue.clear()
        self._bytes = 0
        self._pipe.unsubscribe(self)
        self._shut(ActorError("subscription closed"))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:

        return "<Subscription %s size=%d pending=%d dropped=%d%s>" % (
            self.policy, self.size, self.pending, self.dropped, " closed" if self.closed else "")

    # -- the pipe's side (hub or attached reactor; never blocks) -------------
    def _put(self, item):
        """Queue ``(event, bytes)``, or drop it when a ``"drop"`` queue is full."""
        queue = self._queue
        nbytes = item[1]
        if self.policy is DROP and queue.qsize() and (
                queue.qsize() >= self.size or self._bytes + nbytes > self.max_bytes):
            self.dropped += 1
            return
        self._bytes += nbytes
        queue.put_nowait(item)

    def _shut(self, end):
        """No more events: readers get what is queued, then ``end`` is raised."""
        if self._end is None:
            self._end = end
            self._queue.put_nowait(_CLOSED)
