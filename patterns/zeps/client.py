"""ZEPS clients: :class:`Publisher` and :class:`Subscriber`.

::

    pub = Publisher("tcp://127.0.0.1:5570", "orders")
    pub.publish(b"eu.fr", b"...")        # asynchronous: never waits for the broker
    pub.flush()                           # returns once the broker has written all of it

    sub = Subscriber("tcp://127.0.0.1:5570", "orders", b"eu.", from_seq=0)
    for message in sub:                   # Message(seq, key, body), in sequence order
        ...

Each is one peering (one DEALER).  Both keep the peering alive with PING
(every ``heartbeat`` seconds of quiet) and take a broker silent for
``expiry`` seconds, or a DETACH from it, as lost: they connect again and
ATTACH again.  A subscriber then subscribes from the last sequence it
received, so it sees no gap and no duplicate across the loss.

A broker pair (:mod:`.pair`): give both endpoints, ``"tcp://a:5570,tcp://b:5570"``; streams over
several pairs: a cluster map, the pairs separated by ``;`` (:mod:`.cluster`).
A client attaches to whichever is active: a passive answers INVALID
``"PASSIVE: ..."`` and the client tries the next endpoint (until ``timeout``
in the constructor; for as long as it runs after that).  On failover (the
active silent for ``expiry``, it DETACHes us, or its connection drops: a client of a pair
watches its connection and tries the other broker as soon as the active's process is gone,
so a crash fails over in well under 2 s whatever ``expiry`` is; a silent machine takes ``expiry``)
the subscriber resumes after
the last sequence it received (no gap, no duplicate: the passive holds the
same sequences) and an idempotent publisher resends what was not confirmed
(the broker drops what it has already, by producer id).

A broker that refuses the connection (a CURVE key it does not accept, a
wrong server key, CURVE on one side only) raises :class:`HandshakeFailed`
(the kernel's, a ``ConnectionRefusedError``) from the constructor (and
:func:`query`) within a second or so, as the Majordomo and Clone clients
do; :class:`ZepsError` "no answer" means nobody answered at all.

``flush`` is the publisher's durability point: when it returns, every message
published before it is in the journal at the broker's acknowledgement level
(``written``: survives ``kill -9`` of the broker; ``synced``: a power loss).
The publisher counts the messages the broker has not confirmed yet (a
PING-OK, to ``flush``, to a heartbeat or to the PING sent after every 4096
publishes, confirms everything published before its PING); if the peering is
lost before they are confirmed (the broker died, or dropped us), the next
``flush`` raises :class:`MessagesLost` saying how many, and which (numbered
by their ``publish`` call, from 1), may be lost.  They may also be in the
journal: the broker died before it could say.  ``Publisher(idempotent=True)``
sends them again instead (see :class:`Publisher`).

:class:`Publisher` may be used from many greenlets at once (a gevent WSGI
handler, say): a publish never yields unless the broker is at its
high-water mark, and its reads (flush, heartbeats) are serialised by a lock.
:class:`Subscriber` is an actor owning its socket: it answers heartbeats and
replenishes credit by itself; messages wait in a local queue bounded by the
credit window (``window`` bytes) until the application takes them, by
iterating, with :meth:`Subscriber.get` (:meth:`Subscriber.get_many` for a
batch), or through a ``callback`` run in the subscriber's own greenlet.  Neither is safe across OS threads.
"""
from __future__ import annotations

import logging
import re
import secrets
import struct
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Self

import gevent
import zmq
from gevent.event import Event
from gevent.lock import Semaphore

from zactors.actors.actor import Actor, command
from zactors.actors.auth import Keypair, curve_client
from zactors.actors.monitor import HANDSHAKE, HandshakeFailed, Monitor, describe
from zactors.actors.sockets import POLLIN, Socket, context, limit_size
from zactors.actors.speedups import events as _events, recv_singles, send_message
from zactors.actors.values import to_bytes

from . import deliver as _deliver, protocol as p
from .cluster import ClusterMap, is_map, resolve

__all__ = ["Publisher", "Subscriber", "Message", "ZepsError", "MessagesLost", "ReplayError", "StreamRolledBack",
           "NoSuchStream", "HandshakeFailed", "query"]

log = logging.getLogger(__name__)

_monotonic = time.monotonic

_PUBLISH_HEAD = struct.Struct(">2sBB").pack
_PUBLISH_ID_HEAD = struct.Struct(">2sBQQ").pack   # signature, 20, producer, sequence
_u32 = struct.Struct(">I").pack
_u8 = struct.Struct(">B").pack

_BATCH = 256                 # DELIVERs taken from the socket per C call
_CONFIRM_EVERY = 4095        # a publisher PINGs after every 4096 publishes (mask): the broker confirms as it goes
class Message(NamedTuple):
    """One delivered message: its stream sequence, routing key and body (bytes)."""

    seq: int
    key: bytes
    body: bytes


#: ``(broker_public_key, client_keys)``: how a client talks to a CURVE broker
Curve = tuple[bytes | str, Keypair | bytes | str]
_deliver.bind(Message)
_parse = _deliver.parse      # DELIVER frames to Messages, a batch per call


class ZepsError(Exception):
    """The broker refused something (its INVALID reason is the message), or did not answer."""


class NoSuchStream(ZepsError):
    """The broker has no stream ``stream`` (a :class:`Subscriber` without ``wait=True`` never creates one)."""

    def __init__(self, stream: bytes, endpoint: str) -> None:
        super().__init__("no stream %r on the ZEPS broker at %s (wait=True, or --wait, waits for its first "
                         "message)" % (stream.decode("ascii", "replace"), endpoint))
        self.stream = stream


class ReplayError(ZepsError):
    """The broker cannot read message ``seq`` of ``stream`` from its journal (a corrupt record).

    Nothing past it is delivered on this subscription: the broker does not skip data.
    """

    def __init__(self, reason: str, stream: bytes, seq: int | None) -> None:
        super().__init__(reason)
        self.stream = stream
        self.seq = seq


class StreamRolledBack(ZepsError):
    """The stream ends at ``last_seq``, before the ``held`` this subscriber resumed after.

    The broker's journal lost messages (a power loss with ``ack="written"``,
    a cut corrupt tail): sequences ``last_seq + 1 ..`` will be new messages,
    not the ones this subscriber holds.  Subscribe again (``from_seq`` at most
    ``last_seq + 1``) knowing that.
    """

    def __init__(self, reason: str, stream: bytes, last_seq: int | None, held: int | None) -> None:
        super().__init__(reason)
        self.stream = stream
        self.last_seq = last_seq
        self.held = held


def _number_after(text, prefix):
    match = re.search(re.escape(prefix) + r"(\d+)", text)
    return int(match.group(1)) if match else None


