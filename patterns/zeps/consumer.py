"""ZEPS consumer-group member: :class:`Consumer`, messages shared with the group's other members.

::

    with Consumer("tcp://127.0.0.1:5570", "orders", "billing", pattern=b"eu.") as consumer:
        for message in consumer:          # GroupMessage(seq, key, body, deliveries)
            handle(message.body)
            message.ack()                 # or message.nack(delay=1.0): delivered again later

The group lives on the broker (:mod:`.broker_groups`, the wire in
:mod:`.groups_protocol`): each message goes to one member; what a member does
not acknowledge within the group's ``ack_wait`` (or gives back with
``nack``), or what it held when it died, goes to another; after
``max_deliver`` deliveries it goes to the dead-letter stream.

Flow: the broker sends a member no more than its credit, ``window`` bytes of
messages not yet acknowledged (a GROUP-DELIVER costs its frame size); an
``ack`` or ``nack`` gives that credit back.  A slow member holds at most its
window, so the others get the rest.

Acks are batched: ``ack()`` only notes the sequence (any greenlet, any OS
thread: it posts to the consumer's loop); the consumer sends them as
ranges once ``ack_batch`` are noted or every ``ack_interval`` seconds, and
before it closes.  A message acknowledged is kept acknowledged only once
that ACK reached the broker: a crash of this process before that means the
message is delivered again (at least once).

Reconnect: a broker silent for ``expiry`` seconds, or a DETACH from it, makes
the consumer connect, ATTACH and JOIN again; the group's cursor and pending
list are the broker's, so it resumes where the group is (what this member
held is redelivered after ``ack_wait``, or at once if the broker noticed the
old peering end; an ack that arrives after is still taken while nobody else
holds the message).  A broker pair (``"tcp://a:5570,tcp://b:5570"``, or a
cluster map): the consumer joins whichever is active, trying the other when
one answers ``PASSIVE:`` or falls silent; the pair replicates the groups, so
after a failover the group goes on from what the passive had (see
``docs/zeps-extensions.md``, "Consumer groups in a pair").

The consumer is an actor owning its socket.  :meth:`get`, iteration,
``ack`` and ``nack`` are safe from many greenlets; ``ack``/``nack`` also
from other OS threads (the worker pool's threadpool).  Errors (JOIN refused,
permissions) are raised from the constructor, or from :meth:`get` once the
messages received before are taken.
"""
from __future__ import annotations

import logging
import struct
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, NamedTuple

import gevent
import zmq
from gevent.event import Event

from zactors.actors.actor import Actor, command
from zactors.actors.speedups import recv_singles
from zactors.actors.values import to_bytes

from . import groups_protocol as g
from . import protocol as p
from .client import _PASSIVE_RETRY, Curve, ZepsError, _actor_dealer, _endpoints, _passive, _wait
from .cluster import resolve

__all__ = ["Consumer", "GroupMessage", "START"]

log = logging.getLogger(__name__)
_monotonic = time.monotonic
_DELIVER_HEAD = struct.Struct(">QHB").unpack_from  # GROUP-DELIVER after its signature and id
_TOKENS = p.features(b"tokens")   # PROBEs, not bare PINGs, ask what we drained (protocol.py)
_U32 = struct.Struct(">I").unpack_from
_tuple_new = tuple.__new__
#: frames taken from the socket per C call
_BATCH = 256
#: ``start=`` names (a new group's start); an int is a sequence, a float a time (seconds since the epoch)
START = {"earliest": g.START_EARLIEST, "latest": g.START_LATEST}


class GroupMessage(NamedTuple):
    """One message of the group: ``seq``, ``key``, ``body``, ``deliveries`` (1 on the first)."""

    seq: int
    key: bytes
    body: bytes
    deliveries: int
    consumer: Any

    def ack(self) -> None:
        """Acknowledge: done with it (batched; safe from any greenlet or thread)."""
        self.consumer.ack(self.seq, 18 + len(self.key) + len(self.body))

    def nack(self, delay: float = 0.0) -> None:
        """Give it back: deliver it again (to any member) after ``delay`` seconds."""
        self.consumer.nack(self.seq, delay, 18 + len(self.key) + len(self.body))


