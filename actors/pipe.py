"""The pipe between an actor and its parent, and its codec.

Every message on a pipe, in either direction, is one frame holding a
msgpack array::

    [verb, request_id, arg, ...]

    verb        str, upper-case ASCII; ``$`` starts a system verb
    request_id  int; 0 when no reply is wanted
    args        any msgpack values (bytes stay bytes, str stays str)

One frame rather than a frame per argument: a pipe never leaves the process.

The pipe is two :class:`Channel` objects, one per direction, not sockets:
an actor is a greenlet of its parent's thread, so both ends share one gevent
hub and a message is handed over in memory, the reader woken by a hub
callback.  An inproc PAIR did the same through libzmq, at a cost of some
thirty system calls per round trip (``getpid`` and ``poll`` in every call
on a socket whose peer sleeps, eventfd writes and reads, ``epoll_wait``):
a round trip took four times a ``gevent.queue`` one.  Each channel is
bounded (``hwm`` messages, as the PAIR's high-water marks were) and keeps
order; a full one makes its writer wait.

Parent to actor: commands (``$TERM`` and the actor's own verbs).
Actor to parent: ``$READY``/``$FAILED`` once at start, events (any verb,
empty request id), ``$REPLY``/``$ERROR`` for a request id, and ``$EXIT`` or
``$DIED`` once at the end.

:class:`PipeEnd` is the parent's end.  It is safe to use from any number of
greenlets of the thread that created the actor (calls are matched to replies
by request id, so concurrent callers do not wait for each other), and not
safe across OS threads.

Events are bounded by credit, not by the pipe's high-water mark: the parent
always drains the pipe at once (so a reply never waits behind unread
events), and hands each event to its :class:`~zactors.actors.events.Subscription`
queues.  The actor and its parent share one thread, so the window is a
plain counter: the actor's ``emit`` adds to :attr:`PipeEnd.in_flight`, and
:meth:`PipeEnd.full` says when one more event would overrun a blocking
subscription; :meth:`PipeEnd.park` is where the actor then waits.
"""
from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import gevent
import msgpack
from gevent import getcurrent
from gevent.event import AsyncResult, Event as GeventEvent
from gevent.hub import Waiter

from .errors import ActorDied, ActorError, ActorExited, ActorTimeout, CommandError, PipeError
from .events import BLOCK, Subscription, low_mark
from .reactor import DRAIN_CAP

if TYPE_CHECKING:
    from .reactor import Reactor

__all__ = ["Event", "Channel", "PipeEnd", "encode", "decode", "pack", "pipe_pair", "RESERVED", "EVENTS_SIZE",
           "EVENTS_BYTES"]

log = logging.getLogger(__name__)

READY = "$READY"
FAILED = "$FAILED"
REPLY = "$REPLY"
ERROR = "$ERROR"
EXIT = "$EXIT"
DIED = "$DIED"
TERM = "$TERM"

#: verbs of the pipe protocol itself, which an actor may not emit as events
RESERVED = frozenset((READY, FAILED, REPLY, ERROR, EXIT, DIED))

#: default event window: events an actor may have unread by a blocking reader
#: (the pipe's own high-water mark, which held as many before events were bounded)
EVENTS_SIZE = 10000
#: default event window in bytes (the events' encoded size): whichever of the two fills first
EVENTS_BYTES = 16 * 2**20

_packer = msgpack.Packer(use_bin_type=True)
pack = _packer.pack


class Event(NamedTuple):
    """An event from an actor: ``name`` (str) and ``args`` (tuple)."""

    name: str
    args: tuple[Any, ...]


def encode(verb: str, request_id: int = 0, args: Sequence[Any] = ()) -> bytes:
    """The one frame of a pipe message."""
    return pack([verb, request_id, *args])


def decode(frame: bytes) -> tuple[str, int, list[Any]]:
    """``(verb, request_id, args)`` of one frame; :class:`PipeError` if malformed."""
    try:
        message = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise PipeError("pipe message is not msgpack: %s" % exc) from None
    if (not isinstance(message, list) or len(message) < 2 or not isinstance(message[0], str)
            or not message[0] or type(message[1]) is not int):
        raise PipeError("pipe message must be [verb, request_id, args...], got %r" % (message,))
    return message[0], message[1], message[2:]


