"""A ZeroMQ socket shared by OS threads and greenlets: the core of Scatter and Gather.

libzmq sockets are not thread-safe, but one may be used from several threads
when every use is separated by a full memory barrier.  :class:`SafeSocket`
takes an OS-level lock (the original ``_thread`` lock, even under
monkey-patching) around every call into the socket, and never holds it
across a blocking call or a greenlet switch: every socket call is
``NOBLOCK``.  libzmq's own thread-safe sockets do the same (a mutex around
each call).  Scatter's hot ``send`` takes the lock, sends and releases it
in one C call (:func:`~zactors.actors.speedups.send_locked`), so no other
thread can run while it is held: threads sharing a Scatter do not queue up
behind a thread preempted inside ``with lock:`` (that convoy cost a thread
switch per message, and halved the rate of four threads).

Waiting.  A caller that must block (no peer can take a message, no message
to receive) parks only its own greenlet, in its own thread's gevent hub; in
a plain thread with no gevent hub (other than the main thread) it blocks the
thread in ``poll`` instead, so no hub (and its file descriptors) is left
behind when the thread ends.  Either way it wakes on:

* the socket's ``ZMQ_FD`` turning readable (libzmq signals every state
  change there), watched by an io watcher in the waiter's hub, or polled; or
* an explicit wake-up: after any call that may have consumed that
  edge-triggered signal, the caller checks ``EVENTS`` if anyone waits and
  hands the news to every waiter, across threads through
  ``loop.run_callback_threadsafe`` (or a byte on the plain thread's pipe).

A waiter registers itself (under the lock, after checking ``EVENTS``)
before it parks, so no wake-up is lost between its check and its wait.
Woken waiters all retry; those that lose the race park again.

:meth:`close` may be called from any thread: waiters wake and raise
:class:`Closed`, and the socket itself is closed by whoever leaves it last.

Native draft sockets (thread-safe in libzmq, but without ``ZMQ_FD``): each
waiter watches instead the descriptor of its own draft ``zmq_poller`` on the
socket (:class:`~.nativepoll.WaitFd`), made when it parks and closed when it
leaves; everything else is as above.  Nothing polls on a timer, no thread
sits in between.
"""
from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Mapping
from typing import Any, Self

import zmq
# gevent has no public way to ask whether a thread has a hub without making one;
# this one has been stable since gevent 20.
from gevent._hub_local import get_hub_if_exists
from gevent.hub import Waiter, get_hub
from gevent.monkey import get_original

from zactors.actors.sockets import context
from zactors.actors.speedups import events, handle

from . import handshakes
from .nativepoll import WaitFd

__all__ = ["SafeSocket", "Closed", "EVENTS", "POLLIN", "POLLOUT", "NOBLOCK"]


_allocate_lock = get_original("_thread", "allocate_lock")
_get_ident = get_original("_thread", "get_ident")
_local = get_original("_thread", "_local")
_poll = get_original("select", "poll")
_main_ident = threading.main_thread().ident
_monotonic = time.monotonic

NOBLOCK = 1
EVENTS = 15
POLLIN = 1
POLLOUT = 2

class Closed(zmq.ZMQError):
    """The Scatter or Gather was closed (possibly by another thread)."""

    def __init__(self, what: str) -> None:
        super().__init__(errno.ENOTSOCK, "%s is closed" % what)


class _ThreadWaker:
    """A plain thread's wake-up pipe; closed when the thread ends (its local dies)."""

    __slots__ = ("read_fd", "write_fd")

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)

    def wake(self):
        try:
            os.write(self.write_fd, b"!")
        except BlockingIOError:  # full: a wake-up is pending anyway
            pass

    def clear(self):
        try:
            while os.read(self.read_fd, 64):
                pass
        except BlockingIOError:
            pass

    def __del__(self):
        os.close(self.read_fd)
        os.close(self.write_fd)


_thread_state = _local()


def _thread_waker():
    waker = getattr(_thread_state, "waker", None)
    if waker is None:
        waker = _thread_state.waker = _ThreadWaker()
    return waker


