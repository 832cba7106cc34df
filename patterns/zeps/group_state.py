"""Consumer-group state: a group's cursor, its pending entries, its members (plain objects, no I/O).

A :class:`Group` is what the broker keeps per (stream, group): the cursor
(the last sequence the group has handed out or skipped), the pending
entries (sequence -> :class:`Entry`: holder, since, delivery count, the
deadline of its redelivery), who holds what, the sequences ready to be
delivered again, and counters.  It changes only through its methods, each of
which says what the store must log for it; :meth:`Group.apply` replays what
the store logged (:mod:`.group_store`), so the state after a restart is what
was logged.

Records (msgpack lists, :mod:`.group_store` frames them):

- ``["S", name, pattern, cursor, ack_wait, max_deliver, counters, [seq, deliveries, ...]]``: a whole group
  (written when it is created and by a compaction);
- ``["R", name, cursor, [seq, deliveries, ...]]``: a delivery round;
- ``["A", name, [seq, ...], dead]``: entries that left (acknowledged, or dead-lettered when ``dead``);
- ``["X", name]``: the group was deleted; ``["E"]``: the end of a compaction's snapshot.

Any prefix of that log is a consistent state: an entry is pending or past
the cursor until its ``A`` is logged, so a crash can redeliver, never lose.

Not thread-safe: the broker's loop owns these objects.
"""
from __future__ import annotations

from collections import deque

__all__ = ["Group", "Entry", "COUNTERS"]

#: a group's counters, shown by GROUPS and kept across restarts
COUNTERS = ("delivered", "redelivered", "acked", "dead_letters", "nacked", "claimed")


class Entry:
    """One pending sequence: who holds it (a peering identity, or None: waiting for a member), since when
    (monotonic), how often it was delivered, when it is delivered again (None: not timed), and to whom
    it was delivered last."""

    __slots__ = ("holder", "since", "deliveries", "deadline", "last")

    def __init__(self, holder, since, deliveries, deadline):
        self.holder, self.since, self.deliveries, self.deadline = holder, since, deliveries, deadline
        self.last = holder  # the member it was last delivered to: a redelivery goes to another if it can


