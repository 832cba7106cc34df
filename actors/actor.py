"""Actor: a greenlet that owns its sockets, in the CZMQ ``zactor`` style.

Write an actor by subclassing::

    class Counter(Actor):
        '''Counts what it is told.  Commands: ADD n -> total; RESET (no reply).'''

        def __init__(self, start=0):
            self.total = start          # runs in the parent, before the actor starts

        def setup(self):                # runs in the actor greenlet; may raise
            self.call_every(1.0, self.tick)

        @command(reply=True)
        def add(self, n):
            self.total += n
            return self.total

        @command
        def reset(self):
            self.total = 0

    counter = Counter(5)                # returns once setup() has run
    counter.call("ADD", 2)              # -> 7
    counter.destroy()

Creation is synchronous: constructing an actor returns after its ``setup``
has run in the actor greenlet and signalled ready; an exception in ``setup``
is raised in the parent.  :meth:`destroy` sends ``$TERM``, waits for the exit
signal and closes every socket the actor made with linger 0.

Sockets made with :meth:`socket` belong to the actor: only its handlers use
them.  ``add_reader(sock, handler)`` calls ``handler(frames)`` per message;
``call_later``/``call_every`` run timers; :meth:`emit` sends an event to the
parent.  Commands are methods marked with :func:`command`; arguments and
replies are msgpack values.

System commands, for every actor: ``$TERM`` (no reply: stop), ``$STATS``
(reply: dict of counters, such as rejected commands).

Events are bounded, and nothing is lost: at most ``events_size`` events
or ``events_bytes`` bytes (class attributes, or set in ``__init__``; 10000
and 16 MiB by default) wait unread by a blocking reader (the default one
behind :meth:`recv_event`, and each ``subscribe(policy="block")``).  When
the window is full, :meth:`emit` parks
the actor's greenlet until a reader catches up, so the actor stops reading
its sockets, their high-water marks fill, and TCP pushes back on the remote
senders.  While parked the actor still serves its pipe: ``$TERM`` ends it at
once (the waiting ``emit`` raises ``GreenletExit``, which unwinds the
handler as a kill would), ``$STATS`` answers, and other commands run inside
the waiting ``emit`` (so a caller can always call an actor whose events
nobody reads: a handler that emits must not hold state across ``emit`` that
a command may change, and a command's events come between the waiting
handler's; at most ``MAX_EMIT_NESTING`` deep, then commands wait in the
pipe); timers and the other sockets wait.  An actor that would
rather lose events than wait sets ``events_policy = "drop"``, or passes
``emit(..., drop=True)``: an event that finds the window full is dropped
and counted in ``$STATS`` as ``events_dropped``.  Fan-out:
:meth:`subscribe` gives each extra reader its own bounded queue, ``"block"``
(lossless, holds the actor back) or ``"drop"`` (never holds it back; counts
its losses); see :mod:`zactors.actors.events`.

An exception raised by a command handler is sent back to the caller as
:class:`CommandError` and the actor goes on.  An exception raised by a socket
or timer handler is a bug: the actor dies, emits ``$DIED``, and every call
on it then raises :class:`ActorDied`.  So does a ``BaseException`` (a
``KeyboardInterrupt``, ``SystemExit``: ``$DIED``, then gevent handles it as
ever), and a killed greenlet (``$EXIT``, or ``$DIED`` if it could not say
so): a call to an actor that is gone raises at once, never waits for room
in its pipe.
"""
from __future__ import annotations

import errno
import logging
import threading
import time
import traceback
from collections import Counter as _Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar, overload

import gevent
import zmq
from gevent import getcurrent

from .errors import ActorError, ActorExited, PipeError, WrongThread
from .events import BLOCK, DROP, POLICIES
from .reactor import DRAIN_CAP, Reactor
from .sockets import UNSAFE_OPTIONS, Socket, context
from .pipe import (DIED, ERROR, EVENTS_BYTES, EVENTS_SIZE, EXIT, FAILED, READY, REPLY, RESERVED, TERM, Event,
                   PipeEnd, decode, encode, pipe_pair)

if TYPE_CHECKING:
    from .events import Subscription
    from .reactor import Timer
    from .task import Task

__all__ = ["Actor", "command"]

_F = TypeVar("_F", bound=Callable[..., Any])

log = logging.getLogger(__name__)

_NO_REPLY, _REPLY, _DEFERRED = 0, 1, 2