class SafeSocket:
    """One plain pyzmq socket behind a lock, with cross-thread waiting.

    All public methods are safe from any thread and any greenlet.
    """

    #: the event (POLLIN or POLLOUT) a blocked caller waits for; set by subclasses
    _wait_event = 0

    def __init__(self, socket_type: int, native: bool, linger: float | None, options: Mapping[str, Any]) -> None:
        self.native = native
        self._lock = _allocate_lock()
        self._waiters: list[tuple[Any, Any]] = []  # (hub, Waiter) of parked greenlets not yet woken
        self._parked = 0  # greenlets inside _wait: the last one out closes a closing socket
        self._closing = False
        self._linger_ms = -1 if linger is None else int(linger * 1000)
        sock = self._sock = context().socket(socket_type, socket_class=zmq.Socket)
        sock.linger = self._linger_ms
        for name, value in options.items():
            sock.set(getattr(zmq, name.upper()), value)
        self._fd = None if native else sock.get(zmq.FD)
        self._native_waits: dict[Any, WaitFd] = {}  # entry -> WaitFd of a parked caller (native sockets)
        self._handle = handle(sock)  # for the actors.speedups calls
        self._binds: set[str] = set()  # endpoints bound, to tell a refused peer's side
        #: peers refused at the handshake (:class:`~.handshakes.Refusal`, newest last): a
        #: wire mismatch (native on one side only), a refused CURVE key...
        self.refused: list[handshakes.Refusal] = []
        self._handshakes = handshakes.watch(self)  # the reader of our monitor, or None

    @property
    def wire(self) -> str:
        """The socket type on the wire: ``"SCATTER"``/``"GATHER"`` (native) or ``"PUSH"``/``"PULL"``."""
        return {zmq.PUSH: "PUSH", zmq.PULL: "PULL"}.get(self._sock.type) or (  # type: ignore[call-overload]
            "SCATTER" if self._sock.type == getattr(zmq, "SCATTER", None) else "GATHER")

    def _bound(self, endpoint):
        return endpoint in self._binds

    def _refusals(self):
        """Why a blocking call may have timed out: the latest refusals, in words ("" if none)."""
        latest = self.refused[-3:]
        if not latest:
            return ""
        return " (%d peer(s) refused at the handshake; latest: %s)" % (
            len(self.refused), "; ".join(refusal.reason for refusal in latest))

    # -- options ----------------------------------------------------------------
    def setsockopt(self, option: int, value: int | bytes) -> None:
        """Set a socket option (e.g. through :func:`actors.auth.curve_server`), before bind/connect."""
        with self._lock:
            self._check()
            self._sock.setsockopt(option, value)

    def getsockopt(self, option: int) -> int | bytes:
        with self._lock:
            self._check()
            return self._sock.getsockopt(option)

    # -- endpoints ------------------------------------------------------------
    def bind(self, endpoint: str) -> str:
        """Bind; returns the real endpoint (``tcp://127.0.0.1:*`` picks a port)."""
        with self._lock:
            self._check()
            self._sock.bind(endpoint)
            real = self._sock.get(zmq.LAST_ENDPOINT).decode()  # type: ignore[union-attr]  # bytes
            self._binds.add(real)
            return real

    def connect(self, endpoint: str) -> None:
        """Connect to a peer (its queue exists at once, connected or not)."""
        with self._lock:
            self._check()
            self._sock.connect(endpoint)

    def unbind(self, endpoint: str) -> None:
        with self._lock:
            self._check()
            self._sock.unbind(endpoint)

    def disconnect(self, endpoint: str) -> None:
        """Forget a peer; its queue and the messages in it are discarded."""
        with self._lock:
            self._check()
            self._sock.disconnect(endpoint)

    def monitor(self, endpoint: str, events: int = zmq.EVENT_ALL) -> None:
        """Publish socket events (connects, disconnects) on an inproc PAIR ``endpoint``.

        libzmq has one monitor per socket: this one replaces the built-in
        reporting of refused peers (``refused``) until :meth:`stop_monitor`.

        Beware: libzmq's I/O thread *blocks* sending an event to a reader
        that is gone or full, and with it every socket of the context.  Read
        the events, and call :meth:`stop_monitor` before closing the reader.
        """
        with self._lock:
            self._check()
            if self._handshakes is not None:
                handshakes.unwatch(self, self._handshakes)
                self._handshakes = None
            self._sock.monitor(endpoint, events)

    def stop_monitor(self) -> None:
        """Stop publishing socket events (before the reader of the events goes away)."""
        with self._lock:
            if not self._closing:
                self._sock.disable_monitor()
                if self._handshakes is None:
                    self._handshakes = handshakes.watch(self)

    # -- closing --------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closing

    def close(self) -> None:

        """Close from any thread; waiters raise :class:`Closed`.  Idempotent.

        Queued outgoing messages are flushed for up to ``linger`` seconds.
        """
        with self._lock:
            if self._closing:
                return
            self._closing = True
            if self._handshakes is not None:
                handshakes.unwatch(self, self._handshakes)
                self._handshakes = None
            self._wake_all()
            if not self._parked:
                self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self):
        if self._closing:
            raise Closed(type(self).__name__)

    # -- waiting (called without the lock) --------------------------------------
    def _wait(self, deadline):
        """Park until :meth:`_ready` may be true; False once ``deadline`` has passed."""
        if deadline is not None and _monotonic() >= deadline:
            return False
        hub = get_hub_if_exists()
        if hub is None:
            if _get_ident() != _main_ident:
                return self._thread_wait(deadline)
            hub = get_hub()
        waiter = Waiter(hub)
        entry = (hub, waiter)
        fd = self._park(entry)
        if fd is None:
            return True
        watcher = timer = None
        try:
            loop = hub.loop
            watcher = loop.io(fd, 1)
            watcher.start(waiter.switch, True)
            if deadline is not None:
                timer = loop.timer(max(0.0, deadline - _monotonic()))
                timer.start(waiter.switch, False)
            waiter.get()
        finally:
            if watcher is not None:
                watcher.close()
            if timer is not None:
                timer.close()
            self._unpark(entry)
        self._check()
        return True

    def _thread_wait(self, deadline):
        """:meth:`_wait` for a plain thread: block it in ``poll``, no gevent hub."""
        waker = _thread_waker()
        entry = (None, waker)
        fd = self._park(entry)
        if fd is None:
            return True
        try:
            poller = _poll()
            poller.register(fd, 1)
            poller.register(waker.read_fd, 1)
            timeout = None if deadline is None else max(0, int((deadline - _monotonic()) * 1000 + 1))
            poller.poll(timeout)
            waker.clear()
        finally:
            self._unpark(entry)
        self._check()
        return True

    def _park(self, entry):
        """Register a waiter; the descriptor to watch, or None when a call could go on already."""
        with self._lock:
            self._check()
            if self._ready():
                return None
            fd = self._fd
            if fd is None:  # native: a poller of our own, checked once more now that it listens
                wait = WaitFd(self._handle, self._wait_event)
                if wait.ready():
                    wait.close()
                    return None
                self._native_waits[entry] = wait
                fd = wait.fd
            self._waiters.append(entry)
            self._parked += 1
        return fd

    def _unpark(self, entry):
        """Forget a waiter; the last one out of a closing socket closes it."""
        with self._lock:
            try:
                self._waiters.remove(entry)
            except ValueError:  # a waker took it already
                pass
            if self._fd is None:
                self._native_waits.pop(entry).close()
            self._parked -= 1
            if self._closing and not self._parked:
                self._sock.close()

    # -- waking (called with the lock held) --------------------------------------
    def _ready(self):
        """True when a blocked call could now go on (lock held)."""
        raise NotImplementedError

    def _events(self):
        """The socket's ``ZMQ_EVENTS`` (lock held)."""
        return events(self._sock, self._handle)

    def _wake_if_ready(self):
        """Wake every waiter if a call could go on (we may have eaten the FD edge)."""
        if self._ready():
            self._wake_all()

    def _wake_all(self):
        waiters = self._waiters
        if not waiters:
            return
        ident = _get_ident()
        for hub, waiter in waiters:
            if hub is None:  # a plain thread blocked in poll
                waiter.wake()
            elif hub.thread_ident == ident:
                hub.loop.run_callback(waiter.switch, True)
            else:  # another thread's hub: wake its loop
                hub.loop.run_callback_threadsafe(waiter.switch, True)
        del waiters[:]
