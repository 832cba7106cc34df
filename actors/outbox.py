"""Outbox: the kernel's one backpressure mechanism for an actor's sends to many peers.

An actor that sends to many peers (a ROUTER's identities, Harmony's
per-peer DEALERs, ZEPS subscribers, Clone snapshot clients) must never lose
a message because one peer reads slowly, never let that peer stall the
others, and never grow memory without bound.  :class:`Outbox` does this once
for all of them:

* ``send(peer, frames)`` hands the message to the actor's ``transmit(peer,
  frames)``, which returns None (sent), ``errno.EAGAIN`` (would block: the
  peer is at its high-water mark) or another errno (the peer is gone, e.g.
  ``EHOSTUNREACH`` from a ``ROUTER_MANDATORY`` socket).
* A peer that would block gets a bounded per-peer queue; later messages to
  it queue behind, so order is kept.  The queues are retried from a reactor
  timer with backoff (``retry_min`` doubling to ``retry_max``; back to the
  minimum whenever one went out), so only that peer waits and the loop goes
  on.
* When a peer's queue reaches ``high`` messages it is *held*:
  ``on_held(peer)`` tells the producer to pause (stop reading its command
  pipe, stop delivering to that subscriber, pause a snapshot task).  When
  the queue is back down to ``low`` (or the peer is dropped) it is
  *drained*: ``on_drained(peer)``.  :attr:`held` is the set of held peers.
* A message beyond ``limit`` queued messages is refused: ``on_overflow(peer,
  frames)``.  A peer found gone drops its message(s): ``on_unroutable(peer,
  frames)`` per message.  By default both count in ``actor.stats``
  (``overflow``, ``unroutable``) and log.

Credit (``credit=True``): a gate the outbox consults before every send, for
credit-based flow control (ZEPS: a subscriber grants credit in bytes).  Each
peer has a balance, 0 until :meth:`grant` adds to it.  A message may go while
the balance is positive; its ``cost(frames)`` (default: the sum of the frame
lengths) is then deducted, so a balance can end below zero by less than one
message, and a message larger than the whole window still goes (no
deadlock).  With no credit left, messages wait in the same per-peer queue,
held and drained as above, and :meth:`grant` sends what the new credit
allows at once.  There is no second queue and no timer for credit.

Use (inside an actor; a ROUTER gets this from :class:`~zactors.actors.router.Router`)::

    self.outbox = Outbox(self, lambda peer, frames: send_now(peer.dealer, frames),
                         limit=20000, high=10000,           # low: high // 2
                         on_held=self.pause_producing,      # e.g. pause_commands(), task pause
                         on_drained=self.resume_producing)
    self.outbox.send(peer, [b"frame", b"frame"])           # True: sent or queued, in order

    # credit (ZEPS-style): nothing goes until granted, then while the balance is positive
    deliveries = Outbox(self, transmit, credit=True, cost=lambda frames: len(frames[-1]))
    deliveries.grant(subscriber, 1 << 20)                    # on each CREDIT from the subscriber

A producer that must not queue at all checks first: ``pending(peer)``,
``peer in outbox.held``, ``credit_of(peer)``.  :meth:`flush` retries
blocked peers at once (call it when a POLLOUT you watch fires).

Not thread-safe: an outbox belongs to one actor and is used from its
greenlet only (its handlers, timers and tasks).  Nothing here blocks.
"""
from __future__ import annotations

import errno
import logging
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import zmq

from .speedups import send_message

if TYPE_CHECKING:
    from .actor import Actor
    from .sockets import Socket

__all__ = ["Outbox", "send_now", "EAGAIN"]

log = logging.getLogger(__name__)

#: what ``transmit`` returns when the peer is at its high-water mark
EAGAIN = errno.EAGAIN


def send_now(sock: Socket, frames: Sequence[bytes]) -> int | None:
    """Send one whole message without blocking: None, or the errno that refused it.

    The kernel's send path (C when built) never sends half a message: the
    first frame decides, and ``EAGAIN``/``EHOSTUNREACH`` leave nothing queued.
    """
    try:
        send_message(sock, sock.handle, frames)
    except zmq.ZMQError as exc:
        return exc.errno
    return None