class Consumer(Actor):
    """A member of ``group`` on ``stream``.  See the module docstring.

    A new group (created by this JOIN) takes ``pattern``, ``start``
    (``"earliest"``, ``"latest"``, a sequence (int) or a time (float,
    seconds since the epoch)), ``ack_wait`` (seconds) and ``max_deliver``
    (None: the broker's defaults); an existing group keeps its own.

    Commands: ``INFO`` (reply: group, counters).
    """

    def __init__(self, endpoint: str, stream: bytes | str, group: bytes | str, *, pattern: bytes | str = b"",
                 start: str | int | float = "earliest", ack_wait: float | None = None,
                 max_deliver: int | None = None, window: int = 1 << 20, ack_batch: int = 256,
                 ack_interval: float = 0.01, curve: Curve | None = None, heartbeat: float = 1.0,
                 expiry: float = 5.0, timeout: float = 5.0, name: str | None = None) -> None:
        self.stream = to_bytes(stream, "stream")
        self.endpoints = _endpoints(resolve(endpoint, self.stream))  # a pair (or a cluster map: the stream's)
        self.endpoint = self.endpoints[0]
        self.group = to_bytes(group, "group")
        self.pattern = to_bytes(pattern, "pattern")
        if isinstance(start, str):
            if start not in START:
                raise ValueError("start must be 'earliest', 'latest', a sequence (int) or a time (float)")
            self._start_at = (START[start], 0)
        elif isinstance(start, bool) or not isinstance(start, (int, float)) or start < 0:
            raise ValueError("start must be 'earliest', 'latest', a sequence (int) or a time (float)")
        elif isinstance(start, int):
            self._start_at = (g.START_SEQ, start)
        else:
            self._start_at = (g.START_TIME, int(start * 1e6))
        self._join = g.join(self.group, self.pattern, self._start_at[0], self._start_at[1],
                            int(round((ack_wait or 0) * 1000)), max_deliver or 0)  # checks the values now
        self.window = window
        self.ack_batch = max(1, min(ack_batch, g.MAX_RANGES))
        self.ack_interval = ack_interval
        self.curve = curve
        self.heartbeat = heartbeat
        self.expiry = expiry
        self.timeout = timeout
        self.ready_timeout = timeout + 1
        self._queue: deque[GroupMessage] = deque()
        self._ready = Event()
        self._error: ZepsError | None = None
        self._closed = False
        self._acks: deque[tuple[int, int]] = deque()  # (seq, credit) noted by ack(), not sent yet (any thread)
        self._flush_posted = False
        if name:
            self.name = name

    # -- application side -----------------------------------------------------------
    def get(self, timeout: float | None = None) -> GroupMessage | None:
        """The next message; None after ``timeout`` seconds with none, or once closed.  Parks the caller."""
        queue = self._queue
        deadline = None if timeout is None else _monotonic() + timeout
        while not queue:
            if self._error is not None:
                raise self._error
            if self._closed:
                return None
            self._ready.clear()
            remaining = None if deadline is None else deadline - _monotonic()
            if remaining is not None and remaining <= 0:
                return None
            self._ready.wait(remaining)
        return queue.popleft()

    def get_many(self, max_count: int = 1024, timeout: float | None = None) -> list[GroupMessage]:
        """Up to ``max_count`` messages at once, in order: waits like :meth:`get` for the first, then takes
        what else is queued; [] after ``timeout`` or once closed.  Each is acknowledged on its own."""
        first = self.get(timeout)
        if first is None:
            return []
        out = [first]
        popleft, append = self._queue.popleft, out.append
        for _ in range(min(len(self._queue), max_count - 1)):   # (no switch in between: safe with greenlets)
            append(popleft())
        return out

    def __iter__(self) -> Iterator[GroupMessage]:
        while True:
            message = self.get(None)
            if message is None:
                return
            yield message

    def ack(self, seq: int, cost: int = 0) -> None:
        """Note ``seq`` acknowledged (``cost``: its credit, given back).  Safe from any greenlet or thread."""
        self._acks.append((seq, cost))  # deque.append: atomic, so any thread may note an ack
        if len(self._acks) >= self.ack_batch and not self._flush_posted:
            self._flush_posted = True
            self.post(self._flush)

    def nack(self, seq: int, delay: float = 0.0, cost: int = 0) -> None:
        """Give ``seq`` back, to be delivered again after ``delay`` s.  Safe from any greenlet or thread."""
        self.post(self._send_nack, seq, max(0, int(round(delay * 1000))), cost)

    @property
    def error(self) -> ZepsError | None:
        return self._error

    @property
    def pending(self) -> int:
        """Messages received and not yet taken."""
        return len(self._queue)

    # -- actor side -----------------------------------------------------------------
    def setup(self) -> None:
        self._sock = None
        self._joined = False
        self._running = False       # setup is over: a PASSIVE answer makes the loop join the other broker
        self._passive = None        # a passive broker's answer: join the other of the pair
        self._heard = _monotonic()
        deadline = _monotonic() + self.timeout
        slice_ = self.timeout if len(self.endpoints) == 1 else max(0.5, self.heartbeat)
        while not self._joined:
            watch = self._connect(watch=True)
            try:
                until = min(deadline, _monotonic() + slice_)
                while not self._joined and self._passive is None:
                    remaining = until - _monotonic()
                    if remaining <= 0 or not _wait(self._sock, watch, remaining, self.curve, self.endpoint):
                        break
                    self._on_frames(self._sock.recv_frames())
                    if self._error is not None and not self._joined:
                        raise self._error
            finally:
                watch.close()
            if self._joined:
                break
            if _monotonic() >= deadline:
                raise ZepsError(self._passive or "no answer to ATTACH/JOIN from %s within %ss" % (
                    ",".join(self.endpoints), self.timeout))
            self._passive = None
            self._next_endpoint()
            gevent.sleep(_PASSIVE_RETRY)
        self._running = True
        self.add_reader(self._sock, self._on_frames)
        self.call_every(self.heartbeat / 2, self._keep_alive)
        self.call_every(self.ack_interval, self._flush)

    def teardown(self) -> None:
        if self._sock is not None and self._joined:
            self._flush()
            try:
                self._sock.send(p.DETACH_FRAME, zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
        self._closed = True
        self._ready.set()

    def _connect(self, watch=False):
        sock, monitor = _actor_dealer(self, self._sock, self.endpoint, self.curve, max(self.window, 4096), watch)
        self._sock = sock
        self._joined = False
        sock.send(p.attach(self.stream))   # JOIN follows its ATTACH-OK (a pair's passive refuses the ATTACH)
        self._heard = _monotonic()
        return monitor

    def _on_frames(self, frames):
        """The reactor's handler: this message, then one batch of what else is waiting (one C call); the
        reactor calls it again while messages wait, up to its drain cap a round (so a fast stream never
        holds the hub)."""
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
        """GROUP-DELIVERs (parsed inline, checked as decode does: the hot path) and the broker's other
        commands, in order; the application is woken once for the batch."""
        sock, append, new = self._sock, self._queue.append, _tuple_new
        received = redelivered = 0
        for frame in frames:
            size = len(frame)
            if size > 17 and frame[2] == g.GROUP_DELIVER:
                seq, deliveries, klen = _DELIVER_HEAD(frame, 3)
                end = 14 + klen
                if size >= end + 4 and _U32(frame, end)[0] == size - end - 4 and frame[0] == 0xAA \
                        and frame[1] == 0xA5:
                    append(new(GroupMessage, (seq, frame[14:end], frame[end + 4:], deliveries, self)))
                    received += 1
                    if deliveries > 1:
                        redelivered += 1
                    continue
            self._command(frame)
            if self._sock is not sock:  # the peering was replaced: the rest came on the old one
                break
        if received:
            stats = self.stats
            stats["received"] += received
            if redelivered:
                stats["redelivered"] += redelivered
            self._ready.set()

    def _command(self, frame):
        try:
            message = g.decode(frame) if g.is_group_command(frame) else p.decode(frame)
        except p.ProtocolError as exc:
            self.stats["invalid_from_broker"] += 1
            log.debug("%s: invalid frame dropped: %s", self.name, exc)
            return
        kind = type(message)
        if kind is p.Ping:
            self._sock.send(p.PING_OK_FRAME)
        elif kind is p.Probe:  # the credit budget's PING (FEATURES "tokens"): we read all that came before it
            self._sock.send(p.probe_ok(message.token))
        elif kind is p.AttachOk:
            self._sock.send(_TOKENS)  # before the JOIN whose CREDIT the broker probes
            self._sock.send(self._join)
        elif kind is g.JoinOk:
            self._joined = True
            self._sock.send(p.credit(self.window))
            self._flush()  # acks noted on the old peering: the broker takes them while nobody holds those
        elif kind is p.Detach:
            if self._passive is None:   # (a passive's DETACH: we are on our way to the other broker)
                self.stats["reattached"] += 1
                self._reconnect()
        elif kind is g.GroupsOk:
            pass
        elif kind is p.Invalid:
            self.stats["invalid"] += 1
            reason = message.reason
            if _passive(reason) and not self._joined:   # the passive of a pair: the other one serves
                self._passive = reason
                if self._running:
                    self._next_endpoint()
                    self.call_later(_PASSIVE_RETRY, self._reconnect)
            elif not self._joined:
                self._fail(ZepsError(reason))
            elif reason.startswith("GROUP: group") and reason.endswith("was deleted"):
                self._fail(ZepsError(reason))
            else:
                log.debug("%s: broker says: %s", self.name, reason)

    def _fail(self, error):
        if self._error is None:
            self._error = error
        self._ready.set()

    def _flush(self):
        """Send the noted acks as ranges, and the credit they free."""
        self._flush_posted = False
        if not self._acks or self._sock is None or not self._joined:
            return
        noted, popleft = self._acks, self._acks.popleft
        taken = [popleft() for _ in range(len(noted))]  # what other threads add meanwhile waits for the next flush
        freed = sum(cost for _, cost in taken)
        acks = sorted(seq for seq, _ in taken)
        ranges, first, last = [], acks[0], acks[0]
        for seq in acks[1:]:
            if seq == last + 1:
                last = seq
            elif seq != last:
                ranges.append((first, last))
                first = last = seq
        ranges.append((first, last))
        sock = self._sock
        for i in range(0, len(ranges), g.MAX_RANGES):
            sock.send(g.ack(ranges[i:i + g.MAX_RANGES]))
        self.stats["acked"] += len(acks)
        if freed:
            sock.send(p.credit(freed))

    def _send_nack(self, seq, delay, cost):
        if self._sock is None or not self._joined:
            return
        self._sock.send(g.nack(seq, delay))
        self.stats["nacked"] += 1
        if cost:
            self._sock.send(p.credit(cost))

    def _reconnect(self):
        self._passive = None
        self._connect()
        self.add_reader(self._sock, self._on_frames)

    def _next_endpoint(self):
        """The next broker of the pair (the same one when there is one)."""
        self.endpoint = self.endpoints[(self.endpoints.index(self.endpoint) + 1) % len(self.endpoints)]

    def _keep_alive(self):
        quiet = _monotonic() - self._heard
        if quiet > self.expiry:
            self.stats["reattached"] += 1
            log.info("%s: broker silent for %.1fs; joining again", self.name, quiet)
            self._next_endpoint()
            self._reconnect()
        elif quiet > self.heartbeat:
            self._sock.send(p.PING_FRAME)

    @command(reply=True)
    def info(self) -> dict[str, Any]:
        """INFO (reply): the stream, the group, messages queued here, and the counters."""
        return {"stream": self.stream.decode(), "group": self.group.decode(), "queued": len(self._queue),
                "counters": dict(self.stats)}