class MessagesLost(ZepsError):
    """The peering was lost before the broker confirmed ``count`` published messages: they may be lost.

    ``ranges`` lists them as ``(first, last)`` publish numbers (the n-th call
    of :meth:`Publisher.publish` is number n), oldest first.
    """

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        self.ranges = ranges
        self.count = sum(last - first + 1 for first, last in ranges)
        super().__init__("%d message(s) may be lost (publish number%s %s): the broker lost the peering (did it "
                         "restart?) before confirming them" % (
                             self.count, "" if self.count == 1 else "s",
                             ", ".join("%d" % a if a == b else "%d-%d" % (a, b) for a, b in ranges[:10])
                             + (", ..." if len(ranges) > 10 else "")))


#: the largest frame a publisher takes from the broker (its answers are short: INVALID, PING-OK, DETACH)
_MAX_ANSWER = 4096
#: the JOURNALED field a broker puts first in a refusal sent to a PUBLISH-ID producer (protocol.py)
_JOURNALED = re.compile(r"\[journaled=(\d+)(?: held=(\d+))?\] ")
#: the largest QUERY-OK report :func:`query` takes
_MAX_REPORT = 64 << 20


def _reasons(reasons):
    """The broker's reasons in one line: each distinct one once, in order, with how often it came."""
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    said = []
    for reason, n in counts.items():
        reason = _same_cause(reason, list(counts)[:len(said)])
        said.append(reason if n == 1 else "%s (%d times)" % (reason, n))
    return "; ".join(said[:3]) + (" (and %d other reasons)" % (len(said) - 3) if len(said) > 3 else "")


def _same_cause(reason, before):
    """``reason`` with a cause an earlier reason already gave (its text after some ': ') said as "the same
    failure", so that one ENOSPC is not spelt out again in every reason it caused."""
    for earlier in before:
        at = earlier.find(": ")
        while at >= 0:
            cause = earlier[at + 2:]
            if len(cause) >= 20 and reason.endswith(": " + cause):
                return reason[:-len(cause)] + "the same failure"
            at = earlier.find(": ", at + 2)
    return reason


def _dealer(endpoint, curve, limit, sndhwm=None, watch=False):
    """A DEALER to the broker; a frame over ``limit`` bytes from it drops the connection (ZMQ_MAXMSGSIZE).

    With ``watch``, returns ``(sock, monitor)``: the Monitor of its handshake,
    for :func:`_wait` (close it once the broker has answered); of the events of the mask ``watch``
    if it is one.
    """
    sock = context().socket(zmq.DEALER, socket_class=Socket)
    sock.linger = 0
    limit_size(sock, limit)
    if sndhwm is not None:
        sock.sndhwm = sndhwm
    if curve:
        curve_client(sock, curve[1], curve[0])
    monitor = Monitor(sock, HANDSHAKE if watch is True else watch) if watch else None  # before connect
    sock.connect(endpoint)
    return (sock, monitor) if watch else sock


def _actor_dealer(actor, old, endpoint, curve, limit, watch=False):
    """``actor``'s new DEALER to the broker, replacing ``old`` (closed); ``(sock, monitor)``.

    No receive HWM: the credit window bounds what comes in, and a frame over ``limit``
    bytes drops the connection.  ``monitor`` watches the handshake (for :func:`_wait`)
    with ``watch`` True, the events of the mask ``watch`` if it is one, else is None.
    Runs in the actor's greenlet.
    """
    if old is not None:
        actor.close_socket(old)
    sock = actor.socket(zmq.DEALER, rcvhwm=0)
    limit_size(sock, limit)
    if curve:
        curve_client(sock, curve[1], curve[0])
    monitor = Monitor(sock, HANDSHAKE if watch is True else watch) if watch else None  # before connect
    sock.connect(endpoint)
    return sock, monitor


def _endpoints(endpoint):
    """The endpoints of ``"tcp://a:5570,tcp://b:5570"`` (a pair), or of one."""
    found = [e.strip() for e in endpoint.split(",") if e.strip()]
    if not found:
        raise ValueError("no broker endpoint in %r" % (endpoint,))
    return found


def _passive(reason):
    """An INVALID from the passive broker of a pair: try the other one."""
    return reason.startswith("PASSIVE:")


def _busy(reason):
    """An INVALID refusing an ATTACH for now (the broker opens or closes many journals): attach again."""
    return reason.startswith("busy: ")


#: seconds between two ATTACHes while the brokers of a pair say they are passive (a failover under way)
_PASSIVE_RETRY = 0.1

#: a pair client's connection events that mean "try the other broker now": the connection to the
#: broker dropped (its process is gone), or nothing listens there (connection refused)
_LINK_LOST = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED


#: a pair client's handshake watch while it constructs: a refused connection moves it to the other broker
_PAIR_WATCH = HANDSHAKE | zmq.EVENT_CONNECT_RETRIED


def _link_lost(monitor):
    """True if ``monitor`` (a pair client's, or None) saw its connection drop or be refused; drains it."""
    return monitor is not None and any(event.event & _LINK_LOST for event in monitor.events())

#: while a new connection's handshake has not ended, answers are awaited in slices this long (s)
_HANDSHAKE_SLICE = 0.05


def _wait(sock, watch, timeout, curve, endpoint):
    """Wait up to ``timeout`` s for a frame on ``sock``; False at the deadline.  Parks this greenlet.

    Until the broker answers, reads ``watch`` (the socket's handshake Monitor,
    or None) between short slices, and raises :class:`HandshakeFailed` as soon
    as the broker ends the handshake (a refused key, CURVE on one side only),
    as the Majordomo and Clone clients do, instead of waiting out ``timeout``.
    """
    deadline = _monotonic() + timeout
    while True:
        remaining = deadline - _monotonic()
        if watch is None:
            return remaining > 0 and sock.wait(POLLIN, remaining)
        if sock.wait(POLLIN, max(0.0, min(_HANDSHAKE_SLICE, remaining))):
            return True
        for event in watch.events():
            if event.event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                watch = None
                break
            if event.event == zmq.EVENT_CONNECT_RETRIED:   # (only when asked for: a pair's query)
                raise ZepsError("no answer from %s: nothing listens there (connection refused)" % endpoint)
            if event.event != zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL or curve:
                raise HandshakeFailed("%s at %s" % (describe(event, "the ZEPS broker", bool(curve)), endpoint),
                                      event)
        if remaining <= 0:
            return False


