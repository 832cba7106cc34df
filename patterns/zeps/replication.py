"""Replication between the brokers of a pair (:mod:`.pair`): the active's :class:`Source`, the passive's :class:`Replica`.

One mechanism does both catch-up and live replication: the passive says
where each of its streams stands (FOLLOW: epoch history and last sequence); the
active answers with where to start (STREAMS: after the last sequence both
agree on, the passive cutting what it holds past it; for a stream the
passive lacks, or holds only before the active's retention, a reset to the
active's first retained sequence), and the
target each stream must reach before the passive is ready to take over
(:attr:`BinaryStar.ready`).  Then the active streams records (REC batches
of up to 4,096 records / 1 MiB, each ``[seq, ts, key, body]`` with ``producer, pseq`` after it when it
has one, packed as the reader gives them, read with their producers from its journal
files by a :class:`~zactors.actors.journal.JournalReader` on the hub's
threadpool, never in the loop), every stream round-robin, at most
``window`` bytes not yet acknowledged (the passive's ACK, sent once the
records are at its level: the credit).  Live records of a stream that has
no producers (no PUBLISH-ID) come from its journal's tail cache, in the
loop; the others are the same reads of what was just written (the page
cache).

The passive appends each record at the same sequence with its timestamp
and producer (so idempotent publishing keeps deduplicating after a
failover) and adopts the active's epoch history as it reaches each epoch.

Consumer groups ride the same session: every record the active logs for a
group (:mod:`.group_state`: create, deliveries, acks, dead letters, delete)
goes to the passive in GREC batches, numbered one by one (on across
sessions); a session starts with a snapshot of every group (``B``, the ``S`` records, ``E``).
The passive applies and logs them as the active did (its own group store)
and acknowledges the last number once its stores have it at its level (the
ACK's third field); it is not ready before the snapshot is acknowledged.
Group records not yet acknowledged are bounded by ``window`` bytes: past
that, the passive starts over (AGAIN, a new snapshot).

``ack="replicated"``: a PING-OK and live delivery wait until the passive
has acknowledged the record (:meth:`Source.when_replicated`, :meth:`Source.reached`);
a JOIN-OK that created a group, and a GROUP-DELETED, until it has the group
records logged so far (:meth:`Source.when_groups_replicated`).
When the passive is absent or its acknowledgement lags ``passive_timeout``
seconds behind: ``on_passive_lost="wait"`` answers the waiting PINGs with
INVALID ``"PING: replication: ..."`` (the publisher's ``flush`` raises, its
messages are kept and resent) and keeps delivery waiting; ``"degrade"``
acknowledges at the local level instead (at once on a takeover from a silent
peer: no passive can follow then), logs it, and says so in INFO
(``degraded``) until a ready passive follows again.

Runs in the broker's loop only.
"""
from __future__ import annotations

import logging
import os
import secrets
import shutil
import time
from collections import deque

import msgpack

from zactors.actors import bstar
from zactors.actors.journal import JournalError, JournalReader, SequenceGone
from zactors.actors.journal import replica as jr

from .names import stream_directory

__all__ = ["Source", "Replica", "pack", "unpack"]

_packer = msgpack.Packer(use_bin_type=True)

log = logging.getLogger("zactors.patterns.zeps.broker")
_monotonic = time.monotonic
#: records and bytes per REC batch
_BATCH_RECORDS, _BATCH_BYTES = 4096, 1 << 20


def pack(value):
    """A structured frame of the pair link (msgpack)."""
    return msgpack.packb(value, use_bin_type=True)


def unpack(frame):
    return msgpack.unpackb(frame, raw=False, strict_map_key=False, use_list=True)


def _stream_position(broker, name):
    """(epochs, first_seq, last_seq) of a stream: from its open journal (what is written), else its files."""
    stream = broker._streams.get(name)
    if stream is not None:
        journal = stream.journal
        return journal.epochs, journal.first_seq, journal.written_seq
    return jr.position(os.path.join(broker.journal_dir, stream_directory(name)))


