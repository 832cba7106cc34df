"""The map a Clone server holds: entries by key, its sequence, ttl deadlines, and the KEYS listing.

ttl is kept as a deadline on this process's monotonic clock, in a heap of
``(deadline, sequence, key)`` (a million ttl keys cost one heap entry each);
a heap entry whose key changed since (another sequence) is skipped.  The
journal keeps deadlines as wall-clock time (:meth:`Hashmap.expires_at`).

Plain objects used from the server actor's loop; not thread-safe.
"""
from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Iterator

__all__ = ["Entry", "Hashmap", "LISTING_STEP", "RecentIds"]

_monotonic = time.monotonic

#: keys a KEYS listing looks at per loop round
LISTING_STEP = 20000


class Entry:
    """One key's value and what came with it; replaced whole on every change, never mutated."""

    __slots__ = ("value", "sequence", "uuid", "properties", "deadline")

    def __init__(self, value, sequence, uuid, properties, deadline):
        self.value = value
        self.sequence = sequence
        self.uuid = uuid
        self.properties = properties
        self.deadline = deadline


class Hashmap:
    """``entries`` ({key: :class:`Entry`}) at ``sequence``, and the ttl heap."""

    __slots__ = ("entries", "sequence", "_ttl")

    def __init__(self, entries: dict[bytes, Entry] | None = None, sequence: int = 0) -> None:
        self.entries: dict[bytes, Entry] = {}
        self.sequence = sequence
        self._ttl: list[tuple[float, int, bytes]] = []
        if entries:
            self.replace(entries, sequence)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: bytes) -> Entry | None:
        return self.entries.get(key)

    def set(self, key: bytes, value: bytes, sequence: int, uuid: bytes, properties: bytes,
            ttl: float | None, now: float | None = None) -> None:
        """Apply one change at ``sequence`` (value b"": delete); ``ttl`` in seconds from ``now``.

        The server's hot path (``CloneServer._on_collect``) writes the no-ttl case inline: keep the two alike."""
        self.sequence = sequence
        if not value:
            self.entries.pop(key, None)
            return
        deadline = None
        if ttl is not None:
            deadline = (_monotonic() if now is None else now) + ttl
            heapq.heappush(self._ttl, (deadline, sequence, key))
        self.entries[key] = Entry(value, sequence, uuid, properties, deadline)

    def replace(self, entries: dict[bytes, Entry], sequence: int) -> None:
        """Take ``entries`` (a sync from the peer, or recovered from the journal) as the whole map at ``sequence``."""
        self.entries = entries
        self.sequence = sequence
        self._ttl = [(e.deadline, e.sequence, k) for k, e in entries.items() if e.deadline is not None]
        heapq.heapify(self._ttl)

    # -- ttl ------------------------------------------------------------------
    def due(self, now: float, limit: int) -> Iterator[tuple[bytes, Entry]]:
        """The entries whose deadline passed, earliest first, at most ``limit`` (each popped from the heap)."""
        heap, entries, n = self._ttl, self.entries, 0
        while heap and heap[0][0] <= now and n < limit:
            _deadline, seq, key = heapq.heappop(heap)
            entry = entries.get(key)
            if entry is None or entry.sequence != seq:
                continue  # changed or deleted since
            n += 1
            yield key, entry

    def defer(self, key: bytes, entry: Entry, when: float) -> None:
        """Look at ``entry``'s expiry again at ``when`` (its expiry could not be journaled)."""
        heapq.heappush(self._ttl, (when, entry.sequence, key))

    @staticmethod
    def expires_at(entry: Entry) -> float | None:
        """An entry's deadline as wall-clock time (for the journal), or None."""
        return None if entry.deadline is None else time.time() + (entry.deadline - _monotonic())

    def ttl_keys(self) -> int:
        return sum(1 for e in self.entries.values() if e.deadline is not None)

    # -- reading --------------------------------------------------------------
    def dump(self, prefix: bytes, limit: int) -> dict[bytes, bytes]:
        out = {}
        for key, entry in self.entries.items():
            if key.startswith(prefix):
                out[key] = entry.value
                if len(out) >= limit:
                    break
        return out

    def listing(self, prefix: bytes, limit: int, preview: int | None, delimiter: bytes | None) -> Iterator[None]:
        """The KEYS listing (see :meth:`.CloneServer.keys`) as a cooperative task: :data:`LISTING_STEP`
        keys a step, no sort of the whole map; its result is the generator's return value."""
        names = list(self.entries)  # references only: a few ms at 500k keys
        keys, subtrees = _Smallest(limit), _Smallest(limit)
        counts: dict[bytes, int] = {}
        skip = len(prefix)
        width = len(delimiter) if delimiter else 0
        for start in range(0, len(names), LISTING_STEP):
            for key in names[start:start + LISTING_STEP]:
                if not key.startswith(prefix):
                    continue
                if delimiter:
                    cut = key.find(delimiter, skip + 1)
                    if cut >= 0 and cut + width < len(key):
                        subtree = key[:cut + width]
                        if subtree in counts:
                            counts[subtree] += 1
                        elif subtrees.add(subtree):
                            counts[subtree] = 1
                        continue
                keys.add(key)
            if len(counts) > 2 * limit + LISTING_STEP:  # forget the subtrees past the limit
                kept = set(subtrees.items())
                counts = {sub: n for sub, n in counts.items() if sub in kept}
            yield
        entries, now = self.entries, _monotonic()
        listed = [key if preview is None else _preview(key, entries[key], preview, now)
                  for key in keys.items() if key in entries]
        if delimiter is None:
            return listed
        return {"keys": listed, "subtrees": [[sub, counts[sub]] for sub in subtrees.items()],
                "truncated": keys.dropped or subtrees.dropped}