# What emit does when the event window is full: send anyway (setup, teardown,
# where the parent cannot be reading), wait for room, or end the actor.
_SEND, _WAIT, _STOP = "send", "wait", "stop"

#: seconds :meth:`Actor.bind` retries an address still in use (a restarted server's port being released)
REBIND_TIMEOUT = 2.0

#: commands a parked emit serves inside one another at most (then they wait in the pipe)
MAX_EMIT_NESTING = 8


@overload
def command(verb: _F, *, reply: bool = ..., deferred: bool = ...) -> _F: ...
@overload
def command(verb: str | None = None, *, reply: bool = False, deferred: bool = False) -> Callable[[_F], _F]: ...
def command(verb: str | Callable[..., Any] | None = None, *, reply: bool = False,
            deferred: bool = False) -> Any:
    """Mark a method as the handler of a pipe command.

    ``verb`` defaults to the method name in upper case.  ``reply=True`` sends
    the return value back to the caller.  ``deferred=True`` passes a
    :class:`Reply` as the first argument, to answer later (for example when a
    network reply arrives).  Usable bare (``@command``) or called.
    """
    if callable(verb):  # bare @command
        return command()(verb)

    def mark(func: _F) -> _F:
        name = (verb or func.__name__).upper()
        if not name.replace("_", "").replace("$", "").isalnum():
            raise ValueError("command verb must be alphanumeric: %r" % name)
        func._zactors_command = (  # type: ignore[attr-defined]
            name, _DEFERRED if deferred else _REPLY if reply else _NO_REPLY)
        return func

    return mark


class Reply:
    """A pending answer to one command; call it with the value, or :meth:`error`."""

    __slots__ = ("_actor", "_request_id")

    def __init__(self, actor: Actor | None, request_id: int) -> None:
        self._actor = actor
        self._request_id = request_id

    @property
    def wanted(self) -> bool:
        """False when the caller used ``send`` and expects nothing."""
        return self._request_id != 0 and self._actor is not None

    def __call__(self, value: Any = None) -> None:
        if self.wanted:
            self._actor._to_parent(REPLY, self._request_id, (value,))  # type: ignore[union-attr]
        self._actor = None

    def error(self, exc: BaseException) -> None:
        """Answer the deferred call with ``exc``: the caller raises :class:`CommandError`."""
        if self.wanted:
            self._actor._to_parent(ERROR, self._request_id, _error_args(exc))  # type: ignore[union-attr]
        self._actor = None


def _error_args(exc):
    return (type(exc).__name__, str(exc))


class _ActorType(type):
    """Collects ``@command`` handlers and starts an actor after ``__init__``."""

    def __init__(cls, name, bases, namespace):
        super().__init__(name, bases, namespace)
        commands = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                marker = getattr(value, "_zactors_command", None)
                if marker is not None:
                    commands[marker[0]] = (attr, marker[1])
        cls._commands = commands

    def __call__(cls, *args, **kwargs):
        actor = super().__call__(*args, **kwargs)
        actor._start()
        return actor


