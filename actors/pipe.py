"""The inproc PAIR pipe between an actor and its parent, and its codec.

Every message on a pipe, in either direction, is one frame holding a
msgpack array::

    [verb, request_id, arg, ...]

    verb        str, upper-case ASCII; ``$`` starts a system verb
    request_id  int; 0 when no reply is wanted
    args        any msgpack values (bytes stay bytes, str stays str)

One frame rather than a frame per argument: a pipe never leaves the process,
and every extra frame costs a send, a receive and an ``RCVMORE`` check
(about 4 us here), which halved the round-trip rate.

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
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import gevent
import msgpack
import zmq
from gevent import getcurrent
from gevent.event import AsyncResult, Event as GeventEvent
from gevent.hub import Waiter

from .errors import ActorDied, ActorError, ActorExited, ActorTimeout, CommandError, PipeError
from .events import BLOCK, Subscription, low_mark
from .reactor import DRAIN_CAP
from .sockets import NOBLOCK, POLLIN, POLLOUT, Socket, context
from .speedups import recv_message

if TYPE_CHECKING:
    from .reactor import Reactor

__all__ = ["Event", "PipeEnd", "encode", "decode", "pack", "pipe_pair", "RESERVED", "EVENTS_SIZE", "EVENTS_BYTES"]

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


_SNDHWM, _RCVHWM, _LINGER = int(zmq.SNDHWM), int(zmq.RCVHWM), int(zmq.LINGER)

#: seconds an attached sender parked for room waits between looks at whether the actor is gone
_GONE_CHECK = 0.1


def pipe_pair(hwm: int = 10000) -> tuple[Socket, Socket]:
    """Two connected PAIR sockets: ``(parent end, actor end)``."""
    ctx = context()
    endpoint = "inproc://zactors-pipe-%s" % uuid.uuid4().hex
    parent = ctx.socket(zmq.PAIR, socket_class=Socket)
    child = ctx.socket(zmq.PAIR, socket_class=Socket)
    for sock in (parent, child):  # set(int, ...): pyzmq's attribute sugar costs ~4x more, on every restart
        sock.set(_SNDHWM, hwm)
        sock.set(_RCVHWM, hwm)
        sock.set(_LINGER, 0)
    parent.bind(endpoint)
    child.connect(endpoint)
    return parent, child  # type: ignore[return-value]  # socket_class=Socket


class PipeEnd:
    """The parent's end of an actor pipe: commands out, replies and events in.

    Incoming messages are drained by a gevent io callback in the hub, which
    hands each reply straight to its waiting caller (no reader greenlet in
    between), or by a reactor when the pipe is :meth:`attach`-ed to one (the
    parent is itself an actor).  Events go to every open
    :class:`~zactors.actors.events.Subscription`: the default one
    (:meth:`recv_event`) and those made by :meth:`subscribe`.
    """

    def __init__(self, socket: Socket, name: str, size: int = EVENTS_SIZE, max_bytes: int = EVENTS_BYTES) -> None:
        self._default = Subscription(self, size, BLOCK, max_bytes)  # checks size and max_bytes
        self.socket = socket
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
        self._room = GeventEvent()
        self._room.set()
        self._hub = gevent.get_hub()
        self._watcher = self._hub.loop.io(socket.getsockopt(zmq.FD), 1)
        self._watcher.start(self._drain)

    # -- outgoing -----------------------------------------------------------
    def send(self, verb: str, *args: Any) -> None:
        """Send a command that wants no reply."""
        self._check()
        self._send(encode(verb, 0, args))

    def _send(self, frame):
        """Send ``frame``, parking while the actor is behind; raises the actor's end (ActorExited /
        ActorDied) if it is gone, or goes, meanwhile: a gone actor's end of the pipe is closed, so
        there is never room again, and its last words (``$EXIT``/``$DIED``) may be waiting unread."""
        sock = self.socket
        while True:
            try:
                sock.send(frame, NOBLOCK)
                break
            except zmq.Again:  # the actor is behind (or gone): park until it reads
                if self._reactor is not None:
                    frames = recv_message(sock, sock.handle)
                    if frames is not None:
                        self.dispatch(frames[0])    # (its last words end it: _check below)
                    else:
                        sock.wait(POLLOUT | POLLIN, _GONE_CHECK)
                    self._check()
                    continue
                # The hub's drain callback eats the ZMQ_FD edge a plain wait
                # would need, so it is the one that tells us about room (and
                # about the actor's end: _finish sets _room too).
                self._room.clear()
                if sock.events() & POLLIN:  # (our send may have eaten the edge of its last words)
                    self._hub.loop.run_callback(self._drain)
                if not sock.events() & POLLOUT:
                    self._room.wait()
                self._check()
        # A send processes the socket's mailbox and may eat the ZMQ_FD edge
        # the hub waits on: if something is readable now, drain it ourselves.
        if self._reactor is None and sock.events() & POLLIN:
            self._hub.loop.run_callback(self._drain)

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

    def park(self, fd: int | None = None) -> bool:
        """Park the calling greenlet until the window has room again.

        Returns early, True, when ``fd`` (the actor's end of the pipe, whose
        ``ZMQ_FD`` edges it watches) may have commands to read; False when
        woken for room (or because the pipe closed).  The caller re-checks
        :meth:`full`.
        """
        waiter = self._parked = Waiter()
        watcher = None
        if fd is not None:
            watcher = self._hub.loop.io(fd, 1)
            watcher.start(waiter.switch, True)
        try:
            return waiter.get()
        finally:
            if self._parked is waiter:
                self._parked = None
            if watcher is not None:
                watcher.close()

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
        self._watcher.stop()
        self._reactor = reactor
        self._on_event = on_event
        # on_event consumes each event as it arrives: the default queue would only fill up.
        self._default.close()
        reactor.add_reader(self.socket, self.dispatch)

    def _drain(self, cap=DRAIN_CAP):
        """Hub callback: dispatch what is readable, at most ``cap`` messages (never blocks).

        Past the cap it goes on in a fresh callback, so the greenlets it woke
        (readers, callers) run in between: no ZMQ_FD edge comes for what is
        left, so it must not wait for one.
        """
        sock = self.socket
        n = 0
        while self._reactor is None:
            try:
                frames = recv_message(sock, sock.handle)
            except zmq.ZMQError:  # closed under us
                break
            if frames is None:
                break
            self.dispatch(frames[0])
            n += 1
            if n == cap:
                self._hub.loop.run_callback(self._drain)
                break
        if not self._room.is_set() and not sock._closed and sock.events() & POLLOUT:
            self._room.set()
        if self._parked is not None:  # in_flight fell, or a drop-only reader took events
            self.consumed()

    def _pump_until(self, box, timeout):
        """Read the pipe in the attached reactor's greenlet until ``box`` is done; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not box[0]:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            try:
                frames = self.socket.recv_multipart(timeout=remaining)
            except zmq.Again:
                return False
            self.dispatch(frames[0])
        return True

    def dispatch(self, frame: bytes | list[bytes]) -> None:
        """Route one message from the actor to a waiting call or the events.

        Runs in the hub (or the attached reactor's greenlet): never blocks.
        """
        if type(frame) is list:  # from a reactor, which hands over whole messages
            frame = frame[0]
        try:
            verb, request_id, args = decode(frame)  # type: ignore[arg-type]  # a list became its frame
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
        if not self.socket.closed:
            self._drain(None)
        self._gone(reason)

    def _gone(self, reason):
        sock = self.socket
        while self._reactor is not None and self._end is None and not sock.closed:
            frames = recv_message(sock, sock.handle)
            if frames is None:
                break
            self.dispatch(frames[0])
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
        self._room.set()  # a sender parked for room: there will be none

    def _fail_pending(self):
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            self._resolve(entry, None, self._end)

    def close(self) -> None:
        """Stop reading and close the socket
 (linger 0); pending calls fail."""
        if self._reactor is not None:
            self._reactor.remove_reader(self.socket)
        else:
            self._drain(None)  # the actor's last words ($EXIT) may not have been read yet
        self._watcher.close()
        if self._end is None:
            self._end = ActorExited("%s has been destroyed" % self.name)
        self._fail_pending()
        subscriptions, self._subscriptions, self._blocking = self._subscriptions, [], []
        for sub in subscriptions:
            sub._shut(self._end)
        self.consumed()  # an actor still parked (never, after destroy) must not wait for readers that are gone
        self._room.set()
        self.socket.close(0)