def _cached(journal, start, available):
    """Records ``start``..``available`` from ``journal``'s tail cache (in memory: no read off the loop), or
    [] when it does not hold them; None when the journal remembers a producer (PUBLISH-ID): the cache
    keeps no producers, so such a stream is read from its files (and its records carry them)."""
    if journal.producers_evicted or journal.producers():
        return None
    if not journal.cached(start):
        return []
    records = journal.read(start, _BATCH_RECORDS, _BATCH_BYTES)
    return records[:available - start + 1] if records and records[0][0] == start else []


def _close_readers(session):
    for reader in session.readers.values():
        reader.close()
    session.readers.clear()


def _all_streams(broker):
    return set(broker._streams) | set(broker._existing())


class _Session:
    """The active's view of one following passive."""

    __slots__ = ("identity", "token", "cursors", "inflight", "inflight_bytes", "readers", "reading", "order",
                 "heard", "gout", "gstart", "gfirst", "gbytes", "gbudget", "ginflight", "gtimer", "filed")

    def __init__(self, identity, token):
        self.identity = identity
        self.token = token
        self.cursors = {}         # stream -> next sequence to send
        self.inflight = {}        # stream -> deque of (last seq of a batch, its bytes)
        self.inflight_bytes = 0
        self.readers = {}         # stream -> JournalReader (used on the threadpool, one read at a time)
        self.reading = False
        self.filed = set()        # streams with producers: read from their files (the tail cache has none)
        self.order = deque()      # streams, round-robin
        self.heard = _monotonic()
        self.gout = []            # group records (packed [stream, record]) not sent yet
        self.gstart = 0           # the number of this session's first group record (its snapshot's B)
        self.gfirst = 0           # the number of gout[0]
        self.gbudget = 0          # group record bytes not acknowledged at most (the window, or twice the snapshot)
        self.gbytes = 0           # bytes of group records not yet acknowledged (sent or not)
        self.ginflight = deque()  # (last number of a GREC sent, its bytes)
        self.gtimer = None


