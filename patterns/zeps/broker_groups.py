"""The ZEPS broker's consumer groups (a mixin of :class:`.broker.Broker`): JOIN, delivery to members by
credit, ACK/NACK/CLAIM, redelivery after ``ack_wait``, dead letters, GROUPS and GROUP-DELETE.

The wire is :mod:`.groups_protocol` (``docs/zeps-extensions.md``); a group's
state is a :class:`~.group_state.Group`, logged per stream by a
:class:`~.group_store.GroupStore` (it survives a restart).  Behaviour:

- A member is a peering that ATTACHed the stream and sent JOIN (once; a
  peering either subscribes or joins).  JOIN creates the group when it does
  not exist.  With permissions, JOIN and GROUP-DELETE need ``consume`` on
  the stream.  Budgets, each refusal an INVALID ``GROUP: ...`` counted in
  ``group_refused``: ``max_groups`` per stream, ``max_groups_per_peer``
  created by one key (or connection), ``max_group_members`` per group,
  ``max_group_pending`` entries per group (delivery of new messages waits).
- Delivery: messages at the acknowledgement level (``stream.delivered_seq``)
  that match the group's pattern go to the members in turn, each paid with
  the member's CREDIT (the broker's credit budget, as for subscribers); a
  member without credit is skipped, so a slow one is never given more than
  it can take.  What is ready to be delivered again goes first.
- A pending entry not acknowledged within ``ack_wait`` (its member silent,
  or gone: a member that leaves gives its entries back at once), or NACKed
  (after its delay), is delivered again to any member; once it has been
  delivered ``max_deliver`` times it is published to the dead-letter stream
  (``dlq`` template, default ``{stream}.dlq.{group}``) with a msgpack body
  holding the reason and the delivery count, and leaves the group.
- ACK/NACK of a sequence the member does not hold (and no live member
  holds) is refused and counted (``group_acks_refused``,
  ``group_nacks_refused``); the group goes on.
- Reads: the journal's tail cache in the loop; older records on the hub's
  threadpool (one read per group at a time).  A stream's groups' journal
  opens (or is created) on the threadpool at its first JOIN (a pair's
  passive: its first group record), never in the loop; at start, in setup.
- A pair (:mod:`.replication`): the active's records go to the passive too;
  JOIN-OK of a new group and GROUP-DELETED wait until they are kept (at our
  level, and with ack="replicated" on the passive); a takeover serves the
  copied groups (:meth:`Groups._groups_take_over`).

Runs in the broker's loop only.
"""
from __future__ import annotations

import bisect
import heapq
import itertools
import json
import logging
import os
import time

import msgpack

from zactors.actors.journal import JournalError, SequenceGone
from zactors.actors.speedups import send_each

from . import groups_protocol as g
from .groups_protocol import GROUP_DELIVER
from . import protocol as p
from .group_state import Entry, Group
from .group_store import GroupStore, load
from .matcher import Filter, PatternError
from .protocol import SIGNATURE
from .names import stream_directory, stream_name

__all__: list[str] = []

log = logging.getLogger("zactors.patterns.zeps.broker")
_monotonic = time.monotonic
#: records read per step, and messages handed out per group per pump
_READ = 512
#: sequences one ACK's ranges may name and be looked up one by one (past that: only what the member holds)
_ACK_SPAN = 65536
#: entries a CLAIM takes at most
_MAX_CLAIM = 1024
#: the cursor is logged when it moved this far over messages that did not match (else with a delivery)
_CURSOR_LOG = 4096
#: messages of one pump step handed to one member in a row before the next member's turn (one send, one
#: wake-up of the member, its acks one range: as a Redis XREADGROUP COUNT 100 or a JetStream fetch(100))
_RUN = 128
#: a NACK's delay at most (ms)
_MAX_NACK_DELAY = 24 * 3600 * 1000
#: entries a CLAIM looks at, per entry it asks for
_CLAIM_SCAN = 16


class _Table:
    """One stream's groups and their store."""

    __slots__ = ("groups", "store", "active")

    def __init__(self, store):
        self.groups = {}  # name -> Group
        self.active = {}  # name -> Group, the groups with members (new messages wake only these)
        self.store = store