class Channel:
    """One direction of a pipe: encoded messages in order, at most ``hwm`` waiting.

    Both ends belong to one thread (the parent's hub; the actor is its
    greenlet); not safe across OS threads.  ``notify()``, when set, is
    called as the channel turns non-empty: the reader's wake-up (it must
    not block: it schedules).  A message put into a closed channel is
    dropped, as a socket's was once its peer had gone.
    """

    __slots__ = ("_items", "_room", "hwm", "notify", "closed")

    def __init__(self, hwm: int) -> None:
        self._items: deque[bytes] = deque()
        self._room = GeventEvent()
        self._room.set()
        self.hwm = hwm
        self.notify: Callable[[], object] | None = None
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, frame: bytes) -> bool:
        """Queue ``frame`` unless the channel is full (False: nothing queued).  Never blocks."""
        if self.closed:
            return True
        items = self._items
        if len(items) >= self.hwm:
            return False
        items.append(frame)
        if len(items) == 1 and self.notify is not None:
            self.notify()
        return True

    def send(self, frame: bytes) -> None:
        """:meth:`put`, parking the calling greenlet while the channel is full."""
        while not self.put(frame):
            self._room.clear()
            self._room.wait()

    def get(self) -> bytes | None:
        """The oldest message, or None when none waits.  Never blocks."""
        items = self._items
        if not items:
            return None
        if len(items) >= self.hwm:
            self._room.set()  # a writer may wait for this
        return items.popleft()

    def close(self) -> None:
        """Drop what waits; later messages are dropped too, and a waiting writer goes on."""
        self.closed = True
        self._items.clear()
        self._room.set()


def pipe_pair(hwm: int = 10000) -> tuple[Channel, Channel]:
    """The two channels of a pipe: ``(commands to the actor, messages to the parent)``."""
    return Channel(hwm), Channel(hwm)


