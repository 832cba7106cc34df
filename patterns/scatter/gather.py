"""Gather: fair-queued single-part messages from scatter peers, to any thread."""
import logging
import time

import zmq

from .errors import NoMessage
from .native import socket_types
from .safesocket import NOBLOCK, POLLIN, SafeSocket

__all__ = ["Gather"]

log = logging.getLogger(__name__)

_Again = zmq.Again
_ZMQError = zmq.ZMQError
_monotonic = time.monotonic
_RCVMORE = 13


class Gather(SafeSocket):
    """The GATHER side of 49/SCATTERGATHER.

    ``Gather(queue_limit=1000)`` keeps one incoming queue per scatter peer of
    up to ``queue_limit`` messages (``RCVHWM``) and fair-queues between them.
    A multipart message (from a PUSH peer, say) is discarded whole and
    counted in :attr:`discarded`; it never reaches the application.

    :meth:`recv` blocks (parking only the calling greenlet) until a message
    arrives, or raises :class:`NoMessage` when asked not to block or at its
    timeout.  Every method may be called at once from any number of OS
    threads and greenlets; each message is delivered to exactly one caller.
    ``linger`` and ``native`` are as for :class:`Scatter`.
    """

    def __init__(self, queue_limit=1000, *, native=None, linger=0, **options):
        _, kind, native = socket_types(native)
        options.setdefault("rcvhwm", queue_limit)
        super().__init__(kind, native, linger, options)
        self.queue_limit = queue_limit
        self.received = 0
        #: multipart messages received and discarded
        self.discarded = 0
        self._recv = self._sock.recv
        self._more = self._sock.get

    def recv(self, block=True, timeout=None):
        """The next message (bytes).

        Blocks until one arrives unless ``block`` is False; raises
        :class:`NoMessage` (a ``zmq.Again``) after ``timeout`` seconds or at
        once when not blocking, :class:`Closed` after :meth:`close`.
        """
        deadline = None
        while True:
            with self._lock:
                try:
                    message = self._recv(NOBLOCK)
                    if self._more(_RCVMORE):
                        self._discard()
                        continue
                except _Again:
                    pass
                except _ZMQError:
                    self._check()
                    raise
                else:
                    self.received += 1
                    if self._waiters:  # the recv may have eaten the FD edge they wait on
                        self._wake_if(POLLIN)
                    return message
            if not block or timeout == 0:
                raise NoMessage(0)
            if deadline is None and timeout is not None:
                deadline = _monotonic() + timeout
            if not self._wait(POLLIN, deadline):
                raise NoMessage(timeout)

    def _discard(self):
        """Drop the rest of a multipart message (all its frames are here already)."""
        recv, more = self._recv, self._more
        frames = 1
        while more(_RCVMORE):
            recv(NOBLOCK)
            frames += 1
        self.discarded += 1
        level = logging.WARNING if self.discarded == 1 else logging.DEBUG
        log.log(level, "Gather: multipart message of %d frames discarded (%d so far); "
                       "scatter-gather is single-part only", frames, self.discarded)

    def __iter__(self):
        """Messages, blocking for each, until closed."""
        while True:
            try:
                yield self.recv()
            except zmq.ZMQError:
                if self.closed:
                    return
                raise

    def __repr__(self):
        state = "closed" if self.closed else "received=%d discarded=%d" % (self.received, self.discarded)
        return "<Gather %s %s>" % ("native" if self.native else "emulated", state)
