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
waits, first come first served, and is granted by a later :meth:`release`
or :meth:`forget`: each waiter first up to its :attr:`fair_share` (the
total over the holders and waiters), then, if units are left, what it still
wants, in turn (so ten waiters share a budget that one could fill); a holder never holds more than ``per_holder`` nor waits
for more than that (the excess is dropped, counted in :attr:`dropped`).
:attr:`deferred` counts requests not granted in full.

Not thread-safe: a budget belongs to one actor (its greenlet).  Nothing
here blocks.
"""
from __future__ import annotations

from collections.abc import Hashable

__all__ = ["Budget"]


class Budget:
    """``total`` units shared by holders, each holding at most ``per_holder`` (see the module docstring)."""

    __slots__ = ("total", "per_holder", "used", "deferred", "dropped", "_held", "_wanted")

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

    def request(self, holder: Hashable, amount: int) -> int:
        """Take up to ``amount`` for ``holder`` now and return it; the rest waits (see :meth:`release`)."""
        wanted = self._wanted.get(holder, 0)
        if wanted:  # behind its own earlier wait, in order
            keep = min(amount, self.per_holder - wanted)
            self.dropped += amount - keep
            self._wanted[holder] = wanted + keep
            return 0
        held = self._held.get(holder, 0)
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
        else:
            self._held[holder] = held - amount
        self.used -= amount
        return amount

    def forget(self, holder: Hashable) -> list[tuple[Hashable, int]]:
        """Cancel ``holder``'s wait and take back all it holds; returns the grants to waiters, as :meth:`release`."""
        self._wanted.pop(holder, None)
        held = self._held.pop(holder, 0)
        self.used -= held
        return self._serve() if held else []

    def revoke(self, holder: Hashable, amount: int) -> list[tuple[Hashable, int]]:
        """Take ``amount`` of what ``holder`` holds back into its wait (at the end of the line):
        for what it holds but does not use.  Returns the grants made, as :meth:`release`."""
        amount = self._take(holder, amount)
        if not amount:
            return []
        wanted = self._wanted.pop(holder, 0)
        self._wanted[holder] = min(wanted + amount, self.per_holder)
        return self._serve()

    def cancel(self, holder: Hashable) -> int:
        """Cancel ``holder``'s wait (it keeps what it holds); returns the units it was waiting for."""
        return self._wanted.pop(holder, 0)

    def held(self, holder: Hashable) -> int:
        return self._held.get(holder, 0)

    def wanted(self, holder: Hashable) -> int:
        return self._wanted.get(holder, 0)

    @property
    def fair_share(self) -> int:
        """The total over the holders and waiters (the total when there are none)."""
        n = len(self._held.keys() | self._wanted.keys())
        return max(1, self.total // n) if n else self.total

    @property
    def waiting(self) -> int:
        """Holders waiting."""
        return len(self._wanted)

    def holders(self) -> list[Hashable]:
        """The holders holding something now (a new list)."""
        return list(self._held)

    def _serve(self):
        """Grant waiters, in turn: first each up to its fair share, then what is left (a list of grants)."""
        grants = {}
        wanted, held = self._wanted, self._held
        for share in (self.fair_share, self.per_holder):
            for holder in list(wanted):
                free = self.total - self.used
                if free <= 0:
                    break
                want = wanted[holder]
                granted = min(want, free, min(share, self.per_holder) - held.get(holder, 0))
                if granted <= 0:  # at its share or its own cap: the next in line may take it
                    continue
                self.used += granted
                held[holder] = held.get(holder, 0) + granted
                if granted == want:
                    del wanted[holder]
                else:
                    wanted[holder] = want - granted
                grants[holder] = grants.get(holder, 0) + granted
        return list(grants.items())

    def __repr__(self):
        return "<Budget %d/%d used, %d waiting>" % (self.used, self.total, len(self._wanted))
