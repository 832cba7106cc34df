"""ROUTER sockets owned by an actor: identity routing with backpressure.

:class:`Router` wraps one ROUTER socket inside an actor.  It sets
``ROUTER_MANDATORY``, so a message for an unknown identity is an error the
pattern handles (``on_unroutable``), never a silent drop.  When a peer is at
its high-water mark the message waits in a bounded per-peer queue that is
flushed, in order, as the peer drains; only that peer waits, the loop goes
on.  A full per-peer queue calls ``on_overflow``.

:class:`RouterActor` is the base for actors built around one ROUTER.
"""
import errno
import logging
from collections import deque

import zmq

from .actor import Actor
from .speedups import send_message

__all__ = ["Router", "RouterActor"]

log = logging.getLogger(__name__)

_EAGAIN = errno.EAGAIN


class Router:
    """One ROUTER socket of an actor, with per-peer backpressure queues.

    ``on_message(identity, frames)`` gets every incoming message;
    ``on_unroutable(identity, frames)`` every message for a peer that is not
    connected; ``on_overflow(identity, frames)`` every message refused because
    that peer's backlog already holds ``backlog`` messages.  The defaults of
    the last two log and count (in ``actor.stats``).
    """

    #: first and largest delay (s) between retries for a peer at its HWM
    retry_min = 0.001
    retry_max = 0.05

    def __init__(self, actor, on_message, *, backlog=10000, on_unroutable=None, on_overflow=None, **options):
        self.actor = actor
        self.socket = actor.socket(zmq.ROUTER, router_mandatory=1, **options)
        self.on_message = on_message
        self.on_unroutable = on_unroutable or self._log_unroutable
        self.on_overflow = on_overflow or self._log_overflow
        self.backlog = backlog
        self._pending = {}  # identity -> deque of frame lists, waiting for HWM room
        self._retry = None
        self._delay = self.retry_min
        actor.add_reader(self.socket, self._on_frames)

    def bind(self, endpoint):
        """Bind and return the actual endpoint (``tcp://127.0.0.1:*`` picks a port)."""
        self.socket.bind(endpoint)
        return self.socket.last_endpoint.decode()

    def connect(self, endpoint):
        self.socket.connect(endpoint)

    def _on_frames(self, frames):
        if len(frames) < 2:
            self.actor.stats["router_malformed"] += 1
            return
        self.on_message(frames[0], frames[1:])

    def send(self, identity, frames):
        """Route ``frames`` to ``identity``; False if refused (unroutable or overflow).

        True means sent or queued behind the peer's backlog, in order.
        """
        pending = self._pending.get(identity)
        if pending is not None:
            if len(pending) >= self.backlog:
                self.on_overflow(identity, frames)
                return False
            pending.append(frames)
            return True
        outcome = self._try(identity, frames)
        if outcome is None:
            return True
        if outcome == _EAGAIN:
            self._pending[identity] = deque((frames,))
            self._schedule()
            return True
        self.on_unroutable(identity, frames)
        return False

    def _try(self, identity, frames):
        """None when sent, else the errno that stopped it."""
        sock = self.socket
        try:  # refused (EAGAIN, EHOSTUNREACH) on the first frame, or sent whole
            send_message(sock, sock.handle, (identity, *frames))
        except zmq.ZMQError as exc:
            return exc.errno
        return None

    def backlog_of(self, identity):
        """Messages waiting for ``identity`` to drain."""
        pending = self._pending.get(identity)
        return 0 if pending is None else len(pending)

    def drop(self, identity):
        """Forget a peer's backlog (it left); returns the dropped messages."""
        return list(self._pending.pop(identity, ()))

    def _schedule(self):
        if self._retry is None:
            self._retry = self.actor.call_later(self._delay, self._flush)

    def _flush(self):
        self._retry = None
        progressed = False
        for identity in list(self._pending):
            pending = self._pending[identity]
            while pending:
                outcome = self._try(identity, pending[0])
                if outcome is None:
                    pending.popleft()
                    progressed = True
                elif outcome == _EAGAIN:
                    break
                else:  # the peer went away with messages still waiting
                    for frames in pending:
                        self.on_unroutable(identity, frames)
                    pending.clear()
            if not pending:
                del self._pending[identity]
        if self._pending:
            self._delay = self.retry_min if progressed else min(self._delay * 2, self.retry_max)
            self._schedule()
        else:
            self._delay = self.retry_min

    def _log_unroutable(self, identity, frames):
        self.actor.stats["unroutable"] += 1
        log.debug("%s: no peer %r; message dropped", self.actor.name, identity)

    def _log_overflow(self, identity, frames):
        self.actor.stats["overflow"] += 1
        log.warning("%s: backlog for %r is full (%d); message refused", self.actor.name, identity, self.backlog)


class RouterActor(Actor):
    """An actor around one ROUTER socket bound to ``endpoint``.

    Subclasses implement ``on_message(identity, frames)`` and send with
    ``self.route(identity, *frames)``; they may override ``on_unroutable``
    and ``on_overflow``.  ``self.endpoint`` holds the bound endpoint.
    """

    endpoint = "tcp://127.0.0.1:*"
    backlog = 10000

    def setup(self):
        self.router = Router(self, self.on_message, backlog=self.backlog,
                             on_unroutable=self.on_unroutable, on_overflow=self.on_overflow)
        self.endpoint = self.router.bind(self.endpoint)

    def route(self, identity, *frames):
        return self.router.send(identity, list(frames))

    def on_message(self, identity, frames):
        raise NotImplementedError

    def on_unroutable(self, identity, frames):
        self.router._log_unroutable(identity, frames)

    def on_overflow(self, identity, frames):
        self.router._log_overflow(identity, frames)