class RecentIds:
    """The last ``limit`` ids added (UUIDs of applied updates): ``id in recent``; the oldest are forgotten."""

    __slots__ = ("limit", "_ids")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("RecentIds needs a limit >= 1")
        self.limit = limit
        self._ids: OrderedDict[bytes, None] = OrderedDict()   # the oldest first

    def __contains__(self, uid: bytes) -> bool:
        return uid in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, uid: bytes) -> None:
        ids = self._ids
        ids[uid] = None
        if len(ids) > self.limit:
            ids.popitem(last=False)

    def add_new(self, uid: bytes) -> bool:
        """Add ``uid`` and return True, or return False if it is here already (one call on a hot path)."""
        ids = self._ids
        if uid in ids:
            return False
        ids[uid] = None
        if len(ids) > self.limit:
            ids.popitem(last=False)
        return True

    def update(self, uids: Iterator[bytes]) -> None:
        for uid in uids:
            if uid:
                self.add(uid)


def _preview(key, entry, preview, now):
    ttl = None if entry.deadline is None else max(0.0, round(entry.deadline - now, 3))
    return [key, entry.value[:preview], len(entry.value), ttl]


class _Smallest:
    """The ``limit`` smallest distinct items added (sorted by :meth:`items`); ``dropped``: some were not kept."""

    __slots__ = ("limit", "kept", "bound", "dropped")

    def __init__(self, limit):
        self.limit = limit
        self.kept: list[bytes] = []
        self.bound = None       # items at or above this are past the limit for good
        self.dropped = False

    def add(self, item):
        """Keep ``item`` if it may be among the smallest; True if kept."""
        if self.bound is not None and item >= self.bound:
            self.dropped = True
            return False
        self.kept.append(item)
        if len(self.kept) >= 2 * self.limit + 64:
            self._trim()
        return True

    def _trim(self):
        kept = self.kept
        kept.sort()
        if len(kept) > self.limit:
            self.bound = kept[self.limit]
            del kept[self.limit:]
            self.dropped = True

    def items(self):
        self._trim()
        return self.kept