class Group:
    """One consumer group of one stream.  See the module docstring."""

    __slots__ = ("name", "stream", "pattern", "filter", "cursor", "ack_wait", "max_deliver", "pending", "held",
                 "ready", "members", "turn", "counters", "logged_cursor", "batch", "reading", "creator", "pumping",
                 "again", "kept")

    def __init__(self, name, stream, pattern, flt, cursor, ack_wait, max_deliver, counters=None):
        self.name = name                  # bytes
        self.stream = stream              # the stream's name (bytes)
        self.pattern = pattern            # bytes, as JOIN gave it
        self.filter = flt                 # a matcher Filter: filter(key) -> bool
        self.cursor = cursor              # last sequence handed out (or skipped: not matching)
        self.ack_wait = ack_wait          # seconds
        self.max_deliver = max_deliver
        self.pending = {}                 # seq -> Entry
        self.held = {}                    # member identity -> set of the seqs it holds
        self.ready = deque()              # seqs to deliver again, first come first served
        self.members = {}                 # identity -> the broker's peer record (insertion order: turns)
        self.turn = (0, 0)                # whose turn it is, and how many it had in a row (the broker's)
        self.counters = dict.fromkeys(COUNTERS, 0)
        if counters:
            self.counters.update((k, v) for k, v in counters.items() if k in self.counters)
        self.logged_cursor = cursor       # the cursor the store has (the broker logs a move past 4096)
        self.batch = None                 # records a cold read brought: [Record, ...]
        self.reading = False              # a cold read is under way for this group
        self.creator = None
        self.pumping = False              # the broker is handing out messages (a send may drop a member)
        self.again = False                # ...and something asked for another pump meanwhile
        self.kept = True                  # False from its creation until that is at the acknowledgement level

    # -- changes (the broker logs what each returns) ------------------------------------
    def deliver(self, seq, holder, now):
        """Hand ``seq`` to ``holder``: a new entry or a redelivery.  Returns its delivery count."""
        entry = self.pending.get(seq)
        if entry is None:
            entry = self.pending[seq] = Entry(holder, now, 1, now + self.ack_wait)
            self.counters["delivered"] += 1
        else:
            self._unhold(seq, entry)
            entry.holder, entry.since, entry.deadline = holder, now, now + self.ack_wait
            entry.last = holder
            entry.deliveries += 1
            self.counters["redelivered"] += 1
        if seq > self.cursor:
            self.cursor = seq
        self.held.setdefault(holder, set()).add(seq)
        return entry.deliveries

    def may_ack(self, seq, member):
        """True if ``member`` may acknowledge ``seq``: it holds it, or no live member does (its holder left,
        its wait ran out, or the broker restarted since it was delivered)."""
        entry = self.pending.get(seq)
        return entry is not None and (entry.holder == member or entry.holder is None)

    def remove(self, seq, dead=False):
        """``seq`` leaves the group (acknowledged, or dead-lettered): log ``["A", name, [seq], dead]``."""
        entry = self.pending.pop(seq, None)
        if entry is None:
            return False
        self._unhold(seq, entry)
        self.counters["dead_letters" if dead else "acked"] += 1
        return True

    def release(self, seq, deadline):
        """Nobody holds ``seq`` now; deliver it again at ``deadline`` (None: as soon as a member can).
        Nothing to log: it stays pending."""
        entry = self.pending[seq]
        self._unhold(seq, entry)
        entry.holder, entry.deadline = None, deadline
        if deadline is None:
            self.ready.append(seq)

    def release_member(self, member):
        """``member`` left: whatever it held is ready for the others.  Returns how many."""
        seqs = self.held.pop(member, ())
        for seq in sorted(seqs):
            entry = self.pending[seq]
            entry.holder, entry.deadline = None, None
            self.ready.append(seq)
        return len(seqs)

    def _unhold(self, seq, entry):
        if entry.holder is not None:
            seqs = self.held.get(entry.holder)
            if seqs is not None:
                seqs.discard(seq)
                if not seqs:
                    del self.held[entry.holder]

    # -- the log ------------------------------------------------------------------------
    def snapshot(self):
        """The ``S`` record of this group now."""
        flat = []
        for seq, entry in self.pending.items():
            flat += (seq, entry.deliveries)
        return ["S", self.name, self.pattern, self.cursor, self.ack_wait, self.max_deliver, self.counters, flat]

    def apply(self, record, now):
        """Replay an ``R`` or ``A`` record of this group (at load: no holder, redelivered after ack_wait)."""
        kind = record[0]
        if kind == "R":
            _, _, cursor, flat = record
            pending, counters = self.pending, self.counters
            for i in range(0, len(flat), 2):
                seq, deliveries = flat[i], flat[i + 1]
                entry = pending.get(seq)
                if entry is None:
                    pending[seq] = Entry(None, now, deliveries, now + self.ack_wait)
                    counters["delivered" if deliveries == 1 else "redelivered"] += 1
                else:
                    entry.deliveries = deliveries
                    counters["redelivered"] += 1
            self.cursor = self.logged_cursor = max(self.cursor, cursor)
        elif kind == "A":
            _, _, seqs, dead = record
            for seq in seqs:
                self.remove(seq, dead)

    def load_pending(self, flat, now):
        """The pending entries of an ``S`` record."""
        for i in range(0, len(flat), 2):
            self.pending[flat[i]] = Entry(None, now, flat[i + 1], now + self.ack_wait)

    def oldest_pending_age(self, now):
        """Seconds since the longest-held pending entry was (re)delivered; 0.0 with none."""
        if not self.pending:
            return 0.0
        return max(0.0, now - min(entry.since for entry in self.pending.values()))
