"""Budget: one allowance of bytes that many holders draw from (the kernel's shared budgets).

A node must bound in total what its peers can make it hold, not only each
peer: ZEPS credit windows, Clone snapshots in flight.  A :class:`Budget` is
that total, with an optional cap per holder::

    windows = Budget(64 << 20, per_holder=16 << 20)
    got = windows.request(peer, 8 << 20)   # what may be used now (0..8 MiB)
    ...                                    # the rest waits, first come first served
    for holder, amount in windows.release(peer, 1 << 20):
        grant(holder, amount)              # waiters served from what came back
    windows.forget(other)                  # its holding back, its wait cancelled
    windows.revoke(idle, 4 << 20)          # unused: back in line behind the others

What a holder asks beyond what is free (or beyond ``per_holder`` held)
waits, and is granted by a later :meth:`release` or :meth:`forget`; a
holder never holds more than ``per_holder`` nor waits for more than that
(the excess is dropped, counted in :attr:`dropped`), except what
:meth:`charge` puts back on its books.  :attr:`deferred`
counts requests not granted in full.

Fair shares: what comes back goes first to each waiter up to its
:attr:`fair_share` (the total split evenly among the holders and waiters),
then to the waiters first come first served.  An owner revokes only what a
holder keeps unused beyond its fair share (:meth:`excess`), so peers that
ask for everything and never use it cannot starve one that takes a little
and uses it: at worst each keeps its share.

Not thread-safe: a budget belongs to one actor (its greenlet).  Nothing
here blocks.
"""
from __future__ import annotations

from collections.abc import Hashable

__all__ = ["Budget"]


class Budget:
    """``total`` units shared by holders, each holding at most ``per_holder`` (see the module docstring)."""

    __slots__ = ("total", "per_holder", "used", "deferred", "dropped", "_held", "_wanted", "_parties")

    def __init__(self, total: int, per_holder: int | None = None) -> None:
        if total < 1 or (per_holder is not None and per_holder < 1):
            raise ValueError("a budget needs total >= 1 and per_holder >= 1 (or None)")
        self.total = total
        self.per_holder = total if per_holder is None else min(per_holder, total)
        self.used = 0
        self.deferred = 0                      # requests not granted in full at once
        self.dropped = 0                       # units asked beyond per_holder: never granted
        self._held: dict[Hashable, int] = {}
        self._wanted: dict[Hashable, int] = {}  # holder -> units waiting, in arrival order
        self._parties = 0                      # holders that hold or wait (or both)

    def request(self, holder: Hashable, amount: int) -> int:
        """Take up to ``amount`` for ``holder`` now and return it; the rest waits (see :meth:`release`)."""
        wanted = self._wanted.get(holder, 0)
        if wanted:  # behind its own earlier wait, in order
            keep = min(amount, self.per_holder - wanted)
            self.dropped += amount - keep
            self._wanted[holder] = wanted + keep
            return 0
        held = self._held.get(holder, 0)
        if not held and amount > 0:
            self._parties += 1
        granted = max(0, min(amount, self.per_holder - held, self.total - self.used))
        if granted:
            self.used += granted
            self._held[holder] = held + granted
        rest = amount - granted
        if rest:
            keep = min(rest, self.per_holder)
            self.dropped += rest - keep
            self.deferred += 1
            self._wanted[holder] = keep
        return granted

    def release(self, holder: Hashable, amount: int) -> list[tuple[Hashable, int]]:
        """``holder`` gives back ``amount``; returns ``[(waiter, granted), ...]`` served from what is free."""
        return self._serve() if self._take(holder, amount) else []

    def _take(self, holder, amount):
        """Take up to ``amount`` of what ``holder`` holds off the books; the amount taken."""
        held = self._held.get(holder, 0)
        amount = min(amount, held)
        if amount <= 0:
            return 0
        if held == amount:
            del self._held[holder]
            if holder not in self._wanted:
                self._parties -= 1
        else:
            self._held[holder] = held - amount
        self.used -= amount
        return amount

    def forget(self, holder: Hashable) -> list[tuple[Hashable, int]]:
        """Cancel ``holder``'s wait and take back all it holds; returns the grants to waiters, as :meth:`release`."""
        wanted = self._wanted.pop(holder, 0)
        held = self._held.pop(holder, 0)
        if wanted or held:
            self._parties -= 1
        self.used -= held
        return self._serve() if held else []

    def revoke(self, holder: Hashable, amount: int) -> list[tuple[Hashable, int]]:
        """Take ``amount`` of what ``holder`` holds back into its wait (at the end of the line):
        for what it holds but does not use.  Returns the grants made, as :meth:`release`."""
        amount = min(amount, self._held.get(holder, 0))
        if amount <= 0:
            return []
        wanted = self._wanted.pop(holder, 0)
        self._wanted[holder] = min(wanted + amount, self.per_holder)  # (still a party: _take keeps the count)
        self._take(holder, amount)
        return self._serve()

    def charge(self, holder: Hashable, amount: int) -> None:
        """Put ``amount`` on ``holder``'s books whatever is free (``used`` may pass ``total`` until
        releases bring it back): for units held elsewhere that come back under this budget."""
        if amount <= 0:
            return
        held = self._held.get(holder, 0)
        if not held and holder not in self._wanted:
            self._parties += 1
        self._held[holder] = held + amount
        self.used += amount

    def cancel(self, holder: Hashable) -> int:
        """Cancel ``holder``'s wait (it keeps what it holds); returns the units it was waiting for."""
        wanted = self._wanted.pop(holder, 0)
        if wanted and holder not in self._held:
            self._parties -= 1
        return wanted

    def held(self, holder: Hashable) -> int:
        return self._held.get(holder, 0)

    def wanted(self, holder: Hashable) -> int:
        return self._wanted.get(holder, 0)

    @property
    def waiting(self) -> int:
        """Holders waiting."""
        return len(self._wanted)

    def holders(self) -> list[Hashable]:
        """The holders holding something now (a new list)."""
        return list(self._held)

    @property
    def fair_share(self) -> int:
        """The total split evenly among the holders and the waiters (at most ``per_holder``)."""
        return min(self.per_holder, self.total // max(1, self._parties))

    def excess(self, holder: Hashable) -> int:
        """What ``holder`` holds beyond its fair share."""
        return max(0, self._held.get(holder, 0) - self.fair_share)

    def _serve(self):
        """Serve the waiters from what is free: each up to its fair share, then first come first served."""
        granted = {}
        wanted = self._wanted
        if wanted and self.used < self.total:
            fair = self.fair_share
            for holder in list(wanted):
                if not self._grant(holder, fair, granted):
                    break
            for holder in list(wanted):
                if not self._grant(holder, self.per_holder, granted):
                    break
        return list(granted.items())

    def _grant(self, holder, cap, granted):
        """Grant ``holder``'s wait from what is free, up to ``cap`` held; False once nothing is free."""
        free = self.total - self.used
        if free <= 0:
            return False
        want = self._wanted.get(holder, 0)
        held = self._held.get(holder, 0)
        amount = min(want, free, cap - held)
        if amount > 0:  # (else: at its cap, the next in line may take it)
            self.used += amount
            self._held[holder] = held + amount
            if amount == want:
                del self._wanted[holder]
            else:
                self._wanted[holder] = want - amount
            granted[holder] = granted.get(holder, 0) + amount
        return True

    def __repr__(self):
        return "<Budget %d/%d used, %d waiting>" % (self.used, self.total, len(self._wanted))
