"""The reactor: owned sockets and timers in one greenlet, with fast waits.

A socket here is a plain (not ``zmq.green``) pyzmq socket owned by exactly one
greenlet.  It is used with ``NOBLOCK``; when ``EVENTS`` says it is not ready
the greenlet waits on the socket's ``ZMQ_FD`` through a gevent io watcher.
``ZMQ_FD`` is edge-triggered, so every wait re-checks ``EVENTS`` first and a
reactor drains each socket until no message is waiting (or a fairness cap
is hit) before it waits again.  Per-message calls go through
:mod:`actors.speedups` (C when built): pyzmq's own layers cost several
times what libzmq does.

Nothing in this module is safe across OS threads: a socket and a reactor
belong to the greenlet (and so the thread) that uses them.
"""
import heapq
import itertools
import logging
import time

import gevent
import zmq
from gevent import getcurrent
from gevent.hub import Waiter, get_hub

from .speedups import NOBLOCK, SNDMORE, events as _events, handle as _handle, recv_message, send_message

__all__ = ["Socket", "Reactor", "Timer", "context", "raw_send", "DRAIN_CAP"]

log = logging.getLogger(__name__)

# Plain ints (NOBLOCK and SNDMORE too, from .speedups): the IntFlag arithmetic
# of pyzmq's enums costs microseconds per call.
POLLIN = 1
POLLOUT = 2

#: messages drained from one socket before the reactor yields to other greenlets
DRAIN_CAP = 64

#: ``raw_send(sock, data, flags, copy)``: pyzmq's Cython send without the
#: Python wrapper (its draft ``routing_id``/``group`` handling costs ~0.5 us).
raw_send = zmq.backend.Socket.send

_monotonic = time.monotonic


#: sockets one context may hold (libzmq's default of 1023 is about 300 actors)
MAX_SOCKETS = 65536

_context = None


def context():
    """The process-wide plain ``zmq.Context`` whose sockets zactors owns.

    It is ``zmq.Context.instance()``, with ``MAX_SOCKETS`` raised from
    libzmq's default of 1023 before its first socket when zactors creates it.
    """
    global _context
    ctx = zmq.Context.instance()
    if ctx is not _context:
        try:
            limit = min(MAX_SOCKETS, ctx.get(zmq.SOCKET_LIMIT))
            if ctx.get(zmq.MAX_SOCKETS) < limit:
                ctx.set(zmq.MAX_SOCKETS, limit)
        except zmq.ZMQError:  # sockets exist already: the limit is fixed
            pass
        _context = ctx
    return ctx