_RETRYING = object()


def _size(frames):
    return sum(map(len, frames))


class Outbox:
    """Per-peer bounded, ordered outboxes for one actor (see the module docstring).

    ``peer`` keys are anything hashable (a ROUTER identity, a peer object).
    ``transmit(peer, frames)`` returns None, ``EAGAIN`` or another errno.
    """

    __slots__ = ("actor", "limit", "high", "low", "retry_min", "retry_max", "held",
                 "_transmit", "_queues", "_blocked", "_credit", "_cost", "_timer", "_delay",
                 "on_held", "on_drained", "on_overflow", "on_unroutable")

    def __init__(self, actor: Actor, transmit: Callable[[Any, Sequence[bytes]], int | None], *,
                 limit: int = 10000, high: int | None = None, low: int | None = None,
                 on_held: Callable[[Any], object] | None = None, on_drained: Callable[[Any], object] | None = None,
                 on_overflow: Callable[[Any, Sequence[bytes]], object] | None = None,
                 on_unroutable: Callable[[Any, Sequence[bytes]], object] | None = None,
                 credit: bool = False, cost: Callable[[Sequence[bytes]], int] | None = None,
                 retry_min: float = 0.001, retry_max: float = 0.05) -> None:
        if limit < 1:
            raise ValueError("an outbox must hold at least one message")
        high = limit if high is None else high
        low = high // 2 if low is None else low
        if not 0 <= low < high <= limit:
            raise ValueError("outbox thresholds need 0 <= low < high <= limit (%r, %r, %r)" % (low, high, limit))
        if not 0 < retry_min <= retry_max:
            raise ValueError("retry delays need 0 < retry_min <= retry_max")
        self.actor = actor
        self.limit = limit
        self.high = high
        self.low = low
        self.retry_min = retry_min
        self.retry_max = retry_max
        self.held: set[Any] = set()        # peers whose queue reached `high` and has not drained to `low`
        self._transmit = transmit
        self._queues: dict[Any, deque[Sequence[bytes]]] = {}        # peer -> deque of frame lists; only while something waits
        self._blocked: set[Any] = set()    # peers whose transport said EAGAIN: retried by the timer
        self._credit: dict[Any, int] | None = {} if credit else None   # peer -> balance (credit mode)
        self._cost = cost or _size
        self._timer = None
        self._delay = retry_min
        self.on_held = on_held
        self.on_drained = on_drained
        self.on_overflow = on_overflow or self._count_overflow
        self.on_unroutable = on_unroutable or self._count_unroutable

    # -- sending ------------------------------------------------------------
    def send(self, peer: Hashable, frames: Sequence[bytes]) -> bool:
        """Send ``frames`` to ``peer`` now, or queue them behind its earlier messages.

        True when sent or queued (it will go, in order, unless the peer goes
        away); False when refused: the peer is gone (``on_unroutable``) or
        its queue is at ``limit`` (``on_overflow``).
        """
        queue = self._queues.get(peer)
        if queue is None:
            credit = self._credit
            if credit is None:
                outcome = self._transmit(peer, frames)
                if outcome is None:
                    return True
            else:
                balance = credit.get(peer, 0)
                if balance > 0:
                    outcome = self._transmit(peer, frames)
                    if outcome is None:
                        credit[peer] = balance - self._cost(frames)
                        return True
                else:
                    outcome = None  # no credit: wait for a grant
            if outcome is not None and outcome != EAGAIN:
                self.on_unroutable(peer, frames)
                return False
            self._queues[peer] = deque((frames,))
            if outcome is not None:
                self._block(peer)
            if self.high == 1:  # a queue of one is already full
                self._hold(peer)
            return True
        size = len(queue)
        if size >= self.limit:
            self.on_overflow(peer, frames)
            return False
        queue.append(frames)
        if size + 1 >= self.high and peer not in self.held:
            self._hold(peer)
        return True

    def pending(self, peer: Hashable) -> int:
        """Messages waiting for ``peer``."""
        queue = self._queues.get(peer)
        return 0 if queue is None else len(queue)

    def waiting(self) -> list[Any]:
        """Peers with messages waiting (a new list)."""
        return list(self._queues)

    def drop(self, peer: Hashable) -> list[Sequence[bytes]]:
        """Forget ``peer`` (it left): its credit and queue; returns the unsent messages.

        A held peer is drained by this (``on_drained`` runs).
        """
        queue = self._queues.pop(peer, None)
        self._blocked.discard(peer)
        if self._credit is not None:
            self._credit.pop(peer, None)
        if peer in self.held:
            self._drained(peer)
        return [] if queue is None else list(queue)

    # -- credit -------------------------------------------------------------
    def grant(self, peer: Hashable, amount: int) -> None:
        """Add ``amount`` to ``peer``'s credit and send what it now allows (credit mode)."""
        credit = self._credit
        if credit is None:
            raise RuntimeError("this outbox does not use credit")
        credit[peer] = credit.get(peer, 0) + amount
        queue = self._queues.get(peer)
        if queue is not None and peer not in self._blocked:
            self._flush_one(peer, queue)

    def credit_of(self, peer: Hashable) -> int | None:
        """``peer``'s credit balance (None when the outbox does not use credit)."""
        credit = self._credit
        return None if credit is None else credit.get(peer, 0)

    # -- flushing -----------------------------------------------------------
    def flush(self) -> bool:

        """Retry every blocked peer now; True if any message went out.

        The retry timer calls this; call it yourself when you know a peer
        drained (e.g. a POLLOUT you watch).
        """
        progressed = False
        for peer in list(self._blocked):
            self._blocked.discard(peer)
            queue = self._queues.get(peer)
            if queue is not None and self._flush_one(peer, queue):
                progressed = True
        return progressed

    def _flush_one(self, peer, queue):
        """Send from the head of ``peer``'s queue while transport and credit allow; True if any went."""
        transmit = self._transmit
        credit = self._credit
        sent = 0
        while queue:
            frames = queue[0]
            if credit is not None:
                balance = credit.get(peer, 0)
                if balance <= 0:
                    break
            outcome = transmit(peer, frames)
            if outcome is None:
                queue.popleft()
                sent += 1
                if credit is not None:
                    credit[peer] = balance - self._cost(frames)
            elif outcome == EAGAIN:
                self._block(peer)
                break
            else:  # gone with messages still waiting
                dropped = list(queue)
                queue.clear()
                for frames in dropped:
                    self.on_unroutable(peer, frames)
                break
        if not queue:
            if self._queues.get(peer) is queue:  # a hook may have dropped the peer meanwhile
                del self._queues[peer]
            self._blocked.discard(peer)
        if peer in self.held and len(queue) <= self.low:
            self._drained(peer)
        return sent > 0

    def _block(self, peer):
        self._blocked.add(peer)
        if self._timer is None:
            self._timer = self.actor.call_later(self._delay, self._retry)

    def _retry(self):
        self._timer = _RETRYING  # peers blocking again during the flush are timed below, with the new delay
        progressed = self.flush()
        self._timer = None
        if self._blocked:
            self._delay = self.retry_min if progressed else min(self._delay * 2, self.retry_max)
            self._timer = self.actor.call_later(self._delay, self._retry)
        else:
            self._delay = self.retry_min

    # -- signals and default hooks --------------------------------------------
    def _hold(self, peer):
        self.held.add(peer)
        self.actor.stats["held"] += 1
        if self.on_held is not None:
            self.on_held(peer)

    def _drained(self, peer):
        self.held.discard(peer)
        if self.on_drained is not None:
            self.on_drained(peer)

    def _count_unroutable(self, peer, frames):
        self.actor.stats["unroutable"] += 1
        log.debug("%s: no peer %r; message dropped", self.actor.name, peer)

    def _count_overflow(self, peer, frames):
        self.actor.stats["overflow"] += 1
        log.warning("%s: outbox for %r is full (%d); message refused", self.actor.name, peer, self.limit)

    def __repr__(self):
        return "<Outbox %d waiting, %d held>" % (len(self._queues), len(self.held))
