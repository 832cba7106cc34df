"""Liveness tracking with ticket-style deadlines.

:class:`Liveness` is a plain object an actor owns and consults per message:
``touch`` is O(1), and since every peer shares the same timeouts the peers
stay ordered by last-seen time (like CZMQ ``zloop`` tickets), so finding who
is late only looks at the oldest ones.

:class:`Heartbeat` wraps it as an actor for standalone use.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .actor import Actor, command

if TYPE_CHECKING:
    from .reactor import Timer

__all__ = ["Liveness", "Heartbeat"]

P = TypeVar("P", bound=Hashable)


class Liveness(Generic[P]):
    """Last-seen times of many peers, with evasive and expired deadlines.

    A peer silent for ``evasive`` seconds is reported evasive once (time to
    ping it); silent for ``expired`` seconds it is reported expired and
    forgotten.  Not thread-safe: it belongs to one actor.
    """

    __slots__ = ("evasive", "expired", "_seen", "_clock")

    def __init__(self, evasive: float, expired: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < evasive <= expired:
            raise ValueError("need 0 < evasive <= expired, got %r and %r" % (evasive, expired))
        self.evasive = evasive
        self.expired = expired
        self._seen: OrderedDict[P, list[Any]] = OrderedDict()  # peer -> [last seen, reported evasive]
        self._clock = clock

    def touch(self, peer: P, now: float | None = None) -> None:
        """``peer`` was heard from (adds it if new)."""
        entry = self._seen.get(peer)
        when = self._clock() if now is None else now
        if entry is None:
            self._seen[peer] = [when, False]
        else:
            entry[0] = when
            entry[1] = False
            self._seen.move_to_end(peer)

    def forget(self, peer: P) -> bool:
        """Stop tracking ``peer``; True if it was tracked."""
        return self._seen.pop(peer, None) is not None

    def last_seen(self, peer: P) -> float | None:
        entry = self._seen.get(peer)
        return None if entry is None else entry[0]

    def __contains__(self, peer: object) -> bool:
        return peer in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def __iter__(self) -> Iterator[P]:
        return iter(self._seen)

    def next_deadline(self) -> float | None:
        """Monotonic time at which :meth:`check` next has news (None: no peers)."""
        best = None
        for seen, reported in self._seen.values():
            due = seen + (self.expired if reported else self.evasive)
            if best is None or due < best:
                best = due
            if not reported:
                break  # every later peer was seen later still
        return best

    def check(self, now: float | None = None) -> tuple[list[P], list[P]]:
        """``(evasive, expired)`` peer lists as of ``now``; expired peers are forgotten."""
        now = self._clock() if now is None else now
        evasive: list[P] = []
        expired: list[P] = []
        evasive_before = now - self.evasive
        expired_before = now - self.expired
        for peer, entry in self._seen.items():
            seen = entry[0]
            if seen > evasive_before:
                break
            if seen <= expired_before:
                expired.append(peer)
            elif not entry[1]:
                entry[1] = True
                evasive.append(peer)
        for peer in expired:
            del self._seen[peer]
        return evasive, expired


class Heartbeat(Actor):
    """Liveness as an actor.

    Commands: ``TOUCH peer`` (no reply), ``FORGET peer`` (no reply),
    ``PEERS`` (reply: list of tracked peers).
    Events: ``EVASIVE peer``, ``EXPIRED peer``.
    """

    def __init__(self, evasive: float, expired: float) -> None:
        self.liveness: Liveness[Any] = Liveness(evasive, expired)
        self._timer: Timer | None = None

    def _rearm(self):
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.liveness.next_deadline()
        if deadline is not None:
            self._timer = self.call_later(max(0.0, deadline - time.monotonic()), self._on_deadline)

    def _on_deadline(self):
        self._timer = None
        evasive, expired = self.liveness.check()
        for peer in evasive:
            self.emit("EVASIVE", peer)
        for peer in expired:
            self.emit("EXPIRED", peer)
        self._rearm()

    @command
    def touch(self, peer: Any) -> None:
        first = len(self.liveness) == 0
        self.liveness.touch(peer)
        if first or self._timer is None:
            self._rearm()

    @command
    def forget(self, peer: Any) -> None:
        self.liveness.forget(peer)

    @command(reply=True)
    def peers(self) -> list[Any]:

        return list(self.liveness)