class Socket(zmq.Socket):
    """A pyzmq socket with greenlet-friendly blocking calls.

    Blocking ``send_multipart``/``recv_multipart``/``wait`` park only the
    calling greenlet.  Use one socket from one greenlet at a time.
    ``timeout`` is in seconds; on expiry ``zmq.Again`` is raised.
    """

    _fd_watchers = None
    #: what :mod:`actors.speedups` calls take beside the socket (its address)
    handle = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.handle = _handle(self)

    def events(self):
        """``ZMQ_EVENTS``, cheaply."""
        return _events(self, self.handle)

    def _watcher(self):
        watchers = self._fd_watchers
        if watchers is None:
            hub = get_hub()
            fd = self.getsockopt(zmq.FD)
            # ZMQ_FD only ever signals readable, whatever event we wait for.
            watchers = self._fd_watchers = hub.loop.io(fd, 1)
        return watchers

    def ready(self, events=POLLIN):
        """True when ``EVENTS`` has any of ``events`` (and so a call will not block)."""
        return bool(_events(self, self.handle) & events)

    def wait(self, events=POLLIN, timeout=None):
        """Park this greenlet until ``events`` are ready; False on timeout."""
        if _events(self, self.handle) & events:
            return True
        watcher = self._watcher()
        if watcher.active:  # another greenlet waits on this socket too: use a watcher of our own
            temporary = watcher = get_hub().loop.io(self.getsockopt(zmq.FD), 1)
        else:
            temporary = None
        try:
            return self._wait(watcher, events, timeout)
        finally:
            if temporary is not None:
                temporary.close()

    def _wait(self, watcher, events, timeout):
        deadline = None if timeout is None else _monotonic() + timeout
        hub = get_hub()
        while True:
            waiter = Waiter()
            timer = None
            if deadline is not None:
                remaining = deadline - _monotonic()
                if remaining <= 0:
                    return False
                timer = hub.loop.timer(remaining)
                # update: libev's cached "now" may be stale after busy work,
                # which would fire the timer early.
                timer.start(waiter.switch, None, update=True)
            watcher.start(waiter.switch, None)
            try:
                waiter.get()
            finally:
                watcher.stop()
                if timer is not None:
                    timer.close()
            # Edge-triggered: the FD firing only means "look at EVENTS again";
            # a timer firing is checked against the deadline at the top.
            if _events(self, self.handle) & events:
                return True

    def send_multipart(self, frames, flags=0, copy=True, track=False, timeout=None):
        """Send all frames; parks the greenlet while the peer is at its HWM."""
        if flags & NOBLOCK:
            return self._send_frames(frames, copy)
        while True:
            try:
                return self._send_frames(frames, copy)
            except zmq.Again:
                if not self.wait(POLLOUT, timeout):
                    raise

    def _send_frames(self, frames, copy=True):
        if copy:
            return send_message(self, self.handle, frames)
        # Zero-copy, as pyzmq's copy=False.  The first frame decides whether the
        # whole message is accepted: the following ones never return EAGAIN.
        last = len(frames) - 1
        for i, frame in enumerate(frames):
            raw_send(self, frame, NOBLOCK if i == last else NOBLOCK | SNDMORE, copy)

    def recv_multipart(self, flags=0, copy=True, track=False, timeout=None):
        """Receive one whole message; parks the greenlet until one arrives."""
        while True:
            try:
                return self.recv_frames(copy)
            except zmq.Again:
                if flags & NOBLOCK or not self.wait(POLLIN, timeout):
                    raise

    def recv_frames(self, copy=True):
        """Receive one whole message without blocking (``zmq.Again`` if none)."""
        if copy:
            frames = recv_message(self, self.handle)
            if frames is None:
                raise zmq.Again()
            return frames
        recv = self.recv  # zmq.Frame objects, as pyzmq's copy=False gives
        frame = recv(NOBLOCK, copy=False)
        frames = [frame]
        while frame.more:
            frame = recv(NOBLOCK, copy=False)
            frames.append(frame)
        return frames

    def close(self, linger=None):
        watcher = self._fd_watchers
        if watcher is not None:
            watcher.close()
            self._fd_watchers = None
        super().close(linger)


class Timer:
    """A reactor timer; ``cancel()`` it to stop.  Not for direct construction."""

    __slots__ = ("deadline", "interval", "handler", "args", "cancelled")

    def __init__(self, deadline, interval, handler, args):
        self.deadline = deadline
        self.interval = interval
        self.handler = handler
        self.args = args
        self.cancelled = False

    def cancel(self):
        self.cancelled = True


class _Reader:
    __slots__ = ("socket", "handler", "watcher", "removed")

    def __init__(self, socket, handler, watcher):
        self.socket = socket
        self.handler = handler
        self.watcher = watcher
        self.removed = False


class _FdReader:
    __slots__ = ("fd", "handler", "watcher", "ready")

    def __init__(self, fd, handler, watcher):
        self.fd = fd
        self.handler = handler
        self.watcher = watcher
        self.ready = False


