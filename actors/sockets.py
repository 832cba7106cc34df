"""Owned sockets: plain pyzmq sockets with fast greenlet waits.

A socket here is a plain (not ``zmq.green``) pyzmq socket owned by exactly one
greenlet.  It is used with ``NOBLOCK``; when ``EVENTS`` says it is not ready
the greenlet waits on the socket's ``ZMQ_FD`` through a gevent io watcher.
``ZMQ_FD`` is edge-triggered, so every wait re-checks ``EVENTS`` first and a
reactor drains each socket until no message is waiting (or a fairness cap
is hit) before it waits again (see :mod:`zactors.actors.reactor`).  Per-message calls go through
:mod:`zactors.actors.speedups` (C when built): pyzmq's own layers cost several
times what libzmq does.

Nothing in this module is safe across OS threads: a socket belongs to the
greenlet (and so the thread) that uses it.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Literal, overload

import zmq
from gevent.hub import Waiter, get_hub

from .speedups import NOBLOCK, SNDMORE, UNBOUNDED, _skip_some, buffers, events as _events, handle as _handle, recv_message, send_frames, send_message

__all__ = ["Socket", "context", "limit_size", "raise_open_files", "raw_send", "KEEPALIVE", "UNSAFE_OPTIONS",
           "POLLIN", "POLLOUT", "NOBLOCK", "SNDMORE"]

log = logging.getLogger(__name__)

# Plain ints (NOBLOCK and SNDMORE too, from .speedups): the IntFlag arithmetic
# of pyzmq's enums costs microseconds per call.
POLLIN = 1
POLLOUT = 2

#: ``raw_send(sock, data, flags, copy)``: pyzmq's Cython send without the
#: Python wrapper (its draft ``routing_id``/``group`` handling costs ~0.5 us).
raw_send = zmq.backend.Socket.send

_monotonic = time.monotonic


#: sockets one context may hold (libzmq's default of 1023 is about 300 actors)
MAX_SOCKETS = 65536

_context = None


#: open files wanted when the hard limit is unlimited (Linux's default nr_open)
OPEN_FILES = 1 << 20


def context() -> zmq.Context[zmq.Socket[bytes]]:
    """The process-wide plain ``zmq.Context`` whose sockets zactors owns.

    It is ``zmq.Context.instance()``, with ``MAX_SOCKETS`` raised from
    libzmq's default of 1023 before its first socket when zactors creates it,
    and the process's soft ``RLIMIT_NOFILE`` raised toward its hard limit
    (every socket takes a descriptor, every connection another).
    """
    global _context
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    if ctx is not _context:
        try:
            limit = min(MAX_SOCKETS, ctx.get(zmq.SOCKET_LIMIT))
            if ctx.get(zmq.MAX_SOCKETS) < limit:
                ctx.set(zmq.MAX_SOCKETS, limit)
        except zmq.ZMQError:  # sockets exist already: the limit is fixed
            pass
        raise_open_files()
        _context = ctx
    return ctx


def raise_open_files() -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; log when it cannot.

    Returns the soft limit in force afterwards (None where there is no such
    limit).  Only ever raises the limit, never lowers it.
    """
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as exc:
            log.warning("zactors: cannot raise the open-file limit from %d to %d (%s): "
                        "about %d sockets and connections at most", soft, wanted, exc, soft)
    if soft != resource.RLIM_INFINITY and soft < MAX_SOCKETS:
        log.debug("zactors: the open-file limit is %d (hard limit %s): fewer sockets than libzmq's %d may open",
                 soft, hard, MAX_SOCKETS)
    return soft


#: Socket options that notice a peer whose host vanished (no FIN) in about 5 s: TCP keepalive, which
#: the kernel runs.  Not ZMTP heartbeats (``heartbeat_ivl``): with them libzmq 4.3.5 aborts the whole
#: process ("Assertion failed: !_io_error (stream_engine_base.cpp:310)") when a connection whose input
#: is stopped (its pipe full, or taken over by ``router_handover``) is reset by its peer: the
#: heartbeat timer writes on an engine already in error (issue #20; tests/patterns/clone/test_libzmq_abort.py).
KEEPALIVE = {"tcp_keepalive": 1, "tcp_keepalive_idle": 1, "tcp_keepalive_intvl": 1, "tcp_keepalive_cnt": 4}

#: options :meth:`~zactors.actors.actor.Actor.socket` refuses, and why (any peer can trip them)
UNSAFE_OPTIONS = {
    "heartbeat_ivl": "ZMTP heartbeats let a peer abort the process (libzmq 4.3.5, stream_engine_base.cpp:310): "
                     "use KEEPALIVE (TCP keepalive) and the pattern's own heartbeats",
}


def limit_size(sock: zmq.Socket, limit: int | None, frames: int | None = None, total: int | None = None) -> None:
    """Refuse frames over ``limit`` bytes from ``sock``'s network peers (``ZMQ_MAXMSGSIZE``), and
    messages of more than ``frames`` frames or ``total`` bytes in all.

    libzmq reads each frame's size from its header before it allocates the
    frame, and closes the connection of a peer that announces a larger one:
    nothing of it is read, so a huge frame costs no memory (the socket's
    monitor sees a DISCONNECTED; :class:`~zactors.actors.router.Router`
    counts them).  That limit is per frame.  Every socket that faces the
    network gets one, derived from its protocol's own limits; ``None`` lifts
    it (inproc pipes, which libzmq never checks).  Set it before
    ``bind``/``connect``: connections made earlier keep the limit they had.

    ``frames`` (and ``total``, default ``frames * limit``) bound a whole
    message, for a :class:`Socket` an actor reads (the reactor): one over
    them is dropped frame by frame, never copied, and counted in the
    actor's ``stats["multipart_refused"]``.  (libzmq itself holds a message
    until its last frame has come, in its pipe, whatever the pipe's HWM: a
    peer that never ends one holds that memory until it disconnects.)
    """
    if limit is not None and limit < 1:
        raise ValueError("a message size limit must be at least 1 byte, not %r" % (limit,))
    sock.setsockopt(zmq.MAXMSGSIZE, -1 if limit is None else int(limit))
    if frames is not None:
        if frames < 1:
            raise ValueError("a message has at least 1 frame, not %r" % (frames,))
        if total is None:
            total = frames * limit if limit is not None else _UNBOUNDED
        sock.max_frames, sock.max_bytes = int(frames), int(total)