def _attach(sock, stream, timeout, watch=None, curve=None, endpoint=""):
    """ATTACH on a fresh socket and wait for ATTACH-OK (ZepsError on INVALID or silence,
    HandshakeFailed when ``watch`` sees the broker refuse the connection)."""
    sock.send(p.attach(stream))
    deadline = _monotonic() + timeout
    while True:
        remaining = deadline - _monotonic()
        if remaining <= 0 or not _wait(sock, watch, remaining, curve, endpoint):
            raise ZepsError("no answer to ATTACH from the broker within %ss" % timeout)
        message = p.decode(sock.recv_frames()[0])
        if type(message) is p.AttachOk:
            return
        if type(message) is p.Invalid:
            raise ZepsError(message.reason)


class Publisher:
    """Publishes to ``stream`` on the broker at ``endpoint``.  See the module docstring.

    ``curve`` is ``(broker_public_key, client_keys)`` for a CURVE broker.
    Construction waits (up to ``timeout``) for ATTACH-OK and raises
    :class:`ZepsError` if the broker refuses the stream.

    ``idempotent=True`` (the PUBLISH-ID extension): the publisher keeps
    every message until the broker confirms it (at most ``max_unconfirmed``
    messages and ``max_unconfirmed_bytes``; past that, :meth:`publish`
    waits for confirmation as :meth:`flush` does, and raises like it), and
    after a lost peering it sends them again; the broker drops the ones it
    has already journaled, by (producer id, producer sequence).  So
    :meth:`flush` never raises :class:`MessagesLost`: every message is
    journaled exactly once, in order, also across a broker restart or kill
    (the broker keeps its table of producers in the stream's journal).  Publishes
    from several greenlets are serialised while one of them is parked.
    When the broker's journal refuses them (disk full), its refusals say
    exactly what it kept (the JOURNALED field, :mod:`.protocol`):
    :attr:`journaled` is the last publish number it has at its
    acknowledgement level (also counted in :attr:`confirmed`), :attr:`held`
    the last one it holds unwritten in memory (written only if its journal
    can write again before it stops; 0: none), :attr:`refusal` why; the ones
    after were refused (the broker refuses every one after the first it
    refused, so what it keeps is always the first N).  All three are
    ``None``/0 until such a refusal.  The next :meth:`flush` sends the
    unconfirmed again, in order (``stats["resent_refused"]``), and raises
    :class:`ZepsError` with the reason, once, while the broker still refuses.
    """

    def __init__(self, endpoint: str, stream: bytes | str, *, curve: Curve | None = None, heartbeat: float = 1.0,
                 expiry: float = 5.0, timeout: float = 5.0, idempotent: bool = False,
                 max_unconfirmed: int = 100000, max_unconfirmed_bytes: int = 64 << 20) -> None:
        self.endpoints = _endpoints(resolve(endpoint, to_bytes(stream, "stream")))  # a cluster map: its pair
        self.endpoint = self.endpoints[0]
        self.timeout = timeout
        self.idempotent = idempotent
        self.max_unconfirmed = max_unconfirmed
        self.max_unconfirmed_bytes = max_unconfirmed_bytes
        self._producer = secrets.randbits(63) | 1     # PUBLISH-ID: this publisher's id
        self._unconfirmed: deque[tuple[int, bytes]] = deque()  # idempotent: (publish number, frame)
        self._unconfirmed_bytes = 0
        self.stream = to_bytes(stream, "stream")
        self.curve = curve
        self.heartbeat = heartbeat
        self.expiry = expiry
        self.stats = dict.fromkeys(("published", "flushes", "reattached", "invalid", "lost", "resent",
                                    "resent_refused"), 0)
        self._errors: list[str] = []
        self._lock = Semaphore()  # held by whoever reads the socket (flush, heartbeats)
        self._closed = False
        # idempotent: what is unconfirmed is bounded by max_unconfirmed, so the socket's queue needs no
        # other bound, and a send never parks (publish numbers go out in order; a resend never blocks)
        self._sndhwm = 0 if idempotent else None
        self._parked = False      # idempotent: a publish is parked in a send; the others queue behind it
        self._passive: bool | str = False    # the broker said it is a passive: attach to the next endpoint
        self._busy = False        # the broker refused our ATTACH for now: attach again
        deadline = _monotonic() + timeout
        refusal = None
        while True:
            self._sock, watch = _dealer(self.endpoint, curve, _MAX_ANSWER, self._sndhwm,
                                        watch=_PAIR_WATCH if len(self.endpoints) > 1 else True)
            try:
                _attach(self._sock, self.stream, max(0.0, deadline - _monotonic()) if len(self.endpoints) == 1
                        else min(max(0.0, deadline - _monotonic()), max(0.5, heartbeat)), watch, curve,
                        self.endpoint)
                break
            except ZepsError as exc:
                self._sock.close(0)
                if _passive(str(exc)):
                    refusal = exc
                elif "no answer" not in str(exc):
                    raise
                if _monotonic() >= deadline:
                    raise refusal or exc
                self._next_endpoint()
                gevent.sleep(_PASSIVE_RETRY)
            except Exception:
                self._sock.close(0)
                raise
            finally:
                watch.close()
        self._heard = _monotonic()
        self._pings = 0           # PINGs sent on this peering; the broker answers each, in order,
        self._answers = 0         # with PING-OK, or INVALID "PING: ..." when it cannot write
        self._refused: list[tuple[int, str]] = []        # (answer number, reason) of the INVALID "PING:" answers
        self._marks: deque[int] = deque()  # per PING not yet answered: the publish count when it was sent
        self._confirmed = 0       # publish count the broker has confirmed (or that was given up as lost)
        self._lost: list[tuple[int, int]] = []  # publish numbers unconfirmed when a peering was lost
        self.journaled: int | None = None  # idempotent: what the broker's last refusal said it journaled
        self.held = 0             # and the last publish number it held unwritten then (0: none)
        self.refusal: str | None = None  # and why (the answer to a PING when one came)
        self._resend = False      # the broker refused some: flush sends the unconfirmed again first
        self._attaching = False   # an ATTACH was sent again: the old peering's DETACHes are stale
        self._held = False        # idempotent, a pair: the unconfirmed wait for the ATTACH-OK (a passive refuses)
        self._link = None         # a pair: the Monitor of our connection (see _watch_link)
        self._dropped = False     # it saw the connection drop or be refused: try the other broker
        self._since = _monotonic()    # when the current peering started
        self._watch_link()
        self._keepalive = gevent.spawn(self._keep_alive)

    def _watch_link(self):
        """A pair: watch the new socket's connection (created after its connect: a drop before is
        left to ``expiry``)."""
        if len(self.endpoints) > 1:
            self._link = Monitor(self._sock, _LINK_LOST)

    def publish(self, key: bytes | str, body: bytes | str) -> None:
        """Publish ``body`` under routing ``key`` (each bytes or str: :mod:`zactors.actors.values`).
        Asynchronous: the broker never confirms.

        Parks the calling greenlet only while the broker is at its high-water mark.
        """
        if self._closed:
            raise ZepsError("publisher is closed")
        if type(key) is not bytes or len(key) > 255:
            key = to_bytes(key, "key")
            if len(key) > 255:
                raise ValueError("key is %d bytes; a ZEPS string holds at most 255" % len(key))
        if type(body) is not bytes:
            body = to_bytes(body, "body")
        if self.idempotent:
            self._publish_id(b"".join((_u8(len(key)), key, _u32(len(body)), body)))
            n = self.stats["published"]
            if not n & 63:
                self._every_64(n, self._sock)
            if len(self._unconfirmed) >= self.max_unconfirmed or self._unconfirmed_bytes >= self.max_unconfirmed_bytes:
                self.flush(self.timeout)  # backpressure: wait for the broker to confirm what it holds
            return
        # The plain path: nothing more per message than the frame, its send and the count.
        frame = b"".join((_PUBLISH_HEAD(p.SIGNATURE, p.PUBLISH, len(key)), key, _u32(len(body)), body))
        sock = self._sock
        try:
            send_message(sock, sock.handle, (frame,))
        except zmq.Again:
            with self._lock:  # parks this greenlet until the broker takes it; no reattach meanwhile
                sock = self._sock
                sock.send_multipart([frame])
        stats = self.stats
        n = stats["published"] = stats["published"] + 1
        if not n & 63:
            self._every_64(n, sock)

    def _every_64(self, n, sock):
        """After every 64th publish: see a DETACH (the broker restarted) before many more publishes,
        and after every 4096th PING, so that confirmations keep coming (a loss names fewer messages)."""
        if (not n & _CONFIRM_EVERY or _events(sock, sock.handle) & POLLIN) and self._lock.acquire(blocking=False):
            try:
                self._service()
                if not n & _CONFIRM_EVERY and len(self._marks) < 64:
                    self._ping(block=False)
            finally:
                self._lock.release()

    def _publish_id(self, tail):
        """Send PUBLISH-ID with the next publish number.  The number is taken right before its send, and
        no publish overtakes one parked in its send (the socket has no high-water mark, so none should),
        so they go in order: the broker drops a number below one it has seen, so a later one sent first
        would lose the earlier."""
        if self._held:  # attaching to a broker of a pair, which may be the passive: sent after its ATTACH-OK
            n = self.stats["published"] + 1
            self._keep(n, _PUBLISH_ID_HEAD(p.SIGNATURE, p.PUBLISH_ID, self._producer, n) + tail)
            return
        if not self._parked:
            n = self.stats["published"] + 1
            frame = _PUBLISH_ID_HEAD(p.SIGNATURE, p.PUBLISH_ID, self._producer, n) + tail
            sock = self._sock
            try:
                send_message(sock, sock.handle, (frame,))
            except zmq.Again:
                pass
            else:
                self._keep(n, frame)
                return
        with self._lock:  # parks this greenlet until the broker takes it; publishes behind it wait
            self._parked = True
            try:
                n = self.stats["published"] + 1
                frame = _PUBLISH_ID_HEAD(p.SIGNATURE, p.PUBLISH_ID, self._producer, n) + tail
                self._sock.send_multipart([frame])
                self._keep(n, frame)
            finally:
                self._parked = False

    def _next_endpoint(self):
        """The next broker of the pair (the same one when there is one)."""
        self.endpoint = self.endpoints[(self.endpoints.index(self.endpoint) + 1) % len(self.endpoints)]

    def _keep(self, n, frame):
        self.stats["published"] = n
        self._unconfirmed.append((n, frame))
        self._unconfirmed_bytes += len(frame)

    @property
    def confirmed(self) -> int:
        """How many of the messages published so far (counted from the first) the broker has confirmed
        written, or reported lost (:class:`MessagesLost`)."""
        return self._confirmed

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until the broker has written every message published so far.

        Raises :class:`ZepsError` with the broker's reasons if it refused any
        message since the last flush, or if it did not answer within ``timeout``.
        """
        with self._lock:
            deadline = _monotonic() + timeout
            self._service()
            self._attached_by(deadline, timeout)
            if self._resend:  # the broker refused some (the JOURNALED field): again, in order, from there
                self._resend = False
                self.stats["resent_refused"] += len(self._unconfirmed)
                for _, frame in self._unconfirmed:
                    self._sock.send(frame)
            while True:
                self._attached_by(deadline, timeout)
                reattached = self.stats["reattached"]
                self._ping()
                target = self._pings      # ours is answered after every PING sent before it
                while self._answers < target:
                    remaining = deadline - _monotonic()
                    if remaining <= 0:
                        raise ZepsError("the broker did not confirm within %ss" % timeout)
                    # Short waits: another greenlet's send may take the socket's FD edge.
                    self._sock.wait(POLLIN, min(remaining, 0.01))
                    self._service()  # a lost peering answers our PING by giving it up (and counts the lost)
                    self._peering_lost()  # a broker killed under our PING would never answer it
                if not self.idempotent or self.stats["reattached"] == reattached:
                    break
                # idempotent: the peering was replaced while we waited and the unconfirmed were sent
                # again on the new one; a PING behind them says when they are journaled
            if self._lost:  # published, then the peering was lost before the broker confirmed them
                raise self._take_lost()
            refused = [reason for number, reason in self._refused if number >= target]
            self._refused = []
            if refused:  # our PING (or a later one) was refused: not written
                errors, self._errors = self._errors, []
                raise ZepsError(_reasons(refused[:1] + errors))
            self.stats["flushes"] += 1
            errors, self._errors = self._errors, []
        if errors:
            raise ZepsError(_reasons(errors))

    def _attached_by(self, deadline, timeout):
        """Wait (the lock held) while the unconfirmed are held for an ATTACH-OK: they go out with it, and a
        PING must follow them.  ZepsError at ``deadline``."""
        while self._held:
            if _monotonic() >= deadline:
                raise ZepsError("the broker did not confirm within %ss (no broker of the pair took the ATTACH)"
                                % timeout)
            self._sock.wait(POLLIN, min(deadline - _monotonic(), 0.01))
            self._service()
            self._peering_lost()

    def _ping(self, block=True):
        """Send a PING (the lock held): its PING-OK will confirm everything published so far.  None while
        the unconfirmed are held for an ATTACH-OK (it would confirm what was not sent)."""
        if self._held:
            return
        try:
            self._sock.send(p.PING_FRAME, 0 if block else zmq.NOBLOCK)
        except zmq.Again:
            return
        self._pings += 1
        self._marks.append(self.stats["published"])

    def _take_lost(self):
        lost, self._lost = self._lost, []
        return MessagesLost(lost)

    def _service(self):
        """Read what the broker sent (the lock held); True if the peering was lost (and attached again)."""
        lost = False
        sock = self._sock
        while True:
            try:
                frames = sock.recv_frames()
            except zmq.Again:
                return lost
            self._heard = _monotonic()
            try:
                message = p.decode(frames[0])
            except p.ProtocolError as exc:
                log.debug("invalid frame from the broker dropped: %s", exc)
                continue
            kind = type(message)
            if kind is p.PingOk:
                self._answers += 1
                if self._marks:
                    confirmed = self._confirmed = max(self._confirmed, self._marks.popleft())
                    kept = self._unconfirmed
                    while kept and kept[0][0] <= confirmed:
                        self._unconfirmed_bytes -= len(kept.popleft()[1])
            elif kind is p.AttachOk:
                self._attaching = False
                if self._held:  # the broker of the pair that took us: now what it has not confirmed
                    self._held = False
                    self.stats["resent"] += len(self._unconfirmed)
                    for _, frame in self._unconfirmed:
                        sock.send(frame)
            elif kind is p.Ping:
                sock.send(p.PING_OK_FRAME)
            elif kind is p.Invalid:
                self.stats["invalid"] += 1
                reason = message.reason
                ping = reason.startswith("PING:")
                if ping:
                    reason = reason[5:].strip()
                field = self.idempotent and reason.startswith("[journaled=")
                if field:
                    reason = self._journaled(reason, ping)
                if ping:  # the broker's answer to a PING: not written
                    self._answers += 1
                    if self._marks:
                        self._marks.popleft()
                    self._refused.append((self._answers, reason))
                    del self._refused[:-10]
                elif reason.endswith("(no peering: attach first)") or field:
                    pass  # sent on a lost peering: the DETACH behind it counts it in what may be lost;
                    # or refused with the JOURNALED field: kept, sent again by flush, whose PING says
                elif _passive(reason):
                    self._passive = True  # our ATTACH went to a passive: the keep-alive tries the other one
                elif _busy(reason) and self._attaching:
                    self._busy = True     # our ATTACH was refused for now: the keep-alive attaches again
                elif len(self._errors) < 100:
                    self._errors.append(reason)
            elif kind is p.Detach:
                if self._attaching:
                    continue  # the lost peering's answers to what we sent before attaching again
                lost = True
                self._reattach()

    def _journaled(self, reason, ping):
        """A refusal's JOURNALED field (protocol.py): the broker has written this publisher's messages up
        to publish number N (so they are confirmed), and holds the ones up to H unwritten.  Returns the
        reason without it."""
        match = _JOURNALED.match(reason)
        if match is None:
            return reason
        if ping or self.refusal is None:
            self.refusal = reason[match.end():]
        self._resend = True
        journaled = min(int(match.group(1)), self.stats["published"])
        self.held = int(match.group(2) or 0)
        if journaled > self._confirmed:
            self._confirmed = journaled
            kept = self._unconfirmed
            while kept and kept[0][0] <= journaled:
                self._unconfirmed_bytes -= len(kept.popleft()[1])
        self.journaled = self._confirmed   # (a PING-OK may have confirmed more than this peering's field)
        return reason[match.end():]

    def _reattach(self, new_socket=False):
        """Attach again (the lock held); what the broker had not confirmed counts as maybe lost."""
        published = self.stats["published"]
        if published > self._confirmed and not self.idempotent:
            self._lost.append((self._confirmed + 1, published))
            del self._lost[:-1000]
            self.stats["lost"] += published - self._confirmed
            self._confirmed = published
            log.warning("publisher: peering on %s lost with publish numbers %d-%d unconfirmed: they may be lost",
                        self.stream.decode(), self._lost[-1][0], published)
        self._marks.clear()
        self._attaching = True
        self.stats["reattached"] += 1
        log.info("publisher: peering on %s lost; attaching again", self.stream.decode())
        if new_socket:
            if self._link is not None:
                self._link.close()
            self._sock.close(0)
            if len(self.endpoints) > 1:
                self._sock, self._link = _dealer(self.endpoint, self.curve, _MAX_ANSWER, self._sndhwm, _LINK_LOST)
            else:
                self._sock = _dealer(self.endpoint, self.curve, _MAX_ANSWER, self._sndhwm)
            self._since = _monotonic()
            self._dropped = False
        self._sock.send(p.attach(self.stream))  # pipelined: publishes queue behind it
        if self.idempotent and len(self.endpoints) > 1:
            # a pair: this broker may be the passive, which would refuse every one ("PUBLISH before
            # ATTACH"), each time we try it: they wait for its ATTACH-OK (_service), and so do new ones
            self._held = True
        elif self._unconfirmed:  # idempotent: again, in order; the broker drops what it journaled already
            self.stats["resent"] += len(self._unconfirmed)
            for _, frame in self._unconfirmed:
                self._sock.send(frame)
        self._answers = self._pings  # PINGs of the lost peering get no answer now
        self._heard = _monotonic()

    def _keep_alive(self):
        while not self._closed:
            # a pair: look at the connection often (its Monitor is replaced under us by a flush, so
            # it is read, never waited on): a drop is seen within 50 ms
            gevent.sleep(self.heartbeat / 2 if self._link is None else min(self.heartbeat / 2, _PASSIVE_RETRY / 2))
            if self._closed:
                return
            with self._lock:
                self._service()
                if not self._peering_lost() and _monotonic() - self._heard > self.heartbeat:
                    self._ping()

    def _peering_lost(self):
        """Attach again (the lock held) when the broker said so (a passive; busy) or went silent for
        ``expiry``, or (a pair) our connection to it dropped or was refused; True if it did.  The
        keep-alive checks, and a flush while it waits (it holds the lock)."""
        now = _monotonic()
        self._dropped = _link_lost(self._link) or self._dropped
        dropped = self._dropped and now - self._since >= _PASSIVE_RETRY   # (both down: no busy loop)
        if not (self._passive or self._busy or dropped or now - self._heard > self.expiry):
            return False
        if not self._busy:
            self._next_endpoint()
        self._passive = self._busy = False
        self._reattach(new_socket=True)
        return True

    def close(self) -> None:
        """Detach and close (unflushed messages still queued are dropped: flush first)."""
        if self._closed:
            return
        self._closed = True
        self._keepalive.kill()
        if self._link is not None:
            self._link.close()
        try:
            self._sock.send(p.DETACH_FRAME, zmq.NOBLOCK)
        except zmq.ZMQError:
            pass
        self._sock.close(0.1 * 1000)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Subscriber(Actor):
    """Subscribes to ``patterns`` of ``stream``.  See the module docstring.

    Start point: ``from_seq=N`` delivers from sequence N (0 or 1: the whole
    retained journal), ``since=T`` from the first message journaled at or
    after time T (seconds since the epoch; the SUBSCRIBE-SINCE extension),
    ``new=True`` only messages published from now on; the default is
    ``from_seq=0``.  A stream that does not exist raises :class:`NoSuchStream`
    (reading never creates a stream: the ATTACH-EXISTING extension);
    ``wait=True`` creates it instead, empty, and waits for its messages (an
    empty stream is deleted once idle).  ``window`` is the credit in bytes the subscriber keeps
    open (at least the largest message).  ``callback(message)``, if given,
    runs in the subscriber's greenlet for each message instead of the queue.

    Retention gaps: when the broker's retention removed messages this
    subscriber was due (it asked for sequence 1 and the journal starts at
    4,429), the broker says so (the GAP extension): the range is appended to
    :attr:`gaps` (``(first, last)`` sequences, the last 100), counted in
    ``stats["gaps"]`` and ``stats["gap_sequences"]``, logged as a warning,
    and passed to ``on_gap(first, last)`` if given (in the subscriber's
    greenlet).  Delivery goes on at ``last + 1``.

    Errors end the subscription: :meth:`get` (and iteration) raise them once
    the messages received before are taken, and :attr:`error` holds them:
    :class:`ReplayError` when the broker cannot read a message from its
    journal (a corrupt record; nothing is skipped), :class:`StreamRolledBack`
    when the stream restarted below what this subscriber holds (the journal
    lost messages: seen on resuming, where the broker checks the position
    against the stream's epochs, the EPOCH extension, whatever broker runs
    came between and even if new messages have since taken the stream past
    it; nothing is delivered after it), :class:`ZepsError` when the
    subscription is refused.

    Commands: ``INFO`` (reply: stream, last sequence, counters).
    """

    def __init__(self, endpoint: str, stream: bytes | str, *patterns: bytes | str, from_seq: int | None = None,
                 since: float | None = None, new: bool = False, window: int = 8 << 20,
                 callback: Callable[[Message], object] | None = None,
                 on_gap: Callable[[int, int], object] | None = None, curve: Curve | None = None,
                 heartbeat: float = 1.0, expiry: float = 5.0, timeout: float = 5.0, name: str | None = None,
                 wait: bool = False) -> None:
        if sum(x is not None and x is not False for x in (from_seq, since, new or None)) > 1:
            raise ValueError("give at most one of from_seq, since and new")
        self.stream = to_bytes(stream, "stream")
        self.endpoints = _endpoints(resolve(endpoint, self.stream))  # a cluster map: the stream's pair
        self.endpoint = self.endpoints[0]
        self.patterns = [to_bytes(x, "a pattern") for x in (patterns or (b"",))]
        for pattern in self.patterns:
            if len(pattern) > p.MAX_STRING:
                raise ValueError("a pattern is at most 255 bytes")
        self.since = since
        self.wait = wait
        self.latest = p.NEW if new else max(0, (from_seq or 0) - 1)
        self.window = window
        self._quarter = window >> 2   # credit goes back in quarters of the window
        self.callback = callback
        self.on_gap = on_gap
        self.gaps: list[tuple[int, int]] = []  # (first, last) sequences retention removed before delivery
        self.curve = curve
        self.heartbeat = heartbeat
        self.expiry = expiry
        self.timeout = timeout
        self.last_seq = None        # the last sequence received
        self._epoch = None          # the stream's epoch (EPOCH) when last_seq was received
        self._told_epoch = None     # an EPOCH on this peering: ours once its SUBSCRIBE is accepted
        self._queue: deque[Message] = deque()
        self._ready = Event()
        self._queued_bytes = 0
        self._consumed = 0          # bytes taken by the application, not yet given back as credit
        self._credit_posted = False
        self._error = None
        self._closed = False
        self._waiting = 0           # get() calls parked on _ready
        self.ready_timeout = timeout + 1
        if name:
            self.name = name

    # -- application side -----------------------------------------------------------
    def get(self, timeout: float | None = None) -> Message | None:
        """The next :class:`Message`; None after ``timeout`` seconds with none, or once closed.

        Raises :class:`ZepsError` if the broker refused the subscription.
        """
        queue = self._queue
        if not queue:
            if self._error is not None:
                raise self._error
            if self._closed:
                return None
            self._ready.clear()
            self._waiting += 1
            try:
                self._ready.wait(timeout)
            finally:
                self._waiting -= 1
            if not queue:
                if self._error is not None:
                    raise self._error
                return None
        message = queue.popleft()
        self._taken(16 + len(message[1]) + len(message[2]))  # its DELIVER frame size: what it cost in credit
        return message

    def get_many(self, max_count: int = 1024, timeout: float | None = None) -> list[Message]:
        """Up to ``max_count`` messages at once, in order: waits like :meth:`get` for the
        first, then takes what else is queued; [] after ``timeout`` or once closed."""
        first = self.get(timeout)
        if first is None:
            return []
        out = [first]
        queue = self._queue
        n = min(len(queue), max_count - 1)
        if n > 0:
            popleft, append = queue.popleft, out.append
            cost = 0
            for _ in range(n):
                message = popleft()
                append(message)
                cost += 16 + len(message[1]) + len(message[2])
            self._taken(cost)
        return out

    def _taken(self, cost):
        """The application took messages costing ``cost`` bytes of credit: give it back in quarters."""
        self._queued_bytes -= cost
        consumed = self._consumed = self._consumed + cost
        if consumed >= self._quarter and not self._credit_posted:
            self._credit_posted = True
            self.post(self._give_credit)

    @property
    def error(self) -> ZepsError | None:
        """The error that ended this subscription (see the class docstring), or None."""
        return self._error

    @property
    def pending(self) -> int:
        """Messages received and not yet taken."""
        return len(self._queue)

    def __iter__(self) -> Iterator[Message]:
        while True:
            message = self.get(None)
            if message is None:  # closed
                return
            yield message

    # -- actor side -----------------------------------------------------------------
    def setup(self) -> None:
        self._sock: Socket = None  # type: ignore[assignment]  # _connect sets it
        self._attached = False
        self._heard = _monotonic()
        self._stats = self.stats
        self._passive: bool | str = False      # the broker said it is a passive: attach to the next endpoint
        self._link = None           # a pair: the Monitor of our connection (see _reconnect)
        deadline = _monotonic() + self.timeout
        slice_ = self.timeout if len(self.endpoints) == 1 else max(0.5, self.heartbeat)
        while True:
            watch = self._connect(watch=_PAIR_WATCH if len(self.endpoints) > 1 else True)
            try:
                until = min(deadline, _monotonic() + slice_)
                while not (self._attached and self._subscribed == len(self.patterns)):  # subscribed, or raise
                    remaining = until - _monotonic()
                    try:
                        if self._passive or remaining <= 0 or \
                                not _wait(self._sock, watch, remaining, self.curve, self.endpoint):
                            break
                    except ZepsError as exc:    # a pair: nothing listens there: the other broker, now
                        self._passive = str(exc)
                        break
                    self._on_frames(self._sock.recv_frames())
                    if self._error is not None and not (self._attached and self._subscribed == len(self.patterns)):
                        raise self._error  # refused; an error after the subscription (REPLAY:) waits for get()
                else:
                    break
            finally:
                watch.close()
            if _monotonic() >= deadline:
                raise ZepsError(self._passive or "no answer to ATTACH/SUBSCRIBE from %s within %ss" % (
                    ",".join(self.endpoints), self.timeout))
            self._passive = False
            self._next_endpoint()
            gevent.sleep(_PASSIVE_RETRY)
        self.add_reader(self._sock, self._on_frames)
        if len(self.endpoints) > 1:   # (watched from now on: a drop before is left to expiry)
            self._watch_link(Monitor(self._sock, _LINK_LOST))
        self.call_every(self.heartbeat / 2, self._keep_alive)

    def _watch_link(self, monitor):
        self._link = monitor
        self._since = _monotonic()
        self.add_reader(monitor.pair, self._on_link)

    def _unwatch_link(self):
        if self._link is not None:
            self.remove_reader(self._link.pair)
            self._link.close()
            self._link = None

    def _on_link(self, frames):
        """Our connection to the broker dropped, or was refused: try the other broker at once (not
        sooner than _PASSIVE_RETRY after the last try: both down is no busy loop)."""
        if Monitor.decode(frames).event & _LINK_LOST and not self._passive:
            self._passive = "the connection to %s dropped" % self.endpoint
            self.call_later(max(0.0, self._since + _PASSIVE_RETRY - _monotonic()), self._keep_alive)

    def teardown(self) -> None:
        self._unwatch_link()
        if self._sock is not None and self._attached:  # (refused, or never answered: nothing to end)
            try:
                self._sock.send(p.DETACH_FRAME, zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
        self._closed = True
        self._ready.set()

    def _connect(self, watch=False):
        """Connect and ATTACH; with ``watch``, returns the Monitor of the handshake.

        The subscription follows the ATTACH-OK (:meth:`_subscribe`): ATTACH-EXISTING may be refused,
        and then nothing else is sent.  With ``wait`` the ATTACH cannot be refused for a missing stream:
        all goes at once.
        """
        # a DELIVER costs credit: none is larger than the window
        sock, monitor = _actor_dealer(self, self._sock, self.endpoint, self.curve, max(self.window, _MAX_ANSWER), watch)
        self._sock = sock
        self._attached = False
        self._subscribed = 0
        self._credit_given = 0
        self._told_epoch = None
        sock.send(p.attach(self.stream, existing=not self.wait))
        self._heard = _monotonic()
        if self.wait:
            self._subscribe()
        return monitor

    def _next_endpoint(self):
        self.endpoint = self.endpoints[(self.endpoints.index(self.endpoint) + 1) % len(self.endpoints)]

    def _subscribe(self):
        """FEATURES, SUBSCRIBE (one per pattern) and CREDIT on the peering just attached."""
        sock = self._sock
        sock.send(p.features(b"gaps epochs tokens"))  # GAP, EPOCH and PROBE, before the SUBSCRIBE that may need them
        if self.last_seq is not None and self._epoch is not None:  # resuming: was our position lost since?
            sock.send(p.epoch(self._epoch, self.last_seq))
        if self.last_seq is not None:
            first = p.subscribe(self.patterns[0], self.last_seq)
        elif self.since is not None:
            first = p.subscribe_since(self.patterns[0], self.since)
        else:
            first = p.subscribe(self.patterns[0], self.latest)
        sock.send(first)
        for pattern in self.patterns[1:]:
            sock.send(p.subscribe(pattern, 0))
        # What the queue holds already counts against the window.
        self._consumed = 0
        self._credit_posted = False
        credit = max(0, self.window - self._queued_bytes)
        if credit:
            sock.send(p.credit(credit))

    def _give_credit(self):
        self._credit_posted = False
        if self._sock is None or not self._attached:  # not yet: _subscribe gives the window afresh
            return
        amount, self._consumed = self._consumed, 0
        if amount:
            self._sock.send(p.credit(amount))

    def _on_frames(self, frames):
        """The reactor's handler: this message, then one batch of what else is waiting (one C call).
        The reactor calls it again while messages wait, up to its drain cap a round (the round contract):
        draining the socket here until empty held the hub for seconds under a fast stream in pure Python."""
        self._heard = _monotonic()
        sock = self._sock
        self._receive(frames[:1])
        if self._sock is sock and sock is not None:
            try:
                batch, _ = recv_singles(sock, sock.handle, _BATCH)
            except zmq.ZMQError:
                return
            if batch:
                self._receive(batch)

    def _receive(self, frames):
        """DELIVERs (a batch per C call: the hot path) and the broker's other commands, in order."""
        sock = self._sock
        i, n = 0, len(frames)
        while i < n:
            last = self.last_seq
            messages, last, size, i, duplicates = _parse(frames, i, -1 if last is None else last)
            if duplicates:
                self._stats["duplicates"] += duplicates
            if messages:
                if self.callback is None:
                    self.last_seq = last
                    self._queue.extend(messages)
                    self._queued_bytes += size
                    if self._waiting:
                        self._ready.set()
                else:
                    for item in messages:
                        self.last_seq = item[0]
                        self._callback(item, 16 + len(item[1]) + len(item[2]))
                        if self._sock is not sock:
                            return
            if i < n:  # not a DELIVER
                self._command(frames[i])
                i += 1
                if self._sock is not sock:  # the peering was replaced: the rest came on the old one
                    return

    def _command(self, frame):
        try:
            message = p.decode(frame)
        except p.ProtocolError as exc:
            self._stats["invalid_from_broker"] += 1
            log.debug("%s: invalid frame from the broker dropped: %s", self.name, exc)
            return
        kind = type(message)
        # (every valid DELIVER took the inline path in _receive)
        if kind is p.Ping:
            self._sock.send(p.PING_OK_FRAME)
        elif kind is p.Probe:  # (FEATURES "tokens"): we read all that came before it
            self._sock.send(p.probe_ok(message.token))
        elif kind is p.PingOk:
            pass
        elif kind is p.AttachOk:
            self._attached = True
            if not self.wait:
                self._subscribe()
        elif kind is p.SubscribeOk:
            self._subscribed += 1
            if self._told_epoch is not None:  # the broker accepted our position in its epoch
                self._epoch, self._told_epoch = self._told_epoch, None
        elif kind is p.Detach:
            self._stats["reattached"] += 1
            log.info("%s: the broker closed the peering; attaching again from %s", self.name, self.last_seq)
            self._reconnect()
        elif kind is p.Gap:
            self._gap(message.first, message.last)
        elif kind is p.Epoch:  # (a position the journal lost since is refused: the ROLLBACK below)
            self._told_epoch = message.epoch
        elif kind is p.Invalid:
            self._stats["invalid"] += 1
            reason = message.reason
            if _passive(reason):  # a pair's passive: the keep-alive (or setup) tries the other broker
                self._passive = reason
                if self._link is not None:   # (after setup: soon, a failover may be under way)
                    self.call_later(_PASSIVE_RETRY, self._keep_alive)
                return
            if not self._attached and reason.endswith("(no peering: attach first)"):
                return  # a command pipelined behind an ATTACH the broker refused (a passive): that refusal says why
            if reason.startswith("credit budget:"):  # more credit waits for others to drain: no error
                self._stats["credit_budget_waits"] += 1  # (said once, then at DEBUG: a reader is told often)
                (log.info if self._stats["credit_budget_waits"] == 1 else log.debug)("%s: broker says: %s",
                                                                                   self.name, reason)
                return
            if not reason.startswith("NO-STREAM:"):  # (raised as NoSuchStream: said once, by the caller)
                log.warning("%s: broker says: %s", self.name, reason)
            if reason.startswith("REPLAY:"):
                self._fail(ReplayError(reason, self.stream, _number_after(reason, "sequence ")))
            elif reason.startswith("ROLLBACK:"):
                self._rolled_back(StreamRolledBack(reason, self.stream, _number_after(reason, "ends at sequence "),
                                                   _number_after(reason, "before the ")))
            elif reason.startswith("NO-STREAM:") and not self._attached:
                self._fail(NoSuchStream(self.stream, self.endpoint))
            elif not self._attached or self._subscribed < len(self.patterns):
                self._fail(ZepsError(reason))

    def _rolled_back(self, error):
        """The broker refused to resume: the journal lost messages this subscriber holds, and the
        sequences since are other messages.  Stop here (StreamRolledBack)."""
        self._stats["rollbacks"] += 1
        self._fail(error)
        try:
            self._sock.send(p.DETACH_FRAME, zmq.NOBLOCK)
        except zmq.ZMQError:
            pass
        self.close_socket(self._sock)  # nothing more from this peering: no message past the rollback
        self._sock = None

    def _fail(self, error):
        if self._error is None:
            self._error = error
        self._ready.set()

    def _gap(self, first, last):
        self.gaps.append((first, last))
        del self.gaps[:-100]
        stats = self._stats
        stats["gaps"] += 1
        stats["gap_sequences"] += last - first + 1
        log.warning("%s: stream %s: sequences %d..%d are gone (retention removed them before they were "
                    "delivered); going on at %d", self.name, self.stream.decode(), first, last, last + 1)
        if self.on_gap is not None:
            self.on_gap(first, last)

    def _callback(self, item, size):
        try:
            self.callback(item)
        finally:
            self._consumed += size
            if self._consumed >= self._quarter:
                self._give_credit()

    def _reconnect(self):
        was_reading = self._sock is not None
        self._unwatch_link()      # (before its socket closes)
        link = self._connect(watch=_LINK_LOST if len(self.endpoints) > 1 else False)
        if was_reading:
            self.add_reader(self._sock, self._on_frames)
        if link is not None:
            self._watch_link(link)

    def _keep_alive(self):
        if self._sock is None:  # stopped by a rollback
            return
        quiet = _monotonic() - self._heard
        if self._passive or quiet > self.expiry:
            self._stats["reattached"] += 1
            if self._passive:
                log.info("%s: %s; trying the next broker", self.name, self._passive)
            else:
                log.info("%s: broker silent for %.1fs; connecting again from %s", self.name, quiet, self.last_seq)
            self._passive = False
            self._next_endpoint()
            self._reconnect()
        elif quiet > self.heartbeat:
            self._sock.send(p.PING_FRAME)

    @command(reply=True)
    def info(self) -> dict[str, Any]:
        """INFO: the stream, the last sequence received, queued messages, outstanding credit and counters."""
        return {"stream": self.stream.decode(), "last_seq": self.last_seq, "queued": len(self._queue),
                "credit_outstanding": self.window - self._consumed - self._queued_bytes, "counters": dict(self.stats)}


