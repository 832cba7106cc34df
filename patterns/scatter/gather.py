"""Gather: fair-queued single-part messages from scatter peers, to any thread."""
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import zmq

from zactors.actors.sockets import limit_size
from zactors.actors.speedups import recv_singles

from .errors import NoMessage
from .native import socket_types
from .safesocket import POLLIN, SafeSocket

__all__ = ["Gather"]

log = logging.getLogger(__name__)

_monotonic = time.monotonic

#: messages moved from the socket to the shared buffer per locked batch
BATCH = 256


class Gather(SafeSocket):
    """The GATHER side of 49/SCATTERGATHER.

    ``Gather(queue_limit=1000)`` keeps one incoming queue per scatter peer of
    up to ``queue_limit`` messages (``RCVHWM``) and fair-queues between them.
    A multipart message (from a PUSH peer, say) is discarded whole and
    counted in :attr:`discarded`; it never reaches the application.  (Native
    draft GATHER sockets drop such messages inside libzmq, uncounted.)

    :meth:`recv` blocks (parking only the calling greenlet) until a message
    arrives, or raises :class:`NoMessage` when asked not to block or at its
    timeout.  Every method may be called at once from any number of OS
    threads and greenlets; each message is delivered to exactly one caller.
    ``max_message`` (16 MiB) is the largest message a peer may send: one
    that sends a larger one is disconnected before it is read.

    Messages are taken from the socket in batches of up to :data:`BATCH`
    under the lock, into one buffer shared by all callers (a ``deque``, whose
    ``popleft`` is atomic): so up to ``BATCH`` messages may wait there beyond
    the per-peer limits, and are discarded with the queues on :meth:`close`.
    ``linger`` and ``native`` are as for :class:`Scatter`.
    """

    _wait_event = POLLIN

    def __init__(self, queue_limit: int = 1000, *, native: bool = False, linger: float | None = 0,
                 max_message: int = 16 << 20, **options: Any) -> None:
        _, kind, native = socket_types(native)
        options.setdefault("rcvhwm", queue_limit)
        super().__init__(kind, native, linger, options)
        limit_size(self._sock, max_message)  # a peer sending a larger message is disconnected unread
        self.queue_limit = queue_limit
        #: messages taken from peers (delivered, or in the buffer)
        self.received = 0
        #: multipart messages received and discarded
        self.discarded = 0
        self._buffer: deque[bytes] = deque()
        self._pop = self._buffer.popleft

    def recv(self, block: bool = True, timeout: float | None = None) -> bytes:
        """The next message (bytes).

        Blocks until one arrives unless ``block`` is False; raises
        :class:`NoMessage` (a ``zmq.Again``) after ``timeout`` seconds or at
        once when not blocking, :class:`Closed` after :meth:`close`.
        """
        try:
            return self._pop()
        except IndexError:
            return self._recv_slow(block, timeout)

    def _recv_slow(self, block, timeout):
        deadline = None
        while True:
            with self._lock:
                self._check()
                self._fill()
                try:
                    message = self._pop()
                except IndexError:
                    pass
                else:
                    if self._waiters:  # more in the buffer, or we ate the FD edge
                        self._wake_if_ready()
                    return message
            if not block or timeout == 0:
                raise NoMessage(0)
            if deadline is None and timeout is not None:
                deadline = _monotonic() + timeout
            if not self._wait(deadline):
                raise NoMessage(timeout, self._refusals())

    def _fill(self):
        """Move up to BATCH whole single-part messages into the buffer (lock held)."""
        messages, discarded = recv_singles(self._sock, self._handle, BATCH)
        self._buffer.extend(messages)
        self.received += len(messages)
        if discarded:
            self.discarded += discarded
            level = logging.WARNING if self.discarded == discarded else logging.DEBUG
            log.log(level, "Gather: %d multipart message(s) discarded (%d so far); "
                           "scatter-gather is single-part only", discarded, self.discarded)

    def _ready(self):
        return bool(self._buffer) or self._events() & POLLIN

    def close(self) -> None:
        super().close()
        self._buffer.clear()

    def __iter__(self) -> Iterator[bytes]:
        """Messages, blocking for each, until closed."""
        while True:
            try:
                yield self.recv()
            except zmq.ZMQError:
                if self.closed:
                    return
                raise

    def __repr__(self) -> str:

        state = "closed" if self.closed else "received=%d discarded=%d" % (self.received, self.discarded)
        return "<Gather %s %s>" % ("native" if self.native else "emulated", state)