class PipeEnd:
    """The parent's end of an actor pipe: commands out, replies and events in.

    Incoming messages are drained by a hub callback, scheduled as the
    channel turns non-empty, which hands each reply straight to its waiting
    caller (no reader greenlet in between), or by a reactor when the pipe is
    :meth:`attach`-ed to one (the parent is itself an actor).  Events go to every open
    :class:`~zactors.actors.events.Subscription`: the default one
    (:meth:`recv_event`) and those made by :meth:`subscribe`.
    """

    def __init__(self, commands: Channel, incoming: Channel, name: str, size: int = EVENTS_SIZE,
                 max_bytes: int = EVENTS_BYTES) -> None:
        self._default = Subscription(self, size, BLOCK, max_bytes)  # checks size and max_bytes
        #: the channel of commands to the actor, and that of the actor's messages to us
        self.commands = commands
        self.incoming = incoming
        self.name = name
        #: the event window, in events and in bytes: the pipe never holds more
        self.size = size
        self.max_bytes = max_bytes
        self._low_size = low_mark(size)
        self._low_bytes = low_mark(max_bytes)
        #: events the actor emitted that the parent has not taken off the pipe yet, and their bytes
        self.in_flight = 0
        self.bytes_in_flight = 0
        self._ids = itertools.count(1)
        self._pending: dict[int, Any] = {}  # request id -> Waiter, or a [done, value, error] box when attached
        self._subscriptions = [self._default]  # every open one, in order
        self._blocking = [self._default]  # those that hold the actor back
        self._parked = None  # the Waiter of an actor parked in park()
        self._on_event: Callable[[Event], object] | None = None
        self._ready = AsyncResult()
        self._end: ActorError | None = None  # ActorExited / ActorDied once the actor is gone
        self._reactor: Reactor | None = None
        self._hub = gevent.get_hub()
        self._drain_queued = False  # a _drain callback is scheduled
        self._pump_waiter = None  # the Waiter of a call pumping the pipe (attached), woken by a message
        incoming.notify = self._arrived

    # -- outgoing -----------------------------------------------------------
    def send(self, verb: str, *args: Any) -> None:
        """Send a command that wants no reply."""
        self._check()
        self._send(encode(verb, 0, args))

    def _send(self, frame):
        """Send ``frame``, parking while the actor is behind (its channel full); raises the actor's end
        (ActorExited / ActorDied) if it is gone, or goes meanwhile (its end closes the channel)."""
        self.commands.send(frame)
        self._check()

    def call(self, verb: str, *args: Any, timeout: float | None = None) -> Any:
        """Send a command and wait for its reply value (or raise its error)."""
        self._check()
        request_id = next(self._ids)
        frame = encode(verb, request_id, args)
        try:
            if self._reactor is not None:
                box = self._pending[request_id] = [False, None, None]
                self._send(frame)
                if not self._pump_until(box, timeout):
                    raise self._timed_out(verb, timeout)
                if box[2] is not None:
                    raise box[2]
                return box[1]
            waiter = self._pending[request_id] = Waiter()
            self._send(frame)
            if timeout is None:
                return waiter.get()
            timer = gevent.Timeout(timeout)
            timer.start()
            try:
                return waiter.get()
            except gevent.Timeout as exc:
                if exc is not timer:  # the caller's own timeout: not ours to turn into ActorTimeout
                    raise
                raise self._timed_out(verb, timeout) from None
            finally:
                timer.close()
        finally:
            self._pending.pop(request_id, None)

    def _timed_out(self, verb, timeout):
        return ActorTimeout("%s: no reply to %s within %ss" % (self.name, verb, timeout))

    def _check(self):
        if self._end is not None:
            raise self._end

    # -- incoming -----------------------------------------------------------
    def recv_event(self, timeout: float | None = None) -> Event | None:
        """The next :class:`Event` of the default subscription; ``None`` on timeout.

        After the actor is gone its ``$EXIT``/``$DIED`` event is delivered,
        then every further call raises the matching :class:`ActorError`.
        """
        return self._default.recv(timeout)

    def subscribe(self, size: int | None = None, policy: str = BLOCK, max_bytes: int | None = None) -> Subscription:
        """A new :class:`~zactors.actors.events.Subscription` to the events from now on.

        ``size`` and ``max_bytes`` default to the pipe's window.
        """
        sub = Subscription(self, self.size if size is None else size, policy,
                           self.max_bytes if max_bytes is None else max_bytes)
        if self._end is not None:  # the actor is gone and its last word delivered already
            sub._shut(self._end)
            return sub
        self._subscriptions.append(sub)
        if sub.policy is BLOCK:
            self._blocking.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Forget ``sub`` (``Subscription.close`` calls this); a parked actor may go on."""
        if sub in self._subscriptions:
            self._subscriptions.remove(sub)
        if sub in self._blocking:
            self._blocking.remove(sub)
            self.consumed()

    @property
    def backlog(self) -> int:
        """Events emitted and not yet read by the slowest blocking subscription."""
        return self.in_flight + max((sub._queue.qsize() for sub in self._blocking), default=0)

    @property
    def backlog_bytes(self) -> int:
        """Bytes of :attr:`backlog` (the events' encoded size)."""
        return self.bytes_in_flight + max((sub._bytes for sub in self._blocking), default=0)

    # -- the event window (called by the actor, same thread) ------------------
    def full(self) -> bool:
        """True while one more event would overrun the window of a blocking subscription."""
        n = self.in_flight
        b = self.bytes_in_flight
        if n >= self.size or b >= self.max_bytes:
            return True
        for sub in self._blocking:
            if n + sub._queue.qsize() >= sub.size or b + sub._bytes >= sub.max_bytes:
                return True
        return False

    def _low(self):
        """True once every blocking subscription is back under its low-water marks (3/4)."""
        n = self.in_flight
        b = self.bytes_in_flight
        if n > self._low_size or b > self._low_bytes:
            return False
        for sub in self._blocking:
            if n + sub._queue.qsize() > sub._low_size or b + sub._bytes > sub._low_bytes:
                return False
        return True

    def park(self, commands: Channel | None = None) -> bool:
        """Park the calling greenlet until the window has room again.

        Returns early, True, when a command arrives on ``commands`` (the
        actor's command channel, served meanwhile); False when woken for
        room (or because the pipe closed).  The caller re-checks :meth:`full`.
        """
        waiter = self._parked = Waiter()
        notify = None
        if commands is not None:
            notify = commands.notify
            commands.notify = lambda: self._hub.loop.run_callback(waiter.switch, True)
        try:
            return waiter.get()
        finally:
            if self._parked is waiter:
                self._parked = None
            if commands is not None:
                commands.notify = notify

    def consumed(self) -> None:
        """A blocking reader took an event: wake a parked actor below the low-water mark."""
        if self._parked is not None and (self._end is not None or self._low()):
            self.wake()

    def wake(self) -> None:
        """Wake an actor parked in :meth:`park` now, whatever the window says."""
        waiter = self._parked
        if waiter is not None:
            self._parked = None
            self._hub.loop.run_callback(waiter.switch, False)

    def wait_ready(self, timeout: float | None) -> bool:
        return self._ready.get(timeout=timeout)

    def attach(self, reactor: Reactor, on_event: Callable[[Event], object]) -> None:
        """Let ``reactor`` read this pipe and call ``on_event(Event)``.

        Used when the parent is itself an actor; afterwards :meth:`call` must
        be made from the reactor's own greenlet.
        """
        self._reactor = reactor
        self._on_event = on_event
        # on_event consumes each event as it arrives: the default queue would only fill up.
        self._default.close()
        if len(self.incoming):
            self._arrived()

    def _arrived(self):
        """The incoming channel turned non-empty: have it drained (never blocks)."""
        if self._pump_waiter is not None:
            waiter, self._pump_waiter = self._pump_waiter, None
            self._hub.loop.run_callback(waiter.switch, True)
        elif self._reactor is not None:
            self._reactor.post(self._drain_attached)
        elif not self._drain_queued:
            self._drain_queued = True
            self._hub.loop.run_callback(self._drain)

    def _drain_attached(self, cap=DRAIN_CAP):
        """The attached reactor's turn: dispatch up to ``cap`` messages, then let it go round."""
        incoming = self.incoming
        for _ in range(cap):
            frame = incoming.get()
            if frame is None:
                return
            self.dispatch(frame)
        if len(incoming):
            self._reactor.post(self._drain_attached)

    def _drain(self, cap=DRAIN_CAP):
        """Hub callback: dispatch what waits, at most ``cap`` messages (never blocks).

        Past the cap it goes on in a fresh callback, so the greenlets it woke
        (readers, callers) run in between.
        """
        self._drain_queued = False
        incoming = self.incoming
        n = 0
        while self._reactor is None:
            frame = incoming.get()
            if frame is None:
                break
            self.dispatch(frame)
            n += 1
            if n == cap:
                if len(incoming) and not self._drain_queued:
                    self._drain_queued = True
                    self._hub.loop.run_callback(self._drain)
                break
        if self._parked is not None:  # in_flight fell, or a drop-only reader took events
            self.consumed()

    def _pump_until(self, box, timeout):
        """Read the pipe in the attached reactor's greenlet until ``box`` is done; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        incoming = self.incoming
        while not box[0]:
            frame = incoming.get()
            if frame is not None:
                self.dispatch(frame)
                continue
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            waiter = self._pump_waiter = Waiter()
            timer = None
            if remaining is not None:
                timer = self._hub.loop.timer(remaining)
                timer.start(waiter.switch, False, update=True)
            try:
                waiter.get()
            finally:
                if self._pump_waiter is waiter:
                    self._pump_waiter = None
                if timer is not None:
                    timer.close()
        if len(incoming):  # what came behind the reply: its wake-up went to us
            self._reactor.post(self._drain_attached)
        return True

    def dispatch(self, frame: bytes) -> None:
        """Route one message from the actor to a waiting call or the events.

        Runs in the hub (or the attached reactor's greenlet): never blocks.
        """
        try:
            verb, request_id, args = decode(frame)
        except PipeError as exc:
            log.error("%s: malformed message from actor dropped: %s", self.name, exc)
            return
        if verb[0] != "$" or verb not in RESERVED:  # an event: the hot path
            nbytes = len(frame)
            if self.in_flight:
                self.in_flight -= 1
                self.bytes_in_flight -= nbytes
            event = Event(verb, tuple(args))
            if self._on_event is not None:
                self._on_event(event)
            item = (event, nbytes)
            for sub in self._subscriptions:
                if sub.policy is BLOCK:  # bounded by the window: never full here
                    sub._bytes += nbytes
                    sub._queue.put_nowait(item)
                else:
                    sub._put(item)
            if self._reactor is not None and self._parked is not None:  # _drain checks once a batch
                self.consumed()
            return
        if verb == REPLY or verb == ERROR:
            entry = self._pending.pop(request_id, None)
            if entry is None:
                log.debug("%s: late reply %r dropped", self.name, request_id)
            elif verb == REPLY:
                self._resolve(entry, args[0] if args else None, None)
            else:
                self._resolve(entry, None, CommandError(*args))
            return
        if verb == READY:
            self._ready.set(True)
            return
        if verb == FAILED:
            self._ready.set(False)
            return
        if verb == EXIT or verb == DIED:
            self._last_word(verb, args)

    def _last_word(self, verb, args):
        """The actor is gone (``$EXIT``/``$DIED``): every call fails, every reader gets it."""
        if self._end is not None:
            return
        self._finish(verb, args)
        event = Event(verb, tuple(args))
        if self._on_event is not None:
            self._on_event(event)
        for sub in self._subscriptions:  # the last word is never dropped
            sub._queue.put_nowait((event, 0))
            sub._shut(self._end)

    def actor_ended(self, reason: str) -> None:
        """The actor's greenlet ended (a hub callback): read its last words; if it left none (killed
        before it could say them), it died of ``reason``.  An attached pipe is read in its reactor's loop."""
        if self._reactor is not None:
            self._reactor.post(self._gone, reason)
            return
        if not self.incoming.closed:
            self._drain(None)
        self._gone(reason)

    def _gone(self, reason):
        if self._reactor is not None and self._end is None and not self.incoming.closed:
            self._drain_attached(len(self.incoming))
        if self._end is None:
            self._last_word(DIED, (reason,))

    def _resolve(self, entry, value, error):
        if type(entry) is list:
            entry[:] = (True, value, error)
        elif getcurrent() is self._hub:
            entry.throw(error) if error is not None else entry.switch(value)
        else:  # Waiter is only switched from the hub
            self._hub.loop.run_callback(self._resolve, entry, value, error)

    def _finish(self, verb, args):
        if verb == EXIT:
            self._end = ActorExited("%s has exited" % self.name)
        else:
            self._end = ActorDied("%s died: %s" % (self.name, args[0] if args else "unknown error"))
        self._fail_pending()
        self._ready.set(False)
        self.commands.close()  # a sender parked for room: there will be none (it raises, see _send)

    def _fail_pending(self):
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            self._resolve(entry, None, self._end)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self.incoming.closed

    def close(self) -> None:
        """Stop reading and close both channels; pending calls fail."""
        if self._reactor is None:
            self._drain(None)  # the actor's last words ($EXIT) may not have been read yet
        else:
            self._drain_attached(len(self.incoming))
        if self._end is None:
            self._end = ActorExited("%s has been destroyed" % self.name)
        self._fail_pending()
        subscriptions, self._subscriptions, self._blocking = self._subscriptions, [], []
        for sub in subscriptions:
            sub._shut(self._end)
        self.consumed()  # an actor still parked (never, after destroy) must not wait for readers that are gone
        self.incoming.close()
        self.commands.close()