def query(endpoint: str, *, curve: Curve | None = None, timeout: float = 5.0) -> dict[str, Any]:

    """The broker's introspection (the QUERY extension): a dict, see ``Broker.info``.

    A pair (``"tcp://a:5570,tcp://b:5570"``): the active's, else the first that answers.  A cluster
    map (:mod:`.cluster`): every pair's, merged (``streams`` of all, ``peers`` summed), each in ``cluster``."""
    if is_map(endpoint):
        infos = [query(pair, curve=curve, timeout=timeout) for pair in ClusterMap.parse(endpoint).pairs]
        merged = dict(infos[0], streams={}, peers=sum(i["peers"] for i in infos), cluster=infos)
        for info in infos:
            merged["streams"].update(info["streams"])
        return merged
    found: list[dict[str, Any]] = []
    for one in _endpoints(endpoint):
        try:   # a pair: each broker its share of the timeout (a dead first one must not take it all)
            info = _query(one, curve, timeout / len(_endpoints(endpoint)), len(_endpoints(endpoint)) > 1)
        except ZepsError:
            if one == _endpoints(endpoint)[-1] and not found:
                raise
            continue
        if info.get("pair", {}).get("state", "active") == "active":
            return info
        found.append(info)
    return found[0]


def _query(endpoint, curve, timeout, pair=False):
    """One broker's report; ``pair``: a refused connection (a dead broker of a pair) fails at once."""
    import json

    sock, watch = _dealer(endpoint, curve, _MAX_REPORT, watch=HANDSHAKE | zmq.EVENT_CONNECT_RETRIED if pair else True)
    try:
        sock.send(p.encode(p.Query()))
        if not _wait(sock, watch, timeout, curve, endpoint):
            raise ZepsError("no answer from %s within %ss" % (endpoint, timeout))
        message = p.decode(sock.recv_frames()[0])
        if type(message) is p.Invalid:
            raise ZepsError(message.reason)
        if type(message) is not p.QueryOk:
            raise ZepsError("unexpected answer %s" % p.NAMES[message.id])
        return json.loads(message.report)
    finally:
        watch.close()
        sock.close(0)