class Source:
    """The active side: serves a following passive, and gates ``ack="replicated"`` on its ACKs."""

    def __init__(self, pair):
        self.pair = pair
        self.broker = broker = pair.broker
        self.replicated = broker.ack == "replicated"
        self.policy = broker.on_passive_lost
        self.timeout = broker.passive_timeout
        self.window = broker.replication_window
        self.session = None
        self.acked = {}           # stream -> last sequence the passive has at its level
        self.level = {}           # stream -> last sequence at our own level
        self.behind_since = {}    # stream -> when acked first fell behind level (replicated)
        self.waiters = {}         # stream -> deque of (seq, deadline, ok, fail): replicated PINGs
        self.degraded = False
        self.gseq = 0             # group records numbered so far (every session's go on from here)
        self.gacked = 0           # the last one the passive has at its level
        self.gwaiters = deque()   # (number, deadline, ok, fail): answers waiting for the group records

    # -- sessions -------------------------------------------------------------------
    def follow(self, identity, token, positions):
        """FOLLOW from the passive: answer STREAMS, then stream what it lacks."""
        broker = self.broker
        if not self.pair.active:
            return          # not ours to serve; it follows whoever heartbeats ACTIVE
        self.stop()
        session = self.session = _Session(identity, token)
        plan, drop = {}, []
        for name in sorted(_all_streams(broker)):
            try:
                epochs, first, last = _stream_position(broker, name)
            except JournalError as exc:
                log.error("%s: stream %s cannot be replicated: %s", broker.name, name.decode("ascii", "replace"), exc)
                continue
            key = name.decode("latin-1")
            have = positions.get(key)
            start, reset, agreed = first, True, 0   # agreed: the passive's records up to here are ours
            if have is not None:
                their_epochs, seq = [tuple(e) for e in have[0]], int(have[1])
                agreed = jr.agreed(epochs, last, their_epochs, seq)
                if seq == 0 and first == 1:
                    start, reset = 1, False
                elif agreed + 1 >= first:     # it goes on after what we agree on (cutting the rest)
                    start, reset = agreed + 1, False
            plan[key] = [start, reset, last, epochs, agreed]
            session.cursors[name] = start
            session.inflight[name] = deque()
            session.order.append(name)
            self.acked[name] = start - 1
        for key in positions:
            if key not in plan:
                drop.append(key)
        broker.stats["pair_sessions"] += 1
        log.info("%s: passive %r follows: %d streams, %d to reset, %d to drop", broker.name, identity,
                 len(plan), sum(1 for v in plan.values() if v[1]), len(drop))
        self.pair.to_follower(identity, [b"STREAMS", token, pack(plan), pack(drop)])
        session.gstart = session.gfirst = self.gseq + 1   # the groups as they are now, then what is logged after
        self._group_item(None, ["B"])
        for name, table in broker._tables.items():
            for group in table.groups.values():
                self._group_item(name, group.snapshot())
        self._group_item(None, ["E"])
        session.gbudget = max(self.window, 2 * session.gbytes)
        self.pump()

    def stop(self):
        session, self.session = self.session, None
        if session is not None and session.gtimer is not None:
            session.gtimer.cancel()
        if session is not None and not session.reading:   # else closed once its read is back (_got)
            _close_readers(session)

    def reset(self):
        """We are no longer active: forget the replicated state (the next active session starts afresh)."""
        self.stop()
        self.acked.clear()
        self.level.clear()
        self.behind_since.clear()
        self.waiters.clear()        # their peers were dropped with the DETACH
        self.gwaiters.clear()
        self.gacked = self.gseq     # (no lag to report while passive)
        self.degraded = False

    def on_ack(self, identity, token, acks, gack=None):
        session = self.session
        if not self.pair.active:
            return              # starting: not ours to answer yet
        if session is None or token != session.token:
            self.broker.stats["pair_stale"] += 1
            self.pair.to_follower(identity, [b"AGAIN", token])   # a passive of an older session: start over
            return
        session.heard = _monotonic()
        broker = self.broker
        for key, seq in acks.items():
            name = key.encode("latin-1")
            seq = int(seq)
            if seq <= self.acked.get(name, 0):
                continue
            self.acked[name] = seq
            flight = session.inflight.get(name)
            while flight and flight[0][0] <= seq:
                session.inflight_bytes -= flight.popleft()[1]
            if self.replicated:
                self.behind_since.pop(name, None)
                stream = broker._streams.get(name)
                if stream is not None and name in self.level:
                    broker._written(stream, min(self.level[name], seq))
                    if self.level[name] > seq:
                        self.behind_since[name] = _monotonic()
                waiters = self.waiters.get(name)
                while waiters and waiters[0][0] <= seq:
                    waiters.popleft()[2]()
        if gack is not None and session.gstart <= int(gack) <= self.gseq:
            gack = int(gack)
            flight = session.ginflight
            while flight and flight[0][0] <= gack:
                session.gbytes -= flight.popleft()[1]
            self.gacked = max(self.gacked, gack)
            waiters = self.gwaiters
            while waiters and waiters[0][0] <= gack:
                waiters.popleft()[2]()
        if self.degraded and self.pair.fsm.peer_state == bstar.PASSIVE:
            self.degraded = False
            broker.stats["pair_restored"] += 1
            log.warning("%s: the passive caught up: ack=replicated holds again", broker.name)
        self.pump()

    # -- the stream of records ---------------------------------------------------
    def pump(self):
        """Send what a stream's tail cache holds that the passive lacks (:func:`_cached`), else start the next
        read off the hub, as far as the window allows."""
        session = self.session
        if session is None or session.reading or session.inflight_bytes >= self.window:
            return
        broker = self.broker
        for name in broker._streams:
            if name not in session.cursors:     # created since the session started: from its start
                session.cursors[name] = 1
                session.inflight[name] = deque()
                session.order.append(name)
        for _ in range(len(session.order)):
            name = session.order[0]
            session.order.rotate(-1)
            stream = broker._streams.get(name)
            if stream is None:
                closed = broker._closed_streams.get(name)
                available = closed["last_seq"] if closed else 0
            else:
                available = stream.journal.written_seq
            start = session.cursors[name]
            if start <= available and stream is not None and name not in session.filed:
                records = _cached(stream.journal, start, available)
                if records is None:
                    session.filed.add(name)     # (a producer stays in the journal's table: files from now on)
                elif records:   # live records, in the tail cache: sent from here, no read off the loop
                    if not self._send(session, name, stream, records) or session.inflight_bytes >= self.window:
                        return
                    continue
            if start <= available:
                session.reading = True
                if stream is not None:
                    stream.reads += 1           # it stays open while we read
                directory = os.path.join(broker.journal_dir, stream_directory(name))
                broker.run_in_thread(self._read, session, name, directory, start,
                                     on_done=lambda result, error, n=name, s=stream:
                                     self._got(session, n, s, result, error))
                return

    @staticmethod
    def _read(session, name, directory, start):
        reader = session.readers.get(name)
        if reader is None:
            reader = session.readers[name] = JournalReader(directory)
        return reader.read(start, _BATCH_RECORDS, _BATCH_BYTES, producers=True)

    def _got(self, session, name, stream, records, error):
        session.reading = False
        if stream is not None:
            stream.reads -= 1
        if session is not self.session:
            _close_readers(session)
            return
        broker = self.broker
        if error is not None:
            if isinstance(error, SequenceGone):     # retention removed it meanwhile: the passive starts over
                log.info("%s: stream %s: retention passed the passive; it resyncs", broker.name, name)
                self.pair.to_follower(session.identity, [b"AGAIN", session.token])
                self.stop()
                return
            broker.stats["pair_read_errors"] += 1
            log.error("%s: stream %s: replication read failed: %s", broker.name, name, error)
            broker.call_later(0.5, self.pump)
            return
        if records and not self._send(session, name, stream, records):
            return
        self.pump()

    def _send(self, session, name, stream, records):
        """REC ``records`` of stream ``name`` to the passive; False (and a pump soon) if it cannot take them."""
        broker = self.broker
        epochs = stream.journal.epochs if stream is not None else jr.epochs_of(
            os.path.join(broker.journal_dir, stream_directory(name)))
        payload = _packer.pack([epochs, records])   # each row as read: (seq, ts, key, body[, producer, pseq])
        size = len(payload)
        if not self.pair.to_follower(session.identity, [b"REC", session.token, name, payload]):
            broker.call_later(0.05, self.pump)      # its queue is full, or it is gone: try again soon
            return False
        session.cursors[name] = records[-1][0] + 1
        session.inflight[name].append((records[-1][0], size))
        session.inflight_bytes += size
        broker.stats["replicated"] += len(records)
        return True

    # -- consumer groups ------------------------------------------------------------
    def group_record(self, name, record):
        """The broker logged ``record`` of stream ``name``'s groups: number it, send it to the passive."""
        session = self.session
        if session is None:
            self.gseq += 1      # (the next session's snapshot holds it)
            return
        self._group_item(name, record)
        if session.gbytes > session.gbudget:    # the passive does not keep up: it starts over from a snapshot
            self.broker.stats["pair_group_resyncs"] += 1
            log.warning("%s: the passive lags %d bytes of group records: it copies them again", self.broker.name,
                        session.gbytes)
            self.pair.to_follower(session.identity, [b"AGAIN", session.token])
            self.stop()

    def _group_item(self, name, record):
        session = self.session
        self.gseq += 1
        item = _packer.pack([None if name is None else name.decode("latin-1"), record])
        session.gout.append(item)
        session.gbytes += len(item)
        if session.gtimer is None:
            session.gtimer = self.broker.call_later(0, self._send_groups)

    def _send_groups(self):
        """Send the group records of this round, in GREC frames of up to ``_BATCH_BYTES``."""
        session = self.session
        if session is None:
            return
        session.gtimer = None
        out = session.gout
        while out:
            n, size = 0, 0
            while n < len(out) and (n == 0 or size + len(out[n]) <= _BATCH_BYTES):
                size += len(out[n])
                n += 1
            body = _packer.pack_array_header(2) + _packer.pack(session.gfirst) + _packer.pack_array_header(n) \
                + b"".join(out[:n])
            if not self.pair.to_follower(session.identity, [b"GREC", session.token, body]):
                session.gtimer = self.broker.call_later(0.05, self._send_groups)   # full, or gone: soon
                return
            session.gfirst += n
            session.ginflight.append((session.gfirst - 1, size))
            del out[:n]
            self.broker.stats["replicated_group_records"] += n

    def when_groups_replicated(self, ok, fail):
        """``ok()`` once the passive has every group record logged so far (now if not replicating), or
        ``fail(reason)`` after ``passive_timeout`` with the "wait" policy."""
        if not self.replicated or self.degraded or self.gacked >= self.gseq:
            ok()
            return
        self.gwaiters.append((self.gseq, _monotonic() + self.timeout, ok, fail))

    # -- ack="replicated" ---------------------------------------------------------
    def reached(self, stream, seq, deliver):
        """The active's journal has ``stream`` at its level up to ``seq``: replicate, and deliver what may be."""
        name = stream.name
        self.level[name] = seq
        if not self.replicated or self.degraded:
            deliver(seq)
        else:
            acked = self.acked.get(name, 0)
            deliver(min(seq, acked))
            if seq > acked and name not in self.behind_since:
                self.behind_since[name] = _monotonic()
        self.pump()

    def when_replicated(self, stream, seq, ok, fail):
        """Call ``ok()`` once the passive has ``stream`` up to ``seq`` (now if not replicating), or
        ``fail(reason)`` after ``passive_timeout`` with the "wait" policy."""
        if not self.replicated or self.degraded or self.acked.get(stream.name, 0) >= seq:
            ok()
            return
        self.waiters.setdefault(stream.name, deque()).append((seq, _monotonic() + self.timeout, ok, fail))

    def check(self, now):
        """Every heartbeat: waits past ``passive_timeout`` fail ("wait") or degrade ("degrade")."""
        if not self.replicated or self.degraded:
            return
        late = [name for name, since in self.behind_since.items() if now - since >= self.timeout]
        late += [name for name, w in self.waiters.items() if w and w[0][1] <= now]
        groups_late = bool(self.gwaiters) and self.gwaiters[0][1] <= now
        if not late and not groups_late:
            return
        broker = self.broker
        status = "no passive follows" if self.session is None else "the passive lags"
        if self.policy == "degrade":
            self._degrade(status)
            return
        for name in late:
            waiters = self.waiters.get(name)
            while waiters and waiters[0][1] <= now:
                seq, _, _, fail = waiters.popleft()
                broker.stats["replication_timeouts"] += 1
                fail("replication: %s: stream %s sequence %d not confirmed by the passive within %gs"
                     % (status, name.decode("ascii", "replace"), seq, self.timeout))
        waiters = self.gwaiters
        while waiters and waiters[0][1] <= now:
            waiters.popleft()[3]("replication: %s: group records not confirmed by the passive within %gs"
                                 % (status, self.timeout))
            broker.stats["replication_timeouts"] += 1

    def taken_over(self):
        """We became active on a client's vote with the peer silent: no passive can confirm anything
        now, so "degrade" degrades at once (not ``passive_timeout`` later: a failover's service time)."""
        if self.replicated and not self.degraded and self.policy == "degrade" and self.session is None:
            self._degrade("took over from a silent peer")

    def _degrade(self, status):
        broker = self.broker
        self.degraded = True
        broker.stats["pair_degraded"] += 1
        log.warning("%s: %s: ack=replicated degraded to %s (on_passive_lost='degrade')", broker.name, status,
                    broker.level)
        for waiters in [*self.waiters.values(), self.gwaiters]:
            while waiters:
                waiters.popleft()[2]()
        for name, seq in self.level.items():
            stream = broker._streams.get(name)
            if stream is not None:
                broker._written(stream, seq)
        self.behind_since.clear()

    def info(self):
        lag = {}
        for name, seq in self.level.items():
            lag[name.decode("ascii", "replace")] = max(0, seq - self.acked.get(name, 0))
        return {"following": self.session is not None, "degraded": self.degraded,
                "on_passive_lost": self.policy, "replication_lag": lag,
                "group_replication_lag": self.gseq - self.gacked}