class Reactor:
    """Run socket handlers and timers in the calling greenlet.

    ``handler(frames)`` is called for every whole message that arrives on a
    registered socket; ``handler(*args)`` for timers.  The wait between rounds
    is bounded by the nearest timer deadline (monotonic clock).  A handler
    that raises stops the reactor and the exception propagates out of
    :meth:`run`.
    """

    def __init__(self, drain_cap=DRAIN_CAP):
        self._readers = []
        self._fds = []
        self._timers = []  # heap of (deadline, seq, Timer)
        self._seq = itertools.count()
        self._waiter = None
        self._running = False
        self._fresh = False
        self.drain_cap = drain_cap

    # -- registration -------------------------------------------------------
    def add_reader(self, socket, handler):
        """Call ``handler(frames)`` for each message on ``socket``."""
        if not isinstance(socket, Socket):
            raise TypeError("reactor sockets must be zactors.actors.loop.Socket, "
                            "created with Actor.socket() or context().socket(type, Socket)")
        self.remove_reader(socket)
        watcher = get_hub().loop.io(socket.getsockopt(zmq.FD), 1)
        watcher.start(self._wake)
        self._readers.append(_Reader(socket, handler, watcher))
        # Messages may wait already, their ZMQ_FD edge long gone: go round once.
        self._fresh = True
        self._wake()

    def remove_reader(self, socket):
        for reader in self._readers:
            if reader.socket is socket:
                reader.removed = True  # a handler may remove (and close) mid-drain
                reader.watcher.close()
                self._readers.remove(reader)
                return True
        return False

    def add_fd(self, fd, handler):
        """Call ``handler()`` when the plain file descriptor ``fd`` is readable.

        For non-ZeroMQ sockets (UDP, pipes).  Level-triggered: whatever the
        handler leaves unread wakes it again on the next round.
        """
        self.remove_fd(fd)
        watcher = get_hub().loop.io(fd, 1)
        entry = _FdReader(fd, handler, watcher)
        watcher.start(self._fd_ready, entry)
        self._fds.append(entry)

    def remove_fd(self, fd):
        for entry in self._fds:
            if entry.fd == fd:
                entry.watcher.close()
                self._fds.remove(entry)
                return True
        return False

    def _fd_ready(self, entry):
        entry.ready = True
        self._wake()

    def call_later(self, delay, handler, *args):
        """Run ``handler(*args)`` once after ``delay`` seconds."""
        return self._push(Timer(_monotonic() + delay, None, handler, args))

    def call_every(self, interval, handler, *args):
        """Run ``handler(*args)`` every ``interval`` seconds (first after one interval)."""
        if interval <= 0:
            raise ValueError("interval must be positive")
        return self._push(Timer(_monotonic() + interval, interval, handler, args))

    def _push(self, timer):
        heapq.heappush(self._timers, (timer.deadline, next(self._seq), timer))
        self._wake()
        return timer

    # -- running ------------------------------------------------------------
    def stop(self):
        """Make :meth:`run` return after the current handler."""
        self._running = False
        self._wake()

    def _wake(self, *_):
        waiter = self._waiter
        if waiter is not None:
            hub = get_hub()
            if getcurrent() is not hub:
                # Waiter.switch is for the hub only; let it do the waking.
                hub.loop.run_callback(self._wake)
                return
            self._waiter = None
            waiter.switch(None)

    def run(self):
        """Serve sockets and timers until :meth:`stop`."""
        self._running = True
        cap = self.drain_cap
        hub = get_hub()
        try:
            while self._running:
                busy = False
                self._fresh = False
                for reader in tuple(self._readers):
                    if reader.removed:
                        continue
                    # Drain to "none waiting" (that also re-reads the FD edge a
                    # handler's send may have consumed), at most `cap` a round.
                    sock = reader.socket
                    handle = sock.handle
                    handler = reader.handler
                    n = 0
                    while True:
                        frames = recv_message(sock, handle)
                        if frames is None:
                            break
                        handler(frames)
                        if not self._running:
                            return
                        if reader.removed:
                            break
                        n += 1
                        if n >= cap:
                            busy = True
                            break
                for entry in tuple(self._fds):
                    if entry.ready:
                        entry.ready = False
                        entry.handler()
                        if not self._running:
                            return
                timeout = self._run_timers()
                if not self._running:
                    return
                if busy or self._fresh:
                    gevent.sleep(0)
                    continue
                if timeout is not None and timeout <= 0:
                    continue
                waiter = self._waiter = Waiter()
                timer = None
                if timeout is not None:
                    timer = hub.loop.timer(timeout)
                    timer.start(self._wake, update=True)
                try:
                    waiter.get()
                finally:
                    self._waiter = None
                    if timer is not None:
                        timer.close()
        finally:
            self._running = False

    def _run_timers(self):
        """Fire due timers; return seconds until the next one (None if none)."""
        timers = self._timers
        now = _monotonic()
        while timers:
            deadline, _, timer = timers[0]
            if timer.cancelled:
                heapq.heappop(timers)
                continue
            if deadline > now:
                return deadline - now
            heapq.heappop(timers)
            if timer.interval is not None:
                # Skip missed ticks rather than bursting to catch up.
                timer.deadline = max(deadline + timer.interval, now)
                heapq.heappush(timers, (timer.deadline, next(self._seq), timer))
            else:
                timer.cancelled = True
            timer.handler(*timer.args)
            if not self._running:
                return None
            now = _monotonic()
        return None

    def close(self):
        """Release the io watchers (sockets stay open: their owner closes them)."""
        for reader in self._readers + self._fds:
            reader.watcher.close()
        self._readers.clear()
        self._fds.clear()
        self._timers.clear()
