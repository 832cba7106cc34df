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

An exception raised by a command handler is sent back to the caller as
:class:`CommandError` and the actor goes on.  An exception raised by a socket
or timer handler is a bug: the actor dies, emits ``$DIED``, and every call
on it then raises :class:`ActorDied`.
"""
import logging
import traceback
from collections import Counter as _Counter

import gevent
import zmq

from .errors import ActorError, PipeError
from .reactor import Reactor
from .sockets import NOBLOCK, Socket, context
from .pipe import DIED, ERROR, EXIT, FAILED, READY, REPLY, TERM, PipeEnd, decode, encode, pipe_pair

__all__ = ["Actor", "command"]

log = logging.getLogger(__name__)

_NO_REPLY, _REPLY, _DEFERRED = 0, 1, 2


def command(verb=None, *, reply=False, deferred=False):
    """Mark a method as the handler of a pipe command.

    ``verb`` defaults to the method name in upper case.  ``reply=True`` sends
    the return value back to the caller.  ``deferred=True`` passes a
    :class:`Reply` as the first argument, to answer later (for example when a
    network reply arrives).  Usable bare (``@command``) or called.
    """
    if callable(verb):  # bare @command
        return command()(verb)

    def mark(func):
        name = (verb or func.__name__).upper()
        if not name.replace("_", "").replace("$", "").isalnum():
            raise ValueError("command verb must be alphanumeric: %r" % name)
        func._zactors_command = (name, _DEFERRED if deferred else _REPLY if reply else _NO_REPLY)
        return func

    return mark


class Reply:
    """A pending answer to one command; call it with the value, or :meth:`error`."""

    __slots__ = ("_actor", "_request_id")

    def __init__(self, actor, request_id):
        self._actor = actor
        self._request_id = request_id

    @property
    def wanted(self):
        """False when the caller used ``send`` and expects nothing."""
        return self._request_id != 0 and self._actor is not None

    def __call__(self, value=None):
        if self.wanted:
            self._actor._to_parent(REPLY, self._request_id, (value,))
        self._actor = None

    def error(self, exc):
        if self.wanted:
            self._actor._to_parent(ERROR, self._request_id, _error_args(exc))
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

    # -- parent side --------------------------------------------------------
    def _start(self):
        self.name = getattr(self, "name", None) or type(self).__name__
        self.stats = _Counter()
        self._sockets = []
        self._setup_error = None
        self._reactor = Reactor()
        parent, self._child = pipe_pair()
        self._pipe = PipeEnd(parent, self.name)
        self._greenlet = gevent.spawn(self._run)
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

    def send(self, verb, *args):
        """Send a command that wants no reply.  Safe from many greenlets."""
        self._pipe.send(verb, *args)

    def call(self, verb, *args, timeout=None):
        """Send a command and return its reply.  Safe from many greenlets.

        Raises :class:`CommandError` if the actor rejected it,
        :class:`ActorTimeout` after ``timeout`` seconds, :class:`ActorDied`
        or :class:`ActorExited` if the actor is gone.
        """
        return self._pipe.call(verb, *args, timeout=timeout)

    def recv_event(self, timeout=None):
        """The next event from the actor (``None`` on timeout)."""
        return self._pipe.recv_event(timeout)

    def events(self, timeout=None):
        """Iterate over events until the actor ends or ``timeout`` passes with none."""
        while True:
            try:
                event = self._pipe.recv_event(timeout)
            except ActorError:
                return
            if event is None:
                return
            yield event

    @property
    def alive(self):
        return self._greenlet is not None and not self._greenlet.dead

    def destroy(self, timeout=None):
        """Stop the actor, wait for its exit, close its pipe.  Idempotent."""
        greenlet = getattr(self, "_greenlet", None)
        if greenlet is None:
            return
        if not greenlet.dead:
            try:
                self._pipe.socket.send(encode(TERM), NOBLOCK)
            except zmq.ZMQError:  # the pipe is full (the actor is not reading it): same thread, stop it directly
                self._reactor.stop()
            greenlet.join(self.term_timeout if timeout is None else timeout)
            if not greenlet.dead:
                log.warning("%s ignored $TERM; killing it", self.name)
                greenlet.kill()
        self._pipe.close()

    close = destroy

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __repr__(self):
        state = "alive" if self.alive else "stopped"
        return "<%s %s %s>" % (type(self).__name__, getattr(self, "name", "?"), state)

    # -- actor side: to override --------------------------------------------
    def setup(self):
        """Make sockets, readers and timers.  Runs in the actor greenlet."""

    def teardown(self):
        """Last words before the sockets close.  Runs in the actor greenlet."""

    def on_unknown(self, verb, args):
        """A command with no handler arrived (default: log and count)."""
        log.warning("%s: unknown command %r rejected", self.name, verb)

    # -- actor side: tools --------------------------------------------------
    def socket(self, socket_type, **options):
        """A socket owned by this actor, closed with linger 0 when it ends.

        ``options`` are socket options by name, e.g. ``socket(zmq.ROUTER,
        router_mandatory=1)``.
        """
        sock = context().socket(socket_type, socket_class=Socket)
        sock.linger = 0
        for name, value in options.items():
            setattr(sock, name, value)
        self._sockets.append(sock)
        return sock

    def close_socket(self, sock, linger=0):
        """Stop reading and close one of this actor's sockets now.

        ``linger`` (seconds) lets queued messages (a goodbye, say) leave first.
        """
        self._reactor.remove_reader(sock)
        if sock in self._sockets:
            self._sockets.remove(sock)
        sock.close(int(linger * 1000))

    def pause_commands(self):
        """Stop reading the pipe: the parent's calls queue up, then its senders block."""
        self._reactor.remove_reader(self._child)

    def resume_commands(self):
        """Read the pipe again (queued commands are handled at once)."""
        self._reactor.add_reader(self._child, self._on_pipe)

    def add_reader(self, sock, handler):
        """Call ``handler(frames)`` for each message on ``sock``."""
        self._reactor.add_reader(sock, handler)

    def remove_reader(self, sock):
        self._reactor.remove_reader(sock)

    def add_fd(self, fd, handler):
        """Call ``handler()`` when a plain file descriptor (a UDP socket, say) is readable."""
        self._reactor.add_fd(fd, handler)

    def remove_fd(self, fd):
        self._reactor.remove_fd(fd)

    def call_later(self, delay, handler, *args):
        """Run ``handler(*args)`` once after ``delay`` seconds; returns a Timer."""
        return self._reactor.call_later(delay, handler, *args)

    def call_every(self, interval, handler, *args):
        """Run ``handler(*args)`` every ``interval`` seconds; returns a Timer."""
        return self._reactor.call_every(interval, handler, *args)

    def start_task(self, work, on_done=None):
        """Run the generator ``work`` as a cooperative task in this actor's loop.

        The loop advances it a bounded slice per round, after the sockets,
        the pipe and the timers, so they keep flowing during long work.
        ``on_done(task)`` runs in the loop when it ends (``task.error``,
        ``task.result``, ``task.cancelled``); an exception in a task without
        ``on_done`` kills the actor, as in a handler.  Returns the
        :class:`~zactors.actors.task.Task` (``cancel``, ``pause``, ``resume``, ``done``).
        """
        return self._reactor.start_task(work, on_done)

    def post(self, func, *args):
        """Run ``func(*args)`` in this actor's loop.  Safe from any thread; never blocks.

        An exception from ``func`` kills the actor, as in a handler.
        """
        self._reactor.post(func, *args)

    def run_in_thread(self, func, *args, on_done=None):
        """Run a blocking call (a file write, ``fsync``, a cold read) on the hub's threadpool.

        ``on_done(result, error)`` runs back in this actor's loop.  Without
        ``on_done`` an exception kills the actor.  Call it from the actor's loop.
        """
        self._reactor.run_in_thread(func, *args, on_done=on_done)

    def emit(self, name, *args):
        """Send an event to the parent."""
        self._to_parent(name, 0, args)

    def watch(self, child, on_event):
        """Drive a child actor's pipe from this actor's loop.

        ``on_event(event)`` then runs in this actor's greenlet, and
        ``child.call`` must be made from it too.
        """
        child._pipe.attach(self._reactor, on_event)

    def stop(self):
        """End this actor from inside (the parent sees ``$EXIT``)."""
        self._reactor.stop()

    # -- actor side: machinery ----------------------------------------------
    def _to_parent(self, verb, request_id, args):
        frame = encode(verb, request_id, args)
        try:
            self._child.send(frame, NOBLOCK)
        except zmq.Again:  # the parent is behind: wait for room (only this actor waits)
            self._child.send_multipart([frame])

    def _run(self):
        error = None
        started = False
        try:
            self.setup()
            self._reactor.add_reader(self._child, self._on_pipe)
            started = True
            self._to_parent(READY, 0, ())
            self._reactor.run()
        except gevent.GreenletExit:
            pass
        except Exception as exc:
            error = exc
            if not started:
                self._setup_error = exc
            else:
                log.error("%s died: %s", self.name, "".join(traceback.format_exception(exc)).rstrip())
        finally:
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
            self._child.close(0)

    def _on_pipe(self, frames):
        if len(frames) != 1:
            self.stats["rejected"] += 1
            log.warning("%s: pipe message of %d frames rejected", self.name, len(frames))
            return
        try:
            verb, request_id, args = decode(frames[0])
        except PipeError as exc:
            self.stats["rejected"] += 1
            log.warning("%s: %s", self.name, exc)
            return
        if verb == TERM:
            self._reactor.stop()
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
