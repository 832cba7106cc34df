"""ROUTER sockets owned by an actor: identity routing with backpressure.

:class:`Router` wraps one ROUTER socket inside an actor.  It sets
``ROUTER_MANDATORY``, so a message for an unknown identity is an error the
pattern handles (``on_unroutable``), never a silent drop.  Sending goes
through the kernel's :class:`~zactors.actors.outbox.Outbox`: when a peer is
at its high-water mark the message waits in a bounded per-peer queue that is
flushed, in order, as the peer drains; only that peer waits, the loop goes
on.  A full per-peer queue calls ``on_overflow``; ``on_held``/``on_drained``
tell the pattern when to pause and resume producing for a peer; with
``credit=True`` each identity is sent only what it was granted.
``max_message`` caps each incoming frame (``ZMQ_MAXMSGSIZE``, see
:func:`~zactors.actors.sockets.limit_size`): a peer that sends a larger one
is disconnected by libzmq before the frame is read; ``max_frames`` (and
``max_bytes``, default ``max_frames * max_message``) bound a whole message:
one over them is dropped unread and counted (``stats["multipart_refused"]``).
Connections closed, by
their peer or for a frame over the limit (libzmq does not say which), are
counted in ``actor.stats["disconnects"]``.

Routing ids (issue #20): the socket sets ``ROUTER_HANDOVER``, so a connection
with a routing id in use takes it over and is read.  Without it libzmq never
reads such a connection, yet buffers up to RCVHWM of its messages (each up
to ``max_message`` a frame, in any number of frames): a few of them held
hundreds of MiB.  The connection taken over is left idle (libzmq ends its
pipe; it is counted in ``max_connections`` until its peer closes it).  With ``keys=True`` (CURVE servers) every message's ZAP
User-Id is read (:attr:`Router.key` while ``on_message`` runs) and a routing
id that a pattern holds a :meth:`Router.peering` for is bound to the key that
opened it: a message of another key on that id ends the peering first
(``on_taken_over``, ``stats["peers_taken_over"]``, logged once per 1000),
so no connection acts with another key's rights.  A connection that takes
an id over and only listens gets what is routed to that id until it speaks
or the pattern's liveness ends the peering: patterns say what that means.

:class:`RouterActor` is the base for actors built around one ROUTER.
"""
from __future__ import annotations

import logging
import socket
import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import zmq

from .actor import Actor
from .outbox import Outbox
from .sockets import limit_size
from .speedups import send_message

__all__ = ["Router", "RouterActor", "Peering", "count_disconnects", "fd_budget"]

log = logging.getLogger(__name__)


def count_disconnects(actor: Actor, sock: zmq.Socket, counter: str = "disconnects",
                      max_connections: int | None = None) -> None:
    """Count the connections of ``actor``'s socket ``sock`` that close in ``actor.stats[counter]``
    (libzmq's monitor: the only place a drop for a frame over ``ZMQ_MAXMSGSIZE`` shows).  Call it
    before ``sock``'s other readers: the monitor stops when ``sock`` closes.

    ``max_connections``: accepted connections ``sock`` may have at once.  libzmq accepts every
    connection (each takes a descriptor) and cannot be told to stop; one past the budget is shut
    down as soon as its ACCEPTED event arrives (its peer sees it closed, and reconnects later) and
    counted in ``stats["connections_refused"]`` (logged once per 1000).  Descriptors are a node's to budget: connections
    that took them all would leave none for its journals.
    """
    endpoint = "inproc://zactors-router-monitor-%s" % uuid.uuid4().hex
    watched = zmq.EVENT_DISCONNECTED | (zmq.EVENT_ACCEPTED if max_connections is not None else 0)
    sock.monitor(endpoint, watched)
    events = actor.socket(zmq.PAIR)
    events.connect(endpoint)
    stats = actor.stats
    open_ = [0]

    def on_event(frames):
        event, value = _EVENT.unpack_from(frames[0])
        if event == _DISCONNECTED:
            stats[counter] += 1
            open_[0] = max(0, open_[0] - 1)
        elif event == _ACCEPTED:
            open_[0] += 1
            if open_[0] > max_connections and _shut_down(value, frames[1]):
                stats["connections_refused"] += 1
                if stats["connections_refused"] % 1000 == 1:
                    log.warning("%s: %d connections at once (at most %d): one more shut down (%d so far)",
                                actor.name, open_[0], max_connections, stats["connections_refused"])

    actor.add_reader(events, on_event)