class Actor(metaclass=_ActorType):
    """Base class of every actor.  See the module docstring."""

    #: seconds the parent waits for ``setup`` to signal ready
    ready_timeout = 30.0
    #: seconds :meth:`destroy` waits for the exit signal before killing
    term_timeout = 5.0
    #: events that may wait unread by a blocking reader before :meth:`emit` waits
    events_size = EVENTS_SIZE
    #: bytes (encoded) of events that may wait so; whichever of the two fills first
    events_bytes = EVENTS_BYTES
    #: what :meth:`emit` does when the window is full: ``"block"`` (wait) or ``"drop"``
    events_policy = BLOCK

    # -- parent side --------------------------------------------------------
    def _start(self):
        self.name = getattr(self, "name", None) or type(self).__name__
        if self.events_policy not in POLICIES:
            raise ValueError("%s: events_policy must be one of %s, not %r"
                             % (self.name, ", ".join(POLICIES), self.events_policy))
        self.stats = _Counter(rejected=0, failed=0, events_dropped=0, emit_waits=0)  # $STATS shows them from the start
        self._owner = threading.current_thread()
        self._sockets = []
        self._setup_error = None
        self._drops = self.events_policy == DROP
        self._emit_mode = _SEND
        self._emit_depth = 0
        self._commands_paused = False
        self._reactor = Reactor()
        self._inbox, incoming = pipe_pair()  # the command channel this actor reads, and its parent's
        self._inbox.notify = self._commands_arrived
        self._serve_queued = False  # a _serve_commands is posted to the reactor
        self._stopping = False  # stop() was called: serve no more commands
        self._pipe = PipeEnd(self._inbox, incoming, self.name, self.events_size, self.events_bytes)
        self._greenlet = gevent.spawn(self._run)
        self._greenlet.rawlink(self._ended)
        try:
            ok = self._pipe.wait_ready(self.ready_timeout)
        except gevent.Timeout:
            self._greenlet.kill()
            self._pipe.close()
            raise ActorError("%s did not signal ready within %ss" % (self.name, self.ready_timeout)) from None
        if not ok:
            self._greenlet.join()
            self._pipe.close()
            error = self._setup_error
            if error is not None:
                raise error
            raise ActorError("%s failed to start" % self.name)

    def _ended(self, greenlet):
        """Hub callback when the actor's greenlet is gone: calls on it fail from now on, even if it
        was killed before it could say so on the pipe."""
        error = greenlet.exception
        self._pipe.actor_ended("%s: %s" % _error_args(error) if error is not None else "killed")

    def _check_thread(self):
        """Raise :class:`WrongThread` unless called from the thread that made this actor."""
        owner = self._owner
        if threading.get_ident() != owner.ident:
            raise WrongThread(
                "%s belongs to thread %r, not %r: call it from there (its gevent hub); from another "
                "thread use %s.post(func) to run func in the actor's loop (and run blocking work with "
                "run_in_thread)" % (self.name, owner.name, threading.current_thread().name, self.name))

    def send(self, verb: str, *args: Any) -> None:
        """Send a command that wants no reply.  Safe from many greenlets.

        This and the other parent-side calls (``call``, ``recv_event``,
        ``events``, ``subscribe``, ``destroy``) raise :class:`WrongThread`
        from an OS thread other than the creator's; only :meth:`post` is
        safe across threads.
        """
        self._check_thread()
        self._pipe.send(verb, *args)

    def call(self, verb: str, *args: Any, timeout: float | None = None) -> Any:
        """Send a command and return its reply.  Safe from many greenlets.

        Raises :class:`CommandError` if the actor rejected it,
        :class:`ActorTimeout` after ``timeout`` seconds, :class:`ActorDied`
        or :class:`ActorExited` if the actor is gone.
        """
        self._check_thread()
        return self._pipe.call(verb, *args, timeout=timeout)

    def recv_event(self, timeout: float | None = None) -> Event | None:
        """The next event from the actor (``None`` on timeout)."""
        self._check_thread()
        return self._pipe.recv_event(timeout)

    def subscribe(self, size: int | None = None, policy: str = BLOCK,
                  max_bytes: int | None = None) -> Subscription:
        """Another reader of this actor's events: a :class:`~zactors.actors.events.Subscription`.

        It gets every event that reaches the parent from now on, in order,
        in a queue of ``size`` events and ``max_bytes`` bytes (defaults:
        ``events_size``, ``events_bytes``).  ``policy="block"``
        is lossless and holds the actor back while the queue is full;
        ``"drop"`` never does, and counts what it loses in ``dropped``.
        ``close()`` it when done.  Same thread as the actor's parent only.
        """
        self._check_thread()
        return self._pipe.subscribe(size, policy, max_bytes)

    def events(self, timeout: float | None = None) -> Iterator[Event]:
        """Iterate over events until the actor ends or ``timeout`` passes with none."""
        self._check_thread()
        while True:
            try:
                event = self._pipe.recv_event(timeout)
            except ActorError:
                return
            if event is None:
                return
            yield event

    @property
    def alive(self) -> bool:
        return self._greenlet is not None and not self._greenlet.dead

    def destroy(self, timeout: float | None = None) -> None:
        """Stop the actor, wait for its exit, close its pipe.  Idempotent."""
        greenlet = getattr(self, "_greenlet", None)
        if greenlet is None:
            return
        self._check_thread()
        if not greenlet.dead:
            if not self._inbox.put(encode(TERM)):
                self._reactor.stop()  # the pipe is full (the actor is not reading it): same thread, stop it directly
            # An emit parked for room ends the actor now, even one not serving its pipe.
            if self._emit_mode is _WAIT:
                self._emit_mode = _STOP
            self._pipe.wake()
            greenlet.join(self.term_timeout if timeout is None else timeout)
            if not greenlet.dead:
                log.warning("%s ignored $TERM; killing it", self.name)
                greenlet.kill()
        self._pipe.close()

    close = destroy

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def __repr__(self) -> str:
        state = "alive" if self.alive else "stopped"
        return "<%s %s %s>" % (type(self).__name__, getattr(self, "name", "?"), state)

    # -- actor side: to override --------------------------------------------
    def setup(self) -> None:
        """Make sockets, readers and timers.  Runs in the actor greenlet."""

    def teardown(self) -> None:
        """Last words before the sockets close.  Runs in the actor greenlet."""

    def on_unknown(self, verb: str, args: Sequence[Any]) -> None:
        """A command with no handler arrived (default: log and count)."""
        log.warning("%s: unknown command %r rejected", self.name, verb)

    # -- actor side: tools --------------------------------------------------
    def socket(self, socket_type: int, **options: Any) -> Socket:
        """A socket owned by this actor, closed with linger 0 when it ends.

        ``options`` are socket options by name, e.g. ``socket(zmq.ROUTER,
        router_mandatory=1)``; those a peer could turn against the process
        (:data:`~zactors.actors.sockets.UNSAFE_OPTIONS`) raise ValueError.
        """
        for name in options:
            if name in UNSAFE_OPTIONS:
                raise ValueError("%s: socket option %s refused: %s" % (self.name, name, UNSAFE_OPTIONS[name]))
        sock = context().socket(socket_type, socket_class=Socket)
        sock.linger = 0
        for name, value in options.items():
            setattr(sock, name, value)
        self._sockets.append(sock)
        return sock  # type: ignore[return-value]  # socket_class=Socket

    def close_socket(self, sock: Socket, linger: float = 0) -> None:
        """Stop reading and close one of this actor's sockets now.

        ``linger`` (seconds) lets queued messages (a goodbye, say) leave first.
        """
        self._reactor.remove_reader(sock)
        if sock in self._sockets:
            self._sockets.remove(sock)
        sock.close(int(linger * 1000))

    def pause_commands(self) -> None:
        """Stop reading the pipe: the parent's calls queue up, then its senders block."""
        self._commands_paused = True

    def resume_commands(self) -> None:
        """Read the pipe again (queued commands are handled at once)."""
        self._commands_paused = False
        self._commands_arrived()

    def add_reader(self, sock: Socket, handler: Callable[[list[Any]], object], copy: bool = True) -> None:
        """Call ``handler(frames)`` for each message on ``sock`` (``zmq.Frame`` objects with
        their message properties when ``copy=False``: see :meth:`.Reactor.add_reader`).  A message
        over ``sock``'s bounds (:func:`.sockets.limit_size`) counts in ``stats["multipart_refused"]``."""
        stats = self.stats

        def refused():
            stats["multipart_refused"] += 1

        self._reactor.add_reader(sock, handler, copy, refused)

    def remove_reader(self, sock: Socket) -> None:
        """Stop calling the handler of ``sock`` (safe from inside a handler)."""
        self._reactor.remove_reader(sock)

    def add_fd(self, fd: int, handler: Callable[[], object]) -> None:
        """Call ``handler()`` when a plain file descriptor (a UDP socket, say) is readable."""
        self._reactor.add_fd(fd, handler)

    def remove_fd(self, fd: int) -> None:
        """Stop watching the file descriptor ``fd``."""
        self._reactor.remove_fd(fd)

    def call_later(self, delay: float, handler: Callable[..., object], *args: Any) -> Timer:
        """Run ``handler(*args)`` once after ``delay`` seconds; returns a Timer."""
        return self._reactor.call_later(delay, handler, *args)

    def call_every(self, interval: float, handler: Callable[..., object], *args: Any) -> Timer:
        """Run ``handler(*args)`` every ``interval`` seconds; returns a Timer."""
        return self._reactor.call_every(interval, handler, *args)

    def start_task(self, work: Iterator[Any],
                   on_done: Callable[[Task], object] | None = None) -> Task:
        """Run the generator ``work`` as a cooperative task in this actor's loop.

        The loop advances it a bounded slice per round, after the sockets,
        the pipe and the timers, so they keep flowing during long work.
        ``on_done(task)`` runs in the loop when it ends (``task.error``,
        ``task.result``, ``task.cancelled``); an exception in a task without
        ``on_done`` kills the actor, as in a handler.  Returns the
        :class:`~zactors.actors.task.Task` (``cancel``, ``pause``, ``resume``, ``done``).
        """
        return self._reactor.start_task(work, on_done)

    def post(self, func: Callable[..., object], *args: Any) -> None:
        """Run ``func(*args)`` in this actor's loop.  Safe from any thread; never blocks.

        An exception from ``func`` kills the actor, as in a handler.
        """
        self._reactor.post(func, *args)

    def run_in_thread(self, func: Callable[..., Any], *args: Any,
                      on_done: Callable[[Any, BaseException | None], object] | None = None) -> None:
        """Run a blocking call (a file write, ``fsync``, a cold read) on the hub's threadpool.

        ``on_done(result, error)`` runs back in this actor's loop.  Without
        ``on_done`` an exception kills the actor.  Call it from the actor's loop.
        """
        self._reactor.run_in_thread(func, *args, on_done=on_done)

    def emit(self, name: str, *args: Any, drop: bool | None = None) -> bool:
        """Send the event ``name(*args)`` to the parent; False if it was dropped.

        Blocks (parks the actor's greenlet) while the event window is full
        (``events_size`` events or ``events_bytes`` bytes unread by a blocking
        reader), serving the pipe meanwhile: see the module docstring.  ``drop=True`` drops the event instead when the window is
        full (counted in ``$STATS`` as ``events_dropped``); the default is the
        actor's ``events_policy``.  Once the actor is told to stop, an emit
        that would wait raises ``GreenletExit``.  Never waits in ``setup``,
        ``teardown`` or a hub callback.  ``name`` must not be a pipe verb
        (``$REPLY``, ``$EXIT``, ...).
        """
        if name in RESERVED:
            raise ValueError("%s: %r is a pipe verb, not an event name" % (self.name, name))
        pipe = self._pipe
        mode = self._emit_mode
        drops = self._drops if drop is None else drop
        if mode is not _SEND and (drops or mode is _STOP) and pipe.full():
            if drops:
                self.stats["events_dropped"] += 1
                return False
            raise gevent.GreenletExit
        # A blocking emit sends first and then waits, so events emitted by
        # commands served while it waits follow it in order.
        pipe.bytes_in_flight += self._to_parent(name, 0, args)
        pipe.in_flight += 1
        if mode is _WAIT and not drops and pipe.full():
            self._wait_for_room(pipe)
        return True

    def link(self, on_event: Callable[[Event], object]) -> None:
        """Also hand each of this actor's events to ``on_event(event)``, as they arrive.

        Parent side; one link per actor.  ``on_event`` runs in the hub and
        must not block (``Actor.post`` to another actor's loop is the way
        out).  Its last call is the ``$EXIT``/``$DIED`` event, at once if the
        actor has ended already.  The event queues are unchanged (read the
        default one, or the actor is held back once it is full, as ever).
        How a :class:`~zactors.actors.supervisor.Supervisor` learns that a
        child ended.
        """
        pipe = self._pipe
        pipe._on_event = on_event
        end = pipe._end
        if end is not None:
            on_event(Event(EXIT if isinstance(end, ActorExited) else DIED, (str(end),)))

    def bind(self, sock: Socket, endpoint: str, timeout: float = REBIND_TIMEOUT) -> str:
        """Bind ``sock`` to ``endpoint``, retrying while the address is in use; returns the bound endpoint.

        A server restarted in the same process rebinds the endpoint its
        previous incarnation closed (linger 0), but libzmq releases the
        listening port a moment later, in its I/O thread: the bind retries
        on ``EADDRINUSE`` for up to ``timeout`` seconds (parking only this
        greenlet), then raises the ``zmq.ZMQError``.
        """
        delay = 0.001
        deadline = time.monotonic() + timeout
        while True:
            try:
                sock.bind(endpoint)
                return sock.last_endpoint.decode()  # type: ignore[union-attr]  # bytes
            except zmq.ZMQError as exc:
                if exc.errno != errno.EADDRINUSE or time.monotonic() + delay > deadline:
                    raise
            self.stats["rebind_retries"] += 1
            gevent.sleep(delay)
            delay = min(delay * 2, 0.05)

    def watch(self, child: Actor, on_event: Callable[[Event], object]) -> None:
        """Drive a child actor's pipe from this actor's loop.

        ``on_event(event)`` then runs in this actor's greenlet, and
        ``child.call`` must be made from it too.
        """
        child._pipe.attach(self._reactor, on_event)

    def stop(self) -> None:
        """End this actor from inside
 (the parent sees ``$EXIT``)."""
        if self._emit_mode is _WAIT:
            self._emit_mode = _STOP
        self._stopping = True
        self._reactor.stop()

    # -- actor side: machinery ----------------------------------------------
    def _to_parent(self, verb, request_id, args):
        """Send one message to the parent; returns its size in bytes."""
        frame = encode(verb, request_id, args)
        incoming = self._pipe.incoming
        if not incoming.put(frame):  # the pipe is at its HWM: wait for room (only this actor waits)
            incoming.send(frame)
        return len(frame)

    def _commands_arrived(self):
        """The command channel turned non-empty (or commands resumed): have the loop serve it."""
        if not self._serve_queued and not self._commands_paused:
            self._serve_queued = True
            self._reactor.post(self._serve_commands)

    def _serve_commands(self):
        """The loop's turn for the pipe: up to ``DRAIN_CAP`` commands, then the other work."""
        self._serve_queued = False
        commands = self._inbox
        for _ in range(DRAIN_CAP):
            if self._commands_paused or self._stopping:
                return
            frame = commands.get()
            if frame is None:
                return
            self._on_pipe(frame)
        self._commands_arrived()  # more may wait: another turn, after the sockets and timers

    def _wait_for_room(self, pipe):
        """Park until the event window has room, serving the pipe meanwhile (the event is sent already)."""
        current = getcurrent()
        if current is pipe._hub:  # a hub callback cannot wait
            return
        self.stats["emit_waits"] += 1
        commands = self._inbox
        serve = (current is self._greenlet and not self._commands_paused
                 and self._emit_depth < MAX_EMIT_NESTING)
        self._emit_depth += 1
        try:
            while pipe.full():
                if self._emit_mode is not _WAIT:
                    if self._emit_mode is _STOP:
                        raise gevent.GreenletExit
                    return
                if pipe.closed:
                    return
                if serve:
                    frame = commands.get()
                    if frame is not None:
                        self._on_pipe(frame)  # $TERM sets _STOP; commands run nested here
                        continue
                pipe.park(commands if serve else None)
        finally:
            self._emit_depth -= 1
            if len(commands):  # commands that came while we waited woke us, not the loop
                self._commands_arrived()

    def _run(self):
        error = None
        started = False
        try:
            self.setup()
            started = True
            self._commands_arrived()  # commands sent while setup ran
            self._emit_mode = _WAIT
            self._to_parent(READY, 0, ())
            self._reactor.run()
        except gevent.GreenletExit:
            pass
        except Exception as exc:
            error = exc
            if not started:
                self._setup_error = exc
            else:
                if log.isEnabledFor(logging.ERROR):  # formatting a traceback costs ~0.4 ms: not for nothing
                    log.error("%s died: %s", self.name, "".join(traceback.format_exception(exc)).rstrip())
        except BaseException as exc:  # (KeyboardInterrupt, SystemExit...): $DIED, then on to gevent
            error = exc
            raise
        finally:
            self._emit_mode = _SEND  # last words: the parent may be gone, never wait
            try:
                self.teardown()
            except Exception:
                log.exception("%s: teardown failed", self.name)
            self._reactor.close()
            for sock in self._sockets:
                sock.close(0)
            self._sockets.clear()
            try:
                if not started:
                    self._to_parent(FAILED, 0, ())
                elif error is not None:
                    self._to_parent(DIED, 0, ("%s: %s" % _error_args(error),))
                else:
                    self._to_parent(EXIT, 0, ())
            except zmq.ZMQError:
                pass
            self._inbox.close()

    def _on_pipe(self, frame):
        try:
            verb, request_id, args = decode(frame)
        except PipeError as exc:
            self.stats["rejected"] += 1
            log.warning("%s: %s", self.name, exc)
            return
        if verb == TERM:
            self.stop()
            return
        if verb == "$STATS":
            if request_id:
                self._to_parent(REPLY, request_id, (dict(self.stats),))
            return
        entry = self._commands.get(verb)
        if entry is None:
            self.stats["rejected"] += 1
            self.on_unknown(verb, args)
            if request_id:
                self._to_parent(ERROR, request_id, ("UnknownCommand", "%s has no command %s" % (self.name, verb)))
            return
        attr, mode = entry
        handler = getattr(self, attr)
        try:
            if mode == _DEFERRED:
                handler(Reply(self, request_id), *args)
                return
            result = handler(*args)
        except Exception as exc:
            self.stats["failed"] += 1
            log.debug("%s: command %s failed: %s", self.name, verb, exc)
            if request_id:
                self._to_parent(ERROR, request_id, _error_args(exc))
            return
        if request_id:
            self._to_parent(REPLY, request_id, (result if mode == _REPLY else None,))