#: no bound on a message's frames or bytes
_UNBOUNDED = UNBOUNDED


class Socket(zmq.Socket):
    """A pyzmq socket with greenlet-friendly blocking calls.

    Blocking ``send_multipart``/``recv_multipart``/``wait`` park only the
    calling greenlet.  Use one socket from one greenlet at a time.
    ``timeout`` is in seconds; on expiry ``zmq.Again`` is raised.
    """

    _fd_watchers = None
    #: a monitor is attached (``monitor()``): stopped before the socket closes
    monitored = False
    #: what :mod:`actors.speedups` calls take beside the socket (its address)
    handle = 0
    #: frames and bytes a message read by the reactor may have (:func:`limit_size`)
    max_frames = _UNBOUNDED
    max_bytes = _UNBOUNDED

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handle = _handle(self)

    def events(self) -> int:
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

    def ready(self, events: int = POLLIN) -> bool:
        """True when ``EVENTS`` has any of ``events`` (and so a call will not block)."""
        return bool(_events(self, self.handle) & events)

    def wait(self, events: int = POLLIN, timeout: float | None = None) -> bool:
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

    def send_multipart(self, frames: Sequence[Any], flags: int = 0,  # type: ignore[override]
                       copy: bool = True, track: bool = False, timeout: float | None = None) -> None:
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
        # Every buffer is taken (and so checked) before the first frame goes,
        # and held until the last has gone.
        held = buffers(frames)
        send_frames(self, frames, False)
        del held

    @overload  # type: ignore[override]
    def recv_multipart(self, flags: int = 0, copy: Literal[True] = True, track: bool = False,
                       timeout: float | None = None) -> list[bytes]: ...
    @overload
    def recv_multipart(self, flags: int = 0, *, copy: Literal[False], track: bool = False,
                       timeout: float | None = None) -> list[zmq.Frame]: ...
    @overload
    def recv_multipart(self, flags: int, copy: bool, track: bool = False,
                       timeout: float | None = None) -> list[bytes] | list[zmq.Frame]: ...
    def recv_multipart(self, flags: int = 0, copy: bool = True, track: bool = False,
                       timeout: float | None = None) -> list[Any]:
        """Receive one whole message; parks the greenlet until one arrives."""
        while True:
            try:
                return self.recv_frames(copy)
            except zmq.Again:
                if flags & NOBLOCK or not self.wait(POLLIN, timeout):
                    raise

    def recv_frames(self, copy: bool = True, bounded: bool = False) -> Any:
        """Receive one whole message without blocking (``zmq.Again`` if none).

        ``bounded``: a message over :attr:`max_frames`/:attr:`max_bytes` is
        dropped instead, as :func:`~zactors.actors.speedups.recv_message`
        does (False when refused, True while the rest of one is dropped).
        """
        if copy:
            frames = recv_message(self, self.handle, self.max_frames, self.max_bytes) if bounded else \
                recv_message(self, self.handle)
            if frames is None:
                raise zmq.Again()
            return frames
        recv = self.recv  # zmq.Frame objects, as pyzmq's copy=False gives
        max_frames, max_bytes = (self.max_frames, self.max_bytes) if bounded else (_UNBOUNDED, _UNBOUNDED)
        if bounded and self.getsockopt(zmq.RCVMORE):  # the rest of one refused by an earlier call
            _skip_some(self)
            return True
        try:
            frame = recv(NOBLOCK, copy=False)
            frames = [frame]
            total = len(frame)
            while frame.more:
                if len(frames) >= max_frames or total > max_bytes:
                    del frames
                    _skip_some(self)
                    return False
                frame = recv(NOBLOCK, copy=False)
                frames.append(frame)
                total += len(frame)
            if total > max_bytes:
                return False
        except zmq.ZMQError:
            raise
        except BaseException:  # a signal handler raised mid-message: leave the socket at a boundary
            while self.getsockopt(zmq.RCVMORE):
                recv(NOBLOCK)
            raise
        return frames

    def monitor(self, addr: str | None, events: int = zmq.EVENT_ALL) -> None:  # type: ignore[override]
        """As pyzmq's; the monitor is stopped when the socket closes (see :meth:`close`)."""
        super().monitor(addr, events)
        self.monitored = addr is not None

    def close(self, linger: int | None = None) -> None:
        """Close; a monitor is stopped first, so its reader may close after this socket.

        (A monitor left running after its reader closed would block libzmq's
        I/O thread on its next event, and every socket of the context with it.)
        """
        if self.monitored and not self.closed:
            self.monitored = False
            try:
                self.disable_monitor()
            except zmq.ZMQError:
                pass
        watcher = self._fd_watchers
        if watcher is not None:
            watcher.close()
            self._fd_watchers = None
        super().close(linger)