_EVENT = struct.Struct("=HI")    # a monitor event's first frame: event number, value (the fd of ACCEPTED)
_ACCEPTED = int(zmq.EVENT_ACCEPTED)
_DISCONNECTED = int(zmq.EVENT_DISCONNECTED)


def _shut_down(fd: int, endpoint: bytes) -> bool:
    """Shut the accepted TCP connection ``fd`` down (libzmq then closes it); True if done.

    The event may come after libzmq closed that connection and the number went to another
    descriptor: only a socket whose local port is the listener's is touched (at worst another
    connection of that listener, which is over the budget as well)."""
    port = endpoint.rsplit(b":", 1)[-1]
    try:
        conn = socket.socket(fileno=fd)
    except OSError:
        return False
    try:
        local = conn.getsockname()
        if not isinstance(local, tuple) or str(local[1]).encode() != port:
            return False
        conn.shutdown(socket.SHUT_RDWR)
        return True
    except OSError:
        return False
    finally:
        conn.detach()    # libzmq owns the descriptor: never closed here


def fd_budget(share: float = 0.5, reserve: int = 64) -> int | None:
    """Connections a server may hold: ``share`` of the open-file limit less ``reserve`` (None: no limit)."""
    try:
        import resource
    except ImportError:
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return None
    return max(16, int(soft * share) - reserve)


class Peering:
    """What a pattern holds for one routing id (see :meth:`Router.peering`): ``key`` (the ZAP User-Id
    that opened it, None without CURVE) and ``live`` (False once it ended: another key took the id)."""

    __slots__ = ("identity", "key", "live", "uses")

    def __init__(self, identity: bytes, key: str | None) -> None:
        self.identity = identity
        self.key = key
        self.live = True
        self.uses = 0

    def __repr__(self) -> str:
        return "<Peering %r key=%s%s>" % (self.identity, self.key, "" if self.live else " ended")


#: the peering of every routing id of a Router without ``keys``: nothing can tell one connection from another
_ANYONE = Peering(b"", None)


