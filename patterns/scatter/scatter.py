"""Scatter: round-robin single-part messages to gather peers, from any thread."""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import zmq

from zactors.actors.sockets import limit_size
from zactors.actors.speedups import send_locked, send_message

from .errors import MultipartError, NoPeerAvailable
from .native import socket_types
from .safesocket import POLLOUT, SafeSocket

__all__ = ["Scatter"]

_Again = zmq.Again
_monotonic = time.monotonic
_SINGLE = (bytes, bytearray, memoryview, zmq.Frame)


class Scatter(SafeSocket):
    """The SCATTER side of 49/SCATTERGATHER.

    ``Scatter(queue_limit=1000)`` keeps one outgoing queue per gather peer,
    holding up to ``queue_limit`` messages (``SNDHWM``; the kernel's tcp
    buffers hold some more in flight).  A peer is available while its queue
    is not full; messages go round-robin to available peers.  A queue exists
    as soon as :meth:`connect` is called, connected or not; a peer that
    connected to a bound Scatter gets one when it connects and loses it, with
    its content, when it disconnects.

    :meth:`send` blocks while no peer is available (parking only the calling
    greenlet) or raises :class:`NoPeerAvailable` when asked not to block or
    at its timeout; a message it did not accept is never queued, so nothing
    is silently discarded.

    Thread safety: every method may be called at once from any number of OS
    threads and greenlets; each message is accepted exactly once or refused.
    ``native`` chooses the wire: the PUSH emulation (False, the default:
    talks to Gathers and PULL peers, on any pyzmq) or libzmq's draft SCATTER
    (True: talks to native GATHER peers only; needs ``zmq.has("draft")``).  ``linger`` is how long
    :meth:`close` keeps flushing queued messages (seconds; None: until sent).
    ``options`` are further socket options by name (``sndbuf=...``).
    """

    _wait_event = POLLOUT

    def __init__(self, queue_limit: int = 1000, *, native: bool = False, linger: float | None = 2.0,
                 **options: Any) -> None:
        kind, _, native = socket_types(native)
        options.setdefault("sndhwm", queue_limit)
        super().__init__(kind, native, linger, options)
        limit_size(self._sock, 1024)  # it only sends: nothing large may come in
        self.queue_limit = queue_limit
        self._sent = [0]  # counted under the lock (by send_locked on the hot path)
        #: sends that found no available peer and had to wait
        self.waited = 0

    def send(self, message: bytes | bytearray | memoryview, block: bool = True, timeout: float | None = None) -> None:
        """Queue one single-part message for the next available peer.

        ``message`` is bytes-like.  Blocks while no peer is available unless
        ``block`` is False; raises :class:`NoPeerAvailable` (a ``zmq.Again``)
        after ``timeout`` seconds or at once when not blocking,
        :class:`MultipartError` for a list of frames, :class:`Closed` after
        :meth:`close`.
        """
        if type(message) is not bytes and not isinstance(message, _SINGLE):
            message = _single(message)
        # The hot path: lock, send, unlock in one C call that no other thread can interrupt.
        if not self._closing:
            try:
                if send_locked(self._lock, self._sock, self._handle, (message,), self._sent):
                    if self._waiters:  # the send may have eaten the FD edge they wait on
                        with self._lock:
                            self._wake_if_ready()
                    return
            except zmq.ZMQError:  # closed under us: the locked path below says so
                pass
        with self._lock:
            if self._closing:  # the socket may stay open for a parked waiter
                self._check()
            if self._try_send(message):
                return
        if not block or timeout == 0:
            raise NoPeerAvailable(0)
        self._send_blocking(message, timeout)

    def _send_blocking(self, message, timeout):
        deadline = None if timeout is None else _monotonic() + timeout
        self.waited += 1  # not under the lock: a statistic, may miss a concurrent increment
        while self._wait(deadline):
            with self._lock:
                self._check()
                if self._try_send(message):
                    return
        raise NoPeerAvailable(timeout, self._refusals())

    def _try_send(self, message):
        """One non-blocking send, by the lock holder; False if no peer can take it."""
        try:
            send_message(self._sock, self._handle, (message,))
        except _Again:
            return False
        self._sent[0] += 1
        if self._waiters:  # the send may have eaten the FD edge they wait on
            self._wake_if_ready()
        return True

    @property
    def sent(self) -> int:
        """Messages accepted (queued)."""
        return self._sent[0]

    def _ready(self):
        return self._events() & POLLOUT

    def send_multipart(self, frames: Sequence[bytes | bytearray | memoryview], block: bool = True,
                       timeout: float | None = None) -> None:
        """:meth:`send` of a one-frame list; more frames raise :class:`MultipartError`."""
        if len(frames) != 1:
            raise MultipartError("scatter-gather sends single-part messages only; got %d frames"
                                 % len(frames))
        self.send(frames[0], block, timeout)

    def __repr__(self) -> str:

        state = "closed" if self.closed else "sent=%d" % self.sent
        return "<Scatter %s %s>" % ("native" if self.native else "emulated", state)


def _single(message):
    if isinstance(message, (list, tuple)):
        if len(message) == 1 and isinstance(message[0], _SINGLE):
            return message[0]
        raise MultipartError("scatter-gather sends single-part messages only; got %d frames "
                             "(join them, or send them as separate messages)" % len(message))
    raise TypeError("a scatter message is bytes-like, not %s" % type(message).__name__)