class Replica:
    """The passive side: follows the active, appends its records, acknowledges them at our level."""

    def __init__(self, pair):
        self.pair = pair
        self.broker = pair.broker
        self.token = None
        self.asked = 0.0          # when FOLLOW was sent
        self.heard = 0.0          # last STREAMS or REC of this session
        self.targets = {}         # stream -> sequence to reach before ready
        self.acks = {}            # stream -> level reached, not yet sent
        self.ack_timer = None
        self.truncated = 0        # records dropped as lone (split brain) or divergent, ever
        self.gnext = None         # the number of the next group record expected (None: a snapshot's B)
        self.gsnap = None         # streams whose groups the snapshot under way replaced
        self.gready = None        # the number of the snapshot's E
        self.gkept = False        # the snapshot is at our level: ready as far as groups go
        self.gdone = deque()      # [number, stores still writing] per GREC, in order
        self.gack = None          # the last group record at our level, not yet sent
        self.gqueue = deque()     # (first, items) of GRECs to apply, in order (waiting for a group store to open)

    def ensure_following(self):
        now = _monotonic()
        if self.token is None or (self.heard < self.asked and now - self.asked > 2.0):
            self.follow()

    def follow(self):
        broker = self.broker
        positions = {}
        for name in _all_streams(broker):
            try:
                epochs, _first, last = _stream_position(broker, name)
            except JournalError as exc:
                log.error("%s: stream %s unreadable (%s): copied again", broker.name, name, exc)
                continue
            positions[name.decode("latin-1")] = [epochs, last]
        self.token = secrets.token_bytes(8)
        self.asked = _monotonic()
        self.targets = {}
        self.gnext = self.gsnap = self.gready = self.gack = None
        self.gkept = False
        self.gdone = deque()
        self.gqueue = deque()
        self.pair.fsm.ready = False
        self.pair.to_peer([b"FOLLOW", self.token, pack(positions)])

    def stop(self):
        self.token = None
        self.targets = {}
        self.gdone = deque()
        self.gqueue = deque()

    def on_again(self, token):
        fsm = self.pair.fsm
        if token == self.token and fsm.state == bstar.PASSIVE and fsm.peer_state == bstar.ACTIVE:
            self.follow()       # (a peer that is starting says AGAIN too: we wait until it is active)

    def check(self, now):
        """Every heartbeat: follow the active; an empty ACK probes the session (an active that restarted
        does not know it and answers AGAIN)."""
        if self.pair.fsm.state == bstar.PASSIVE and self.pair.fsm.peer_state == bstar.ACTIVE:
            self.ensure_following()
            if self.token is not None and self.heard >= self.asked:
                self.pair.to_peer([b"ACK", self.token, pack({})])

    def on_streams(self, token, plan, drop):
        if token != self.token:
            return
        broker = self.broker
        self.heard = _monotonic()
        for key in drop:     # streams the active does not have: accepted alone
            name = key.encode("latin-1")
            lone = _stream_position(broker, name)[2]
            self._remove(name)
            if lone:
                self._truncated(name, 0, lone)
        ours = _all_streams(broker)
        for key, (start, reset, target, epochs, agreed) in plan.items():
            name = key.encode("latin-1")
            epochs = [tuple(e) for e in epochs]
            directory = os.path.join(broker.journal_dir, stream_directory(name))
            exists = name in ours
            have = _stream_position(broker, name)[2] if exists else 0
            if not reset and have > agreed:     # records the active never had: cut them off
                self._close(name)
                if jr.truncate_after(directory, agreed) < 0:
                    reset = True                # (our retention passed the cut: copy it all again)
                else:
                    jr.write_epochs(directory, [e for e in epochs if e[1] <= agreed + 1] or [epochs[0]])
            if have > agreed:
                self._truncated(name, agreed, have)
            if reset:                           # copied again from the active's first sequence
                if exists:
                    self._remove(name)
                jr.create_at(directory, start, [e for e in epochs if e[1] <= start] or [epochs[0]])
            if target >= start:
                self.targets[name] = target
        self._check_ready()

    def _truncated(self, name, kept, had):
        self.truncated += had - kept
        self.broker.stats["pair_truncated"] += had - kept
        log.warning("%s: stream %s: %d records (sequences %d-%d) the active never had are truncated; now "
                    "following it", self.broker.name, name.decode("ascii", "replace"), had - kept, kept + 1, had)

    def _close(self, name):
        """Close the stream's journal (it reopens on the next record) and forget its summary."""
        broker = self.broker
        stream = broker._streams.pop(name, None)
        if stream is not None:
            stream.commit.stop()
            stream.journal.close()
        broker._closed_streams.pop(name, None)

    def _remove(self, name):
        self._close(name)
        shutil.rmtree(os.path.join(self.broker.journal_dir, stream_directory(name)), ignore_errors=True)

    def on_records(self, token, name, payload):
        if token != self.token:
            return
        broker = self.broker
        self.heard = _monotonic()
        epochs, rows = payload
        epochs = [tuple(e) for e in epochs]
        if not rows:
            return
        stream = broker._streams.get(name)
        if stream is None:
            directory = os.path.join(broker.journal_dir, stream_directory(name))
            if not os.path.isdir(directory):   # new on the active: starts where its records start
                jr.create_at(directory, rows[0][0], [e for e in epochs if e[1] <= rows[0][0]] or [epochs[0]])
            # In the loop, as at start: a passive serves no client, and this happens once per stream new
            # to it (a client's ATTACH opens journals on the threadpool instead: broker_streams._open).
            stream = None
            if len(broker._streams) < broker._max_open or broker._close_idlest():
                stream = broker._open_now(name)
            if stream is None:      # (too many open streams, none idle; a journal that cannot open)
                broker.stats["pair_journal_errors"] += 1
                log.error("%s: stream %s cannot be opened to copy it; following again soon", broker.name, name)
                self.token = None   # ensure_following sends FOLLOW again at the next heartbeat
                return
        journal = stream.journal
        if rows[0][0] != journal.last_seq + 1:
            broker.stats["pair_resyncs"] += 1
            log.warning("%s: stream %s: got sequence %d after %d: following again", broker.name,
                        name.decode("ascii", "replace"), rows[0][0], journal.last_seq)
            self.token = None       # the next heartbeat follows again (the rest of this session is dropped)
            return
        first, last = rows[0][0], rows[-1][0]
        starts = sorted(start for _, start in epochs if first < start <= last)   # epochs begun inside the batch
        append, fresh = journal.append_record, stream.fresh.append
        try:
            jr.set_epochs(journal, [e for e in epochs if e[1] <= first] or [epochs[0]])
            for row in rows:        # (seq, ts, key, body), or with (producer, pseq) appended
                if starts and row[0] == starts[0]:
                    del starts[0]
                    jr.set_epochs(journal, [e for e in epochs if e[1] <= row[0]])
                # the journal's producer table (the broker's one source of PUBLISH-ID duplicates) takes pid
                fresh(append(row[2], row[3], row[1], (row[4], row[5]) if len(row) > 4 and row[4] is not None
                             else None))
        except (JournalError, ValueError, IndexError, TypeError) as exc:   # (disk full, a bad row...): the
            broker.stats["pair_journal_errors"] += 1
            log.error("%s: stream %s: cannot journal replicated records: %s", broker.name, name, exc)
            self.token = None       # session ends, followed again at the next heartbeat
        stream.commit.kick()

    def reached(self, stream, seq):
        """Our level reached ``seq`` on ``stream``: acknowledge it (batched once per round)."""
        if self.token is None:
            return
        self.acks[stream.name.decode("latin-1")] = seq
        if self.ack_timer is None:
            self.ack_timer = self.broker.call_later(0, self._send_acks)
        target = self.targets.get(stream.name)
        if target is not None and seq >= target:
            del self.targets[stream.name]
            self._check_ready()

    def _send_acks(self):
        self.ack_timer = None
        acks, self.acks = self.acks, {}
        gack, self.gack = self.gack, None
        if (acks or gack is not None) and self.token is not None:
            self.pair.to_peer([b"ACK", self.token, pack(acks)] + ([] if gack is None else [pack(gack)]))

    # -- consumer groups ------------------------------------------------------------
    def on_group_records(self, token, payload):
        """GREC: apply and log the active's group records in order; acknowledged once our stores have them."""
        if token != self.token:
            return
        broker = self.broker
        self.heard = _monotonic()
        first, items = payload
        first = int(first)
        if not items:
            return
        in_order = first == self.gnext if self.gnext is not None else items[0] == [None, ["B"]]  # a session: B first
        if not in_order:
            broker.stats["pair_resyncs"] += 1
            log.warning("%s: group record %d after %s: following again", broker.name, first, self.gnext)
            self.token = None       # (a frame lost on the link): the next heartbeat follows again
            return
        self.gnext = first + len(items)
        self.gqueue.append((first, items))
        self._drain_groups()

    def _drain_groups(self):
        """Apply the GRECs received, in order; a stream whose groups are not loaded yet has its store opened
        off the loop (:meth:`Groups._table_soon`) and the records wait for it."""
        broker = self.broker
        while self.gqueue and self.token is not None:
            first, items = self.gqueue[0]
            try:
                names = {key.encode("latin-1") for key, _ in items if key is not None}
                missing = [name for name in names if name not in broker._tables]
                stores = None if missing else self._apply_groups(first, items)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
                broker.stats["pair_malformed"] += 1
                log.warning("%s: bad group records from the active (%s): following again", broker.name, exc)
                self.token = None       # the next heartbeat follows again: a new snapshot
                return
            if missing:
                for name in missing:
                    broker._table_soon(name, lambda table, token=self.token: self._table_ready(token, table))
                return
            self.gqueue.popleft()
            self._keep_groups(first + len(items) - 1, stores)

    def _table_ready(self, token, table):
        if token != self.token:
            return
        if table is None:
            self.broker.stats["pair_journal_errors"] += 1
            log.error("%s: a stream's groups cannot be kept; following again soon", self.broker.name)
            self.token = None
            return
        self._drain_groups()

    def _keep_groups(self, last, stores):
        """Acknowledge the GREC just applied (up to number ``last``) once ``stores`` have it at our level
        (after the ones before)."""
        broker = self.broker
        done = [last, len(stores)]
        self.gdone.append(done)
        gdone, level = self.gdone, broker.level

        def kept():
            done[1] -= 1
            if gdone is not self.gdone:
                return          # (a new session since)
            while gdone and gdone[0][1] <= 0:
                self._group_reached(gdone.popleft()[0])

        if not stores:
            done[1] = 1
            kept()
        for store in stores:
            store.when(level, kept)

    def _apply_groups(self, first, items):
        """Apply GREC ``items`` (their streams' groups loaded); the stores they were logged to."""
        broker = self.broker
        stores = set()
        for n, (key, record) in enumerate(items, first):
            kind = record[0]
            if key is None:
                if kind == "B":
                    self.gsnap = set()
                elif kind == "E" and self.gsnap is not None:
                    for name in list(broker._tables):   # groups of streams the active has none of
                        if name not in self.gsnap:
                            stores.add(broker._groups_drop(name))
                    self.gsnap, self.gready = None, n
                continue
            name = key.encode("latin-1")
            if self.gsnap is not None and name not in self.gsnap:
                self.gsnap.add(name)            # the snapshot replaces what we held of this stream's groups
                stores.add(broker._groups_drop(name))
            stores.add(broker._groups_copy(name, record))
        stores.discard(None)
        return stores

    def _group_reached(self, number):
        if self.token is None:
            return
        self.gack = number
        if self.ack_timer is None:
            self.ack_timer = self.broker.call_later(0, self._send_acks)
        if not self.gkept and self.gready is not None and number >= self.gready:
            self.gkept = True
            self._check_ready()

    def _check_ready(self):
        if self.targets or self.pair.fsm.ready or self.token is None or not self.gkept:
            return
        self.pair.fsm.ready = True
        self.broker.stats["pair_caught_up"] += 1
        log.info("%s: caught up with the active: ready to take over", self.broker.name)

    def new_epochs(self):
        """We take over: every stream starts a new epoch at its next sequence."""
        broker = self.broker
        for name in _all_streams(broker):
            stream = broker._streams.get(name)
            try:
                if stream is not None:
                    jr.new_epoch(stream.journal)
                else:
                    directory = os.path.join(broker.journal_dir, stream_directory(name))
                    jr.new_epoch_closed(directory, jr.position(directory)[2] + 1)
            except (JournalError, OSError) as exc:
                log.error("%s: stream %s: no new epoch: %s", broker.name, name, exc)

    def info(self):
        return {"catching_up": {k.decode("ascii", "replace"): v for k, v in self.targets.items()},
                "truncated": self.truncated}