class Router:
    """One ROUTER socket of an actor, with per-peer backpressure queues.

    ``on_message(identity, frames)`` gets every incoming message;
    ``on_unroutable(identity, frames)`` every message for a peer that is not
    connected; ``on_overflow(identity, frames)`` every message refused because
    that peer's backlog already holds ``backlog`` messages.  The defaults of
    the last two log and count (in ``actor.stats``).  ``on_held(identity)``
    runs when a peer's backlog fills up (at ``high``, default ``backlog``)
    and ``on_drained(identity)`` when it is down to ``low`` (half of that)
    again.  ``credit=True`` (and ``cost``) gate each identity by the credit
    :meth:`grant` gives it (see :mod:`zactors.actors.outbox`).
    :attr:`outbox` is the underlying :class:`~zactors.actors.outbox.Outbox`.
    ``max_message`` (bytes, or None for no limit) is the largest frame a
    peer may send, ``max_frames`` the most frames of a message (the identity
    frame included) and ``max_bytes`` its most bytes in all (see
    :func:`~zactors.actors.sockets.limit_size`); every connection that
    closes counts in ``actor.stats["disconnects"]``.  ``max_connections``
    (None: no limit; :func:`fd_budget` derives one from the open-file
    limit) bounds the connections accepted at once (see :func:`count_disconnects`).
    ``keys=True`` (a CURVE server) binds each :meth:`peering` to its ZAP key
    and calls ``on_taken_over(identity, peering)`` when a message of another
    key comes on that routing id (see the module docstring).
    """

    #: first and largest delay (s) between retries for a peer at its HWM
    retry_min = 0.001
    retry_max = 0.05

    def __init__(self, actor: Actor, on_message: Callable[[bytes, list[bytes]], object], *, backlog: int = 10000,
                 on_unroutable: Callable[[bytes, Sequence[bytes]], object] | None = None,
                 on_overflow: Callable[[bytes, Sequence[bytes]], object] | None = None,
                 on_held: Callable[[bytes], object] | None = None, on_drained: Callable[[bytes], object] | None = None,
                 high: int | None = None, low: int | None = None, credit: bool = False,
                 cost: Callable[[Sequence[bytes]], int] | None = None, max_message: int | None = None,
                 max_frames: int | None = None, max_bytes: int | None = None, max_connections: int | None = None,
                 keys: bool = False, on_taken_over: Callable[[bytes, Peering], object] | None = None,
                 **options: Any) -> None:
        self.actor = actor
        options.setdefault("router_handover", 1)  # the newest connection holds an id: see the module docstring
        self.socket = sock = actor.socket(zmq.ROUTER, router_mandatory=1, **options)
        limit_size(sock, max_message, max_frames, max_bytes)
        self.max_connections = max_connections
        self._watch_disconnects()
        self.on_message = on_message
        self.backlog = backlog
        handle = sock.handle

        def transmit(identity: bytes, frames: Sequence[bytes]) -> int | None:
            try:  # refused (EAGAIN, EHOSTUNREACH) on the first frame, or sent whole
                send_message(sock, handle, (identity, *frames))
            except zmq.ZMQError as exc:
                return exc.errno
            return None

        self.outbox = Outbox(actor, transmit, limit=backlog, high=high, low=low, on_held=on_held,
                             on_drained=on_drained, on_overflow=on_overflow, on_unroutable=on_unroutable,
                             credit=credit, cost=cost, retry_min=self.retry_min, retry_max=self.retry_max)
        self.send = self.outbox.send  # type: ignore[method-assign,assignment]  # the hot path: no extra call (see send below for what it does)
        #: the ZAP User-Id of the message ``on_message`` is handling (``keys=True``; else None)
        self.key: str | None = None
        self.keys = keys
        self.on_taken_over = on_taken_over
        self._peerings: dict[bytes, Peering] = {}
        if keys:
            actor.add_reader(sock, self._on_keyed_frames, copy=False)  # zero-copy frames carry the User-Id
        else:
            actor.add_reader(sock, self._on_frames)

    def _watch_disconnects(self):
        count_disconnects(self.actor, self.socket, max_connections=self.max_connections)

    def bind(self, endpoint: str) -> str:
        """Bind and return the actual endpoint (``tcp://127.0.0.1:*`` picks a port).

        Retries while a restarted server's old port is being released (:meth:`Actor.bind`).
        """
        return self.actor.bind(self.socket, endpoint)

    def connect(self, endpoint: str) -> None:
        self.socket.connect(endpoint)

    def _on_frames(self, frames):
        if len(frames) < 2:
            self.actor.stats["router_malformed"] += 1
            return
        self.on_message(frames[0], frames[1:])

    def _on_keyed_frames(self, frames):
        try:
            key = frames[0].get("User-Id") or None
        except zmq.ZMQError:
            key = None
        if len(frames) < 2:
            self.actor.stats["router_malformed"] += 1
            return
        identity = frames[0].bytes
        peering = self._peerings.get(identity)
        if peering is not None and peering.key != key:
            self._taken_over(peering)
        self.key = key
        try:
            self.on_message(identity, [f.bytes for f in frames[1:]])
        finally:
            self.key = None

    def _taken_over(self, peering):
        del self._peerings[peering.identity]
        peering.live = False
        stats = self.actor.stats
        stats["peers_taken_over"] += 1
        if stats["peers_taken_over"] % 1000 == 1:
            log.warning("%s: routing id %r taken over by another key; its peering ends (%d so far)",
                        self.actor.name, peering.identity, stats["peers_taken_over"])
        if self.on_taken_over is not None:
            self.on_taken_over(peering.identity, peering)

    # -- peerings: a routing id bound to a key ----------------------------------
    def peering(self, identity: bytes) -> Peering:
        """The live peering of ``identity``, opened with the key of the message being handled if it
        has none; one more use of it (:meth:`release` each).  Call it from ``on_message`` (the key
        is that message's).  Without ``keys`` every id shares one peering that never ends."""
        if not self.keys:
            return _ANYONE
        peering = self._peerings.get(identity)
        if peering is None:
            peering = self._peerings[identity] = Peering(identity, self.key)
        peering.uses += 1
        return peering

    def release(self, peering: Peering) -> None:
        """One use of ``peering`` less; forgotten at none (its id is anyone's again)."""
        if peering is _ANYONE:
            return
        peering.uses -= 1
        if peering.uses <= 0 and self._peerings.get(peering.identity) is peering:
            del self._peerings[peering.identity]

    def send(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        """Route ``frames`` to ``identity``; False if refused (unroutable or overflow).

        True means sent or queued behind the peer's backlog, in order.
        """
        return self.outbox.send(identity, frames)

    def backlog_of(self, identity: bytes) -> int:
        """Messages waiting for ``identity`` to drain (or for credit)."""
        return self.outbox.pending(identity)

    def drop(self, identity: bytes) -> list[Sequence[bytes]]:
        """Forget a peer (it left): its backlog and credit; returns the dropped messages."""
        return self.outbox.drop(identity)

    def grant(self, identity: bytes, amount: int) -> None:
        """Give ``identity`` ``amount`` more credit and send what it allows (``credit=True``)."""
        self.outbox.grant(identity, amount)

    def credit_of(self, identity: bytes) -> int | None:
        return self.outbox.credit_of(identity)

    def _log_unroutable(self, identity, frames):
        self.outbox._count_unroutable(identity, frames)

    def _log_overflow(self, identity, frames):
        self.outbox._count_overflow(identity, frames)


class RouterActor(Actor):
    """An actor around one ROUTER socket bound to ``endpoint``.

    Subclasses implement ``on_message(identity, frames)`` and send with
    ``self.route(identity, *frames)``; they may override ``on_unroutable``,
    ``on_overflow``, ``on_held`` and ``on_drained``.  ``credit = True`` gates
    each identity by ``self.router.grant(identity, amount)``.
    ``max_message`` caps each incoming frame (bytes; None: no cap), ``max_frames`` and ``max_bytes``
    a whole message (the identity included).  ``self.endpoint`` holds the bound endpoint.
    """

    endpoint = "tcp://127.0.0.1:*"
    backlog = 10000
    credit = False
    max_message: int | None = None
    max_frames: int | None = None
    max_bytes: int | None = None

    def setup(self) -> None:
        self.router = Router(self, self.on_message, backlog=self.backlog, credit=self.credit,
                             on_unroutable=self.on_unroutable, on_overflow=self.on_overflow,
                             on_held=self.on_held, on_drained=self.on_drained, max_message=self.max_message,
                             max_frames=self.max_frames, max_bytes=self.max_bytes)
        self.endpoint = self.router.bind(self.endpoint)

    def route(self, identity: bytes, *frames: bytes) -> bool:
        return self.router.send(identity, list(frames))

    def on_message(self, identity: bytes, frames: list[bytes]) -> None:
        raise NotImplementedError

    def on_unroutable(self, identity: bytes, frames: Sequence[bytes]) -> None:
        self.router._log_unroutable(identity, frames)

    def on_overflow(self, identity: bytes, frames: Sequence[bytes]) -> None:
        self.router._log_overflow(identity, frames)

    def on_held(self, identity: bytes) -> None:
        """``identity``'s backlog is full: stop producing for it until :meth:`on_drained`."""

    def on_drained(self, identity: bytes) -> None:

        """``identity``'s backlog is down to half: produce for it again."""