class Groups:
    """Consumer groups.  State: ``_tables`` (stream name -> _Table), ``_members`` (identity -> Group),
    ``_due`` (heap of redelivery deadlines: (deadline, n, group, [seq, deliveries, ...]): the entries a pump
    step delivered share one), ``_due_entries`` (the entries it names, live or not), ``_to_pump`` (groups
    whose members acknowledged or gave credit this round: pumped once at its end), ``_group_creators``."""

    def _groups_setup(self):
        self._tables = {}
        self._members = {}
        self._due = []
        self._due_n = itertools.count()
        self._due_entries = 0
        self._to_pump = {}
        self._group_creators = {}
        self._pending_total = 0
        self._tables_loading = {}  # stream name -> [done(table), ...]: its store loads on the threadpool
        for entry in sorted(os.listdir(self.journal_dir)):  # groups of every stream: timers, INFO, metrics
            name = stream_name(entry[:-7]) if entry.endswith(".groups") else None
            if name is not None:
                directory = os.path.join(self.journal_dir, entry)
                try:
                    generation, journal, records = load(directory)   # (at start: blocking is fine)
                    journal.close()     # one at a time: its store opens it again when it logs (the budget)
                    self._new_table(name, directory, (generation, None, records))
                except (JournalError, OSError) as exc:
                    self._table_failed(name, exc)
        self.call_every(0.01, self._groups_due)

    def _groups_teardown(self):
        for table in getattr(self, "_tables", {}).values():
            table.store.close()

    # -- the store ------------------------------------------------------------------------
    def _table_soon(self, name, done):
        """``done(table)`` with the groups of stream ``name``: now if they are loaded, else once its store is
        (opened or created, a few fsyncs: on the threadpool, never in the loop); ``done(None)`` when it
        cannot be opened (counted, logged)."""
        table = self._tables.get(name)
        if table is not None:
            done(table)
            return
        waiting = self._tables_loading.get(name)
        if waiting is not None:
            waiting.append(done)
            return
        self._tables_loading[name] = [done]
        directory = os.path.join(self.journal_dir, stream_directory(name) + ".groups")
        self.run_in_thread(load, directory, on_done=lambda loaded, error: self._table_loaded(name, directory, loaded,
                                                                                              error))

    def _table_loaded(self, name, directory, loaded, error):
        waiting = self._tables_loading.pop(name, ())
        if error is not None:
            if not isinstance(error, (JournalError, OSError)):
                raise error
            self._table_failed(name, error)
            table = None
        else:
            table = self._new_table(name, directory, loaded)
        for done in waiting:
            done(table)

    def _table_failed(self, name, exc):
        self.stats["group_store_errors"] += 1
        log.error("%s: stream %s: cannot open its groups' journal: %s", self.name, name.decode("ascii", "replace"),
                  exc)

    def _new_table(self, name, directory, loaded):
        """The groups of stream ``name`` from what :func:`.group_store.load` read: replayed, their timers set."""
        generation, journal, records = loaded
        policy = self.fsync if isinstance(self.fsync, str) else "interval"
        if self.level == "synced":   # (ack="synced", or "replicated" with replica_ack="synced")
            policy = "batch"
        interval = self.fsync if isinstance(self.fsync, (int, float)) else 0.1
        table = self._tables[name] = _Table(GroupStore(self, directory, generation, journal, policy, interval,
                                                       records))
        now = _monotonic()
        for record in records:
            self._apply_group_record(name, table, record, now)
        for group in table.groups.values():  # recovered entries: held by nobody, delivered again after ack_wait
            self._pending_total += len(group.pending)
            for seq, entry in group.pending.items():
                self._push_due(group, seq, entry)
        return table

    def _apply_group_record(self, name, table, record, now):
        """Replay one logged record of stream ``name``'s groups (at load, and a pair's passive as it copies)."""
        kind, groups = record[0], table.groups
        if kind == "S":
            _, gname, pattern, cursor, ack_wait, max_deliver, counters, flat = record
            group = self._new_group(name, gname, pattern, cursor, ack_wait, max_deliver, counters)
            if group is not None:
                group.load_pending(flat, now)
                groups[gname] = group
        elif kind == "X":
            groups.pop(record[1], None)
        elif kind in ("R", "A"):
            group = groups.get(record[1])
            if group is not None:
                group.apply(record, now)

    def _new_group(self, stream, name, pattern, cursor, ack_wait, max_deliver, counters=None):
        flt = Filter()
        try:
            flt.add(pattern)
        except PatternError:
            return None
        return Group(name, stream, pattern, flt, cursor, ack_wait, max_deliver, counters)

    def _log(self, group, record):
        """Log ``record`` of ``group``; the active of a pair also replicates it (:mod:`.replication`)."""
        self._store_log(self._tables[group.stream], record)
        pair = self._pair
        if pair is not None and pair.active:
            pair.source.group_record(group.stream, record)

    def _store_log(self, table, record):
        store = table.store
        store.log(record)
        if store.should_compact(lambda: sum(len(x.pending) // 512 + 1 for x in table.groups.values())):
            self.stats["group_compactions"] += 1
            table.store.compact(lambda: [x.snapshot() for x in table.groups.values()])

    def _group_kept(self, table, identity, answer, then=None, failed=None):
        """Send ``answer`` to ``identity`` (then call ``then()``) once what ``table``'s store logged so far is
        at the acknowledgement level: in its journal at ours, and with ack="replicated" on the passive of
        the pair too (else INVALID ``GROUP: replication: ...``, counted ``group_unreplicated``, and
        ``failed()``)."""
        def ok():
            self._send(identity, answer)
            if then is not None:
                then()

        def refused(reason):
            self._group_refuse(identity, reason, "group_unreplicated")
            if failed is not None:
                failed()

        def logged():
            if self._pair is None:
                ok()
            else:
                self._pair.source.when_groups_replicated(ok, refused)

        table.store.when(self.level, logged)

    # -- a pair's passive: the active's records, copied (:mod:`.replication`) --------------------
    def _groups_copy(self, name, record):
        """Apply and log ``record`` of stream ``name``'s groups (loaded: :meth:`_table_soon`), as the active
        logged it; returns the store."""
        table = self._tables[name]      # (loaded first: _table_soon)
        self._apply_group_record(name, table, record, _monotonic())
        self._store_log(table, record)
        return table.store

    def _groups_drop(self, name):
        """Forget every group of stream ``name`` (logged): the active's snapshot replaces them."""
        table = self._tables.get(name)
        if table is None:
            return None
        for gname in list(table.groups):
            del table.groups[gname]
            self._store_log(table, ["X", gname])
        table.active.clear()
        return table.store

    def _groups_take_over(self):
        """A passive becomes active: every copied pending entry is held by nobody and delivered again
        after ``ack_wait`` (from now); a group past what this journal has (the old active handed out
        records that never reached us) goes back to the stream's end, its later entries dropped (logged)."""
        now = _monotonic()
        for name, table in self._tables.items():
            stream = self._streams.get(name)
            closed = self._closed_streams.get(name)
            last = stream.journal.last_seq if stream is not None else closed["last_seq"] if closed else None
            for group in table.groups.values():
                group.ready.clear()
                group.held.clear()
                group.batch = None
                if last is not None and (group.cursor > last or any(seq > last for seq in group.pending)):
                    for seq in [seq for seq in group.pending if seq > last]:
                        del group.pending[seq]
                    group.cursor = group.logged_cursor = min(group.cursor, last)
                    self.stats["group_cut_back"] += 1
                    self._store_log(table, group.snapshot())
                for entry in group.pending.values():
                    entry.holder = entry.last = None
                    entry.since, entry.deadline = now, now + group.ack_wait
        self._pending_total = sum(len(g.pending) for t in self._tables.values() for g in t.groups.values())
        self._rebuild_due()

    # -- commands -------------------------------------------------------------------------
    def _on_group_command(self, identity, peer, frame):
        """A frame whose id is a group command's (the hook in the broker's dispatch)."""
        try:
            message = g.decode(frame)
        except p.ProtocolError as exc:
            self._invalid(identity, str(exc))
            return
        if peer is None:
            self._unattached(identity, g.NAMES[message.id])
            return
        kind = type(message)
        if kind is g.Join:
            self._join(peer, message)
        elif kind is g.Groups:
            self._groups_report(peer, message.group)
        elif kind is g.GroupDelete:
            self._group_delete(peer, message.group)
        elif kind in (g.Ack, g.Nack, g.Claim):
            group = self._members.get(identity)
            if group is None:
                self._group_refuse(identity, "%s before JOIN (this peering is in no group)" % g.NAMES[message.id],
                                   "group_not_member")
            elif kind is g.Ack:
                self._ack(peer, group, message.ranges)
            elif kind is g.Nack:
                self._nack(peer, group, message)
            else:
                self._claim(peer, group, message)
        else:
            self._invalid(identity, "a broker does not accept %s" % g.NAMES[message.id])

    def _group_refuse(self, identity, reason, counter):
        self.stats["group_refused"] += 1
        self.stats[counter] += 1
        self._send(identity, p.invalid("GROUP: " + reason))

    def _may_consume(self, peer):
        if self.permissions is None or self.permissions.allows(peer.key, "consume", peer.stream.name):
            return True
        self._refuse(peer.identity, "refused by the broker's permissions: this key may not consume from stream %s"
                     % peer.stream.name.decode(), "refused_consume")
        return False

    def _join(self, peer, message):
        if self._joined_before(peer) or not self._may_consume(peer):
            return
        self._table_soon(peer.stream.name, lambda table: self._join_table(peer, message, table))

    def _joined_before(self, peer):
        identity = peer.identity
        if identity in self._members or peer.filter is not None:
            self._group_refuse(identity, "this peering already %s" % (
                "joined a group" if identity in self._members else "subscribed"), "group_join_twice")
            return True
        return False

    def _join_table(self, peer, message, table):
        """JOIN, once the stream's groups are loaded."""
        identity = peer.identity
        if self._peers.get(identity) is not peer or self._joined_before(peer):
            return      # (it left meanwhile, or sent JOIN twice)
        if table is None:
            self._group_refuse(identity, "stream %s cannot keep groups now (its groups' journal does not open: "
                               "see the broker's log)" % peer.stream.name.decode(), "group_store_refused")
            return
        group = table.groups.get(message.group)
        if group is None:
            group = self._create_group(peer, table, message)
            if group is None:
                return
        if len(group.members) >= self.max_group_members:
            self._group_refuse(identity, "group %s has %d members (at most %d)" % (
                message.group.decode(), len(group.members), self.max_group_members), "group_members_full")
            return
        self._members[identity] = group
        self.stats["group_joined"] += 1
        if group.kept:
            self._send(identity, g.join_ok(group.cursor))
            self._member_in(peer, group)
            return

        def kept():     # a new group is kept (a pair: on the passive too) before it is said, or served
            group.kept = True
            self._member_in(peer, group)

        self._group_kept(table, identity, g.join_ok(group.cursor), kept, lambda: self._members.pop(identity, None))

    def _member_in(self, peer, group):
        """``peer``, told JOIN-OK, is a member now (unless it left, or its group went, meanwhile)."""
        identity = peer.identity
        if self._members.get(identity) is not group or self._peers.get(identity) is not peer \
                or self._tables[group.stream].groups.get(group.name) is not group:
            return
        group.members[identity] = peer
        self._tables[group.stream].active[group.name] = group
        self._pump_group(group)

    def _create_group(self, peer, table, message):
        identity, journal = peer.identity, peer.stream.journal
        if len(table.groups) >= self.max_groups:
            self._group_refuse(identity, "stream %s has %d groups (at most %d)" % (
                peer.stream.name.decode(), len(table.groups), self.max_groups), "group_budget")
            return None
        creator = peer.key or identity
        if self._group_creators.get(creator, 0) >= self.max_groups_per_peer:
            self._group_refuse(identity, "this peer created %d groups (at most %d)" % (
                self._group_creators[creator], self.max_groups_per_peer), "group_budget")
            return None
        start, value = message.start, message.value
        first = journal.first_seq or 1
        if start == g.START_LATEST:
            cursor = peer.stream.delivered_seq
        elif start == g.START_SEQ:
            cursor = max(first, value) - 1
        elif start == g.START_TIME:
            if not journal.cached(first):  # only the tail cache is read in the loop
                self._group_refuse(identity, "a start by time needs the journal in the tail cache: start by "
                                   "sequence instead", "group_start_refused")
                return None
            cursor = max(first, journal.seq_at_time(value / 1e6)) - 1
        else:
            cursor = first - 1
        ack_wait = message.ack_wait / 1000.0 if message.ack_wait else self.group_ack_wait
        max_deliver = message.max_deliver or self.group_max_deliver
        group = self._new_group(peer.stream.name, message.group, message.pattern, cursor, ack_wait, max_deliver)
        if group is None:
            self._group_refuse(identity, "pattern %r is not valid" % message.pattern[:40], "group_bad_pattern")
            return None
        group.creator = creator
        group.kept = False      # until its S record is at the level (JOIN-OK waits for it)
        self._group_creators[creator] = self._group_creators.get(creator, 0) + 1
        table.groups[group.name] = group
        self.stats["groups_created"] += 1
        self._log(group, group.snapshot())
        return group

    def _group_delete(self, peer, name):
        if not self._may_consume(peer):
            return
        table = self._tables.get(peer.stream.name)     # (none: the stream never had a group)
        group = None if table is None else table.groups.pop(name, None)
        if group is None:
            self._group_refuse(peer.identity, "no group %s on stream %s" % (name.decode(), peer.stream.name.decode()),
                               "group_unknown")
            return
        for identity in list(group.members):
            self._members.pop(identity, None)
            if identity != peer.identity:
                self._send(identity, p.invalid("GROUP: group %s was deleted" % name.decode()))
        group.members.clear()
        table.active.pop(name, None)
        self._pending_total -= len(group.pending)
        group.pending.clear()
        if group.creator is not None and group.creator in self._group_creators:
            self._group_creators[group.creator] -= 1
        self._log(group, ["X", name])
        self.stats["groups_deleted"] += 1
        self._group_kept(table, peer.identity, g.group_deleted(name))

    def _ack(self, peer, group, ranges):
        """Acknowledge what ``ranges`` name that this member holds (or nobody holds).  The work is bounded
        by ``_ACK_SPAN`` sequences per ACK, or by what the member holds: a hostile ACK of 1024 huge ranges
        costs no more than an honest one."""
        identity = peer.identity
        done, refused = [], 0
        pending, held = group.pending, group.held.get(identity)
        if sum(last - first + 1 for first, last in ranges) <= _ACK_SPAN:
            rest = []
            for first, last in ranges:
                seqs = range(first, last + 1)
                if held is not None and held.issuperset(seqs):   # all its own: the common case, in C but
                    held.difference_update(seqs)                  # for the entries' removal
                    for seq in seqs:
                        pending.pop(seq, None)    # (held: pending too)
                    done += seqs
                else:
                    rest.append(seqs)
            candidates = (seq for seqs in rest for seq in seqs)
        else:  # only what this member holds, found in the ranges by bisection
            starts = sorted(ranges)
            firsts = [first for first, _ in starts]
            candidates = sorted(seq for seq in group.held.get(identity, ())
                                if (i := bisect.bisect_right(firsts, seq) - 1) >= 0 and seq <= starts[i][1])
            refused += 1
        append = done.append
        for seq in candidates:      # (group.may_ack and group.remove, inline)
            entry = pending.get(seq)
            if entry is None:
                refused += 1
            elif entry.holder == identity:
                del pending[seq]
                held.discard(seq)
                append(seq)
            elif entry.holder is None:
                del pending[seq]
                append(seq)
            else:
                refused += 1
        if held is not None and not held:
            del group.held[identity]
        if refused:
            self.stats["group_acks_refused"] += refused
        if not done:
            self._group_refuse(identity, "ACK of sequences this member does not hold", "group_acks_unheld")
            return
        group.counters["acked"] += len(done)
        self._pending_total -= len(done)
        self._log(group, ["A", group.name, done, False])
        self._pump_soon(group)

    def _nack(self, peer, group, message):
        seq = message.sequence
        entry = group.pending.get(seq)
        if entry is None or entry.holder != peer.identity:
            self.stats["group_nacks_refused"] += 1
            self._group_refuse(peer.identity, "NACK of sequence %d, which this member does not hold" % seq,
                               "group_nacks_unheld")
            return
        group.counters["nacked"] += 1
        delay = min(message.delay, _MAX_NACK_DELAY)
        if delay:
            group.release(seq, _monotonic() + delay / 1000.0)
            self._push_due(group, seq, entry)
        else:
            group.release(seq, None)
            self._pump_group(group)

    def _claim(self, peer, group, message):
        """Take up to ``count`` entries held by others (or nobody) for at least ``min_idle``: delivered
        to this member now, paid with its credit."""
        now = _monotonic()
        idle = message.min_idle / 1000.0
        identity = peer.identity
        taken = []
        count = min(message.count, _MAX_CLAIM)
        for n, (seq, entry) in enumerate(group.pending.items()):
            if len(taken) >= count or n >= _CLAIM_SCAN * max(1, count):
                break
            if entry.holder != identity and now - entry.since >= idle:
                taken.append(seq)
        for seq in taken:
            group.release(seq, None)
        if taken:  # delivered first, before what was ready already (they are at the end of it: move them)
            group.ready.rotate(len(taken))
            group.counters["claimed"] += len(taken)
            self._pump_group(group, only=peer)

    # -- delivery -------------------------------------------------------------------------
    def _push_due(self, group, seq, entry):
        heapq.heappush(self._due, (entry.deadline, next(self._due_n), group, (seq, entry.deliveries)))
        self._due_entries += 1

    def _rebuild_due(self):
        """The heap names mostly entries acknowledged since: keep only the live ones (amortised O(1))."""
        self._due = [(e.deadline, next(self._due_n), grp, (s, e.deliveries))
                     for table in self._tables.values() for grp in table.groups.values()
                     for s, e in grp.pending.items() if e.deadline is not None]
        self._due_entries = len(self._due)
        heapq.heapify(self._due)

    def _groups_due(self):
        """Every 10 ms: entries whose ack_wait (or NACK delay) ran out are ready again."""
        due, now = self._due, _monotonic()
        woken = {}
        while due and due[0][0] <= now:
            deadline, _, group, flat = heapq.heappop(due)
            self._due_entries -= len(flat) // 2
            pending = group.pending
            for k in range(0, len(flat), 2):
                seq = flat[k]
                entry = pending.get(seq)
                if entry is None or entry.deadline != deadline or entry.deliveries != flat[k + 1]:
                    continue  # acknowledged, or delivered again since
                if entry.holder is not None:
                    self.stats["group_ack_timeouts"] += 1
                group.release(seq, None)
                woken[id(group)] = group
        for group in woken.values():
            self._pump_group(group)

    def _groups_written(self, stream):
        """New messages of ``stream`` are at the acknowledgement level (the hook in the hot path)."""
        table = self._tables.get(stream.name)
        if table is not None:
            for group in list(table.active.values()):
                if group.cursor < stream.delivered_seq:
                    self._pump_group(group)

    def _group_credit(self, identity):
        """A member sent CREDIT (the hook in the dispatch)."""
        group = self._members.get(identity)
        if group is not None:
            self._pump_soon(group)

    def _pump_soon(self, group):
        """Pump ``group`` at the end of this round (after the sockets), once for every ACK and CREDIT its
        members sent in it."""
        if not self._to_pump:
            self.post(self._pump_posted)
        self._to_pump[id(group)] = group

    def _pump_posted(self):
        groups = list(self._to_pump.values())
        self._to_pump.clear()
        for group in groups:
            self._pump_group(group)

    def _group_left(self, peer):
        """A peering dropped (the hook in ``_drop``): what it held goes to the others now."""
        group = self._members.pop(peer.identity, None)
        if group is not None:
            group.members.pop(peer.identity, None)
            if not group.members:
                self._tables[group.stream].active.pop(group.name, None)
            if group.release_member(peer.identity):
                self._pump_group(group)

    def _record(self, group, journal, seq):
        """The journal record ``seq`` for ``group``; None while a cold read brings it (the group is pumped
        again then); raises SequenceGone when retention removed it."""
        batch = group.batch
        if batch and batch[0].seq <= seq <= batch[-1].seq and batch[seq - batch[0].seq].seq == seq:
            return batch[seq - batch[0].seq]
        if seq < journal.first_seq:
            raise SequenceGone(journal.first_seq)
        if journal.cached(seq):
            records = journal.read(seq, 1, None)
            return records[0] if records else None
        self._cold_read(group, journal, seq)
        return None

    def _cold_read(self, group, journal, seq):
        if group.reading:
            return
        group.reading = True
        self.stats["group_cold_reads"] += 1

        def done(records, error):
            group.reading = False
            if isinstance(error, SequenceGone):  # retention removed them: gone for this group too
                group.batch = None
                for s in [s for s in group.pending if s < error.first_seq]:
                    self._group_gone(group, s)
                group.cursor = max(group.cursor, error.first_seq - 1)
            elif error is not None:
                log.error("%s: group %s: read of sequence %d failed: %s", self.name, group.name, seq, error)
                self.stats["group_read_errors"] += 1
                return
            else:
                group.batch = records
            self._pump_group(group)

        self.run_in_thread(journal.read, seq, _READ, 1 << 20, on_done=done)

    def _group_gone(self, group, seq):
        if group.remove(seq, dead=True):
            self._pending_total -= 1
            self.stats["group_gone"] += 1
            self._log(group, ["A", group.name, [seq], True])

    def _pump_group(self, group, only=None):
        """Hand what is ready, then new messages, to the members with credit (``only``: that member).

        Never re-entered: a send can drop a peer (unroutable), whose departure (or the credit it frees)
        asks for a pump; that one runs next round."""
        if group.pumping:
            group.again = True
            return
        group.pumping = True
        try:
            again = self._pump_step(group, only)
        finally:
            group.pumping = False
        if again or group.again:  # a bounded step: the rest next round, after the sockets
            group.again = False
            self.call_later(0, self._pump_group, group)

    def _flush(self, group, out):
        """Send each member its frames of this step: one C call per member when nothing waits for it in
        the kernel outbox, else behind what waits.  A member a send finds gone is dropped (unroutable):
        what it held, these too, is ready again for the others."""
        sock = self.router.socket
        handle = sock.handle
        pending, outbox_send, peers = self._outbox_pending, self._outbox_send, self._peers
        for identity, frames in out.items():
            sent = 0 if pending(identity) else send_each(sock, handle, identity, frames)
            for frame in frames[sent:]:
                if identity not in peers:
                    break
                outbox_send(identity, [frame])  # in order; unroutable: the peer is dropped
            if identity not in group.members:
                group.release_member(identity)
                group.again = True

    def _pump_step(self, group, only):
        stream = self._streams.get(group.stream)
        if stream is None or not group.members or group.reading:
            return False
        members = [m for m in ((only,) if only is not None else group.members.values())
                   if m.credit > 0 and not m.held and m.identity in group.members]
        if not members:
            return False
        journal, now = stream.journal, _monotonic()
        counted, log_flat, out = 0, [], {}
        pending = group.pending
        turn = group.turn
        ready = group.ready
        while ready and members:
            seq = ready[0]
            entry = pending.get(seq)
            if entry is None or entry.holder is not None or entry.deadline is not None:
                ready.popleft()
                continue
            try:
                record = self._record(group, journal, seq)
            except SequenceGone:
                ready.popleft()
                self._group_gone(group, seq)
                continue
            if record is None:
                break
            if entry.deliveries >= group.max_deliver:
                ready.popleft()
                if self._dead_letter(group, record, entry.deliveries):
                    self._pending_total -= 1
                    self._log(group, ["A", group.name, [seq], True])
                continue
            if len(members) > 1 and entry.last is not None:  # to another member than last time, if it can
                i = turn[0] % len(members)
                if members[i].identity == entry.last:
                    turn = (i + 1, 0)
            member, turn = self._pick(members, turn, g.group_deliver_cost(record.key, record.body))
            if member is None:
                break
            ready.popleft()
            deliveries = group.deliver(seq, member.identity, now)
            out.setdefault(member.identity, []).append(g.group_deliver(seq, deliveries, record.key, record.body))
            member.delivered += 1
            log_flat += (seq, deliveries)
            counted += 1
        reads, again = 0, False
        while members and only is None and group.cursor < stream.delivered_seq \
                and len(pending) < self.max_group_pending:
            if counted >= 4 * _READ or reads >= 8:
                again = True
                break
            reads += 1
            seq = group.cursor + 1
            batch = group.batch
            if batch and batch[0].seq <= seq <= batch[-1].seq:
                records = batch[seq - batch[0].seq:]
                group.batch = None
            elif journal.cached(seq):
                try:
                    records = journal.read(seq, _READ, 1 << 20)
                except SequenceGone:
                    group.cursor = journal.first_seq - 1
                    continue
            else:
                self._cold_read(group, journal, seq)
                break
            if not records:
                break
            n, turn, stop = self._deliver_new(group, records, members, turn, out, log_flat, now,
                                              min(stream.delivered_seq, records[-1].seq))
            counted += n
            if stop:
                break
        group.turn = turn if not turn[1] else (turn[0] + 1, 0)   # a run ends with its step: the next starts
        if out:                                                      # with the next member (a trickle: in turn)
            self._flush(group, out)
        if log_flat or group.cursor - group.logged_cursor >= _CURSOR_LOG:
            group.logged_cursor = group.cursor
            self._log(group, ["R", group.name, group.cursor, log_flat])
        if log_flat:    # one deadline for the whole step: every entry it (re)delivered
            heapq.heappush(self._due, (now + group.ack_wait, next(self._due_n), group, log_flat))
            self._due_entries += counted
            if self._due_entries > 2 * self._pending_total + 4096:
                self._rebuild_due()
        return again

    def _deliver_new(self, group, records, members, turn, out, log_flat, now, limit):
        """Hand ``records`` (new to the group, ascending, up to sequence ``limit``) to ``members`` by
        their turns and credit, as :meth:`_pick` does (inline for a member's run: the hot path), their
        GROUP-DELIVER frames into ``out``, (seq, 1) into ``log_flat``.  Returns (how many, the next
        turn, True if it stopped before the last record: no member's credit, or the pending budget)."""
        pending, held, match = group.pending, group.held, group.filter
        if group.pattern == b"":
            match = None                # (every key: the common case, no call)
        room = self.max_group_pending - len(pending)
        deadline = now + group.ack_wait
        head, u32 = g.deliver_head, g.u32
        i, run = turn
        n, stop, cursor = 0, False, group.cursor
        current = None      # the member whose run goes on: paid here, else _pick chooses
        for seq, _, key, body in records:
            if seq > limit:
                break
            if room <= n:
                stop = True
                break
            if match is not None and not match(key):
                cursor = seq
                continue
            cost = 18 + len(key) + len(body)        # (g.group_deliver_cost)
            if current is not None and current.credit >= cost:     # (not held: nothing is sent here)
                member = current
                member.credit -= cost
                run += 1
                if run >= _RUN:
                    i, run = i + 1, 0
            else:
                member, (i, run) = self._pick(members, (i, run), cost)
                if member is None:
                    stop = True
                    break
                identity = member.identity
                frames = out.get(identity)
                if frames is None:
                    frames = out[identity] = []
                seqs = held.get(identity)
                if seqs is None:
                    seqs = held[identity] = set()
            current = member if run else None
            member.delivered += 1
            pending[seq] = Entry(identity, now, 1, deadline)
            seqs.add(seq)
            frames.append(head(SIGNATURE, GROUP_DELIVER, seq, 1, len(key)) + key + u32(len(body)) + body)
            log_flat += (seq, 1)
            cursor = seq
            n += 1
        group.cursor = cursor
        group.counters["delivered"] += n
        self._pending_total += n
        return n, (i, run), stop

    @staticmethod
    def _pick(members, turn, cost):
        """The member whose turn it is, if its credit covers ``cost`` (it pays), else the next one;
        members out of credit leave ``members``.  A member gets up to ``_RUN`` messages in a row, so its
        acknowledgements compress to ranges.  ``turn`` is (index, messages so far in its run); returns
        (member or None, the next turn)."""
        i, run = turn
        while members:
            i %= len(members)
            member = members[i]
            if member.credit >= cost and not member.held:
                member.credit -= cost
                run += 1
                return member, ((i + 1, 0) if run >= _RUN else (i, run))
            del members[i]
            run = 0
        return None, (i, 0)

    def _dead_letter(self, group, record, deliveries):
        """Publish ``record`` to the group's dead-letter stream; False (it stays pending) if it cannot."""
        name = self.group_dlq.format(stream=group.stream.decode("latin-1"),
                                     group=group.name.decode("latin-1")).encode("latin-1")
        stream = self._open_soon(name) if len(name) <= self.max_stream_name else None
        if stream is None:  # opening off the loop (tried again in a moment), or refused (after ack_wait)
            opening = name in self._opening
            if not opening:
                self.stats["group_dlq_errors"] += 1
            entry = group.pending[record.seq]
            entry.deadline = _monotonic() + (min(0.05, group.ack_wait) if opening else group.ack_wait)
            self._push_due(group, record.seq, entry)
            return False
        body = msgpack.packb({"stream": group.stream, "group": group.name, "seq": record.seq,
                              "deliveries": deliveries, "body": record.body,
                              "reason": "max_deliver: delivered %d times, never acknowledged" % deliveries})
        try:
            journaled = stream.journal.append_record(record.key, body)
        except JournalError as exc:
            self.stats["group_dlq_errors"] += 1
            log.error("%s: group %s: dead-letter stream %s refused: %s", self.name, group.name, name, exc)
            entry = group.pending[record.seq]
            entry.deadline = _monotonic() + group.ack_wait
            self._push_due(group, record.seq, entry)
            return False
        stream.fresh.append(journaled)
        stream.commit.kick()
        group.remove(record.seq, dead=True)
        self.stats["group_dead_letters"] += 1
        return True

    # -- introspection --------------------------------------------------------------------
    def _group_summary(self, group, now):
        stream = self._streams.get(group.stream)
        closed = self._closed_streams.get(group.stream)
        last = stream.journal.last_seq if stream is not None else closed["last_seq"] if closed else group.cursor
        return dict(group.counters, stream=group.stream.decode("latin-1"), group=group.name.decode("latin-1"),
                    pattern=group.pattern.decode("utf-8", "replace"), cursor=group.cursor,
                    lag=max(0, last - group.cursor), pending=len(group.pending),
                    oldest_pending_age=round(group.oldest_pending_age(now), 3), members=len(group.members),
                    ack_wait=group.ack_wait, max_deliver=group.max_deliver)

    def _groups_info(self, may_see=None):
        """Every group's summary (INFO ``groups``; /metrics and the dashboard read it)."""
        now = _monotonic()
        return [self._group_summary(group, now) for name, table in self._tables.items()
                if may_see is None or may_see(name) for group in table.groups.values()]

    def _groups_report(self, peer, name):
        groups = getattr(self._tables.get(peer.stream.name), "groups", {})   # (no table: no group ever)
        now = _monotonic()
        if name:
            group = groups.get(name)
            report = [] if group is None else [self._group_summary(group, now)]
        else:
            report = [self._group_summary(group, now) for group in groups.values()]
        self.stats["group_queries"] += 1
        self._send(peer.identity, g.groups_ok(json.dumps(report).encode()))
