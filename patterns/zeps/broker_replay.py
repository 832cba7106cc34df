"""The ZEPS broker's replay: subscribers behind the live stream, served from the journal (a mixin of
:class:`.broker.Broker`).

One cooperative task (:meth:`Replay._replay`) serves every replaying
subscriber in turn, a batch per step, so that the loop keeps flowing.  A
step whose records are in the journal's tail cache reads them in the loop;
one that would read the disk asks the hub's threadpool for them and goes on
with the others, and that subscriber's replay continues when they arrive
(``replay_reads`` such reads at most in flight; counted ``replay_cold_reads``).
A read off the hub brings up to ``replay_fetch`` records (no more bytes than
the peer's credit, 4 MiB at most, and no more records than that credit over
160 bytes, a batch at least), which the peer keeps and is served from a
batch per step: a thread round trip per 256 records halved the replay rate.
So does the lookup of a SUBSCRIBE-SINCE's time when the tail cache does not
hold the whole journal.
Runs in the broker's loop only (the cold reads: ``Journal.read``, safe from a
thread).
"""
from __future__ import annotations

import logging
import struct
from functools import partial

from zactors.actors.journal import JournalError, SequenceGone
from zactors.actors.speedups import send_each

from . import protocol as p
from .broker_peers import _LIVE, _REPLAY
from .deliver import frames as _frames, matcher_of

__all__: list[str] = []

log = logging.getLogger("zactors.patterns.zeps.broker")  # one logger for the whole broker
_unpack_u64 = struct.Struct(">Q").unpack_from
_RECORD_BYTES = 160  # about what a Record's Python objects hold besides its key and body


class Replay:
    """Replay tasks and cold reads.  State: ``_replaying`` (peers with credit waiting to be replayed, an
    ordered set), ``_pumping`` (the task runs), ``_cold_reads`` (reads under way off the hub),
    ``_cold_waiting`` (peers waiting for one, an ordered set)."""

    #: replay: records read per journal call (one task step)
    replay_batch = 256
    #: replay reads of the disk under way on the threadpool at most (the pool also writes and fsyncs)
    replay_reads = 2
    #: records one read off the hub brings at most (kept by the peer, served a batch per step)
    replay_fetch = 8192

    def _pump(self):
        if not self._pumping and self._replaying:
            self._pumping = True
            self.start_task(self._replay(), self._replay_done)

    def _replay(self):
        """The cooperative task serving every replaying subscriber in turn, a batch per step."""
        replaying = self._replaying
        while replaying:
            for identity in list(replaying):
                peer = replaying.get(identity)
                if peer is None:
                    continue
                if not self._replay_step(peer):
                    replaying.pop(identity, None)
                yield

    def _replay_done(self, task):
        self._pumping = False
        if task.error is not None:  # a bug: do not spin on it; the next CREDIT of each peer tries again
            log.error("%s: replay failed: %r", self.name, task.error)
            self.stats["replay_errors"] += 1
            self._replaying.clear()
        self._pump()  # credit may have come in at the very end

    def _replay_step(self, peer):
        """Deliver up to a batch from the journal; True if there is more to do now.

        Replay goes up to the last sequence the publish path has delivered
        live (``stream.delivered_seq``); past it the subscriber is live again
        and the next flush delivers the rest.
        """
        stream = peer.stream
        if peer.held or peer.reading:
            return False
        limit = stream.delivered_seq
        if peer.next > limit:
            self._go_live(peer)
            return False
        try:
            records = self._records(peer)
        except SequenceGone as gone:
            self.stats["replay_skipped_retention"] += 1
            log.info("%s: %r asked for %d, retention kept from %d", self.name, peer.identity, peer.next,
                     gone.first_seq)
            if peer.gaps:  # asked to be told; others see the jump in the sequences
                self._send(peer.identity, p.gap(peer.next, gone.first_seq - 1))
            peer.next = gone.first_seq
            return True
        except JournalError as exc:
            self._unreadable(peer, exc)
            return False
        if records is None:  # being read off the hub: this peer's replay goes on when they arrive
            return False
        records, start = records
        # the whole batch matched and encoded in one call, and sent in one while libzmq takes it
        frames, credit, consumed, short = _frames(records, start, min(limit, records[start][0] + self.replay_batch - 1)
                                                  if records else limit, peer.credit, matcher_of(peer.filter))
        identity = peer.identity
        sock = self.router.socket
        sent = 0 if self._outbox_pending(identity) else send_each(sock, sock.handle, identity, frames)
        stopped = False
        if sent < len(frames):  # the rest behind the kernel outbox (in order), or the peer is gone
            send = self._outbox_send
            for frame in frames[sent:]:
                if not send(identity, [frame]):  # gone (dropped by on_unroutable)
                    stopped = True
                    break
                sent += 1
                if peer.held:  # the transport is full: sent, but go no further now
                    stopped = True
                    break
        more = not short  # (a batch of what a read off the hub brought ends short of it: more)
        if stopped:
            credit += sum(map(len, frames[sent:]))  # not sent: not spent
            if sent:
                peer.next = _unpack_u64(frames[sent - 1], 3)[0] + 1
            more = False
        elif consumed > start:
            peer.next = records[consumed - 1][0] + 1
        peer.credit = credit
        peer.delivered += sent
        self.stats["replayed"] += sent
        if short and not stopped:  # its credit ran out
            self._short(peer)
        if not more:
            return False
        if peer.next > limit:
            self._go_live(peer)
            return False
        if not records:
            self._unreadable(peer, "the journal returned nothing (written up to %d)" % limit)
            return False
        return True

    def _records(self, peer):
        """The next records for ``peer`` (from ``peer.next``) when they are in memory, as (records, the
        index of ``peer.next`` in them): kept from a read off the hub, or in the journal's tail cache.
        Else None, and that read is started (or queued)."""
        seq = peer.next
        fetched = peer.fetched
        if fetched is not None:
            first, records = fetched
            if isinstance(records, BaseException):
                peer.fetched = None
                if first == seq:
                    raise records
            else:
                i = seq - records[0][0] if records else -1
                if 0 <= i < len(records) and records[i][0] == seq:  # (journal sequences are consecutive)
                    return records, i
                peer.fetched = None
        journal = peer.stream.journal
        if journal.cached(seq):  # no byte bound: a batch in memory, and _frames stops at the credit
            return self._read(journal, seq, None), 0
        peer.reading = True
        self._cold_waiting[peer.identity] = peer
        self._start_cold_reads()
        return None

    def _find_since(self, peer, timestamp):
        """SUBSCRIBE-SINCE on a journal the tail cache does not hold: the sequence at ``timestamp`` is
        looked up off the hub (the sparse index, then a scan), and the replay starts there."""
        peer.since = timestamp
        peer.reading = True
        self._cold_waiting[peer.identity] = peer
        self._start_cold_reads()

    def _since_found(self, peer, seq, error):
        """Back in the loop: the sequence at ``peer.since`` is ``seq`` (or the lookup failed with ``error``)."""
        self._cold_reads -= 1
        stream = peer.stream
        stream.reads -= 1
        peer.reading = False
        timestamp, peer.since = peer.since, None
        if self._peers.get(peer.identity) is peer:
            if error is not None:
                name = stream.name.decode("ascii", "replace")
                self.stats["replay_errors"] += 1
                log.error("%s: stream %s: replay cannot find time %.6f: %s", self.name, name, timestamp, error)
                self._send(peer.identity, p.invalid("REPLAY: stream %s: the messages since %.6f cannot be found: %s"
                                                    % (name, timestamp, error)))
            else:
                peer.next = max(seq, 1)
                if peer.next > stream.delivered_seq:
                    self._go_live(peer)
                elif peer.credit and not peer.held:
                    self._replaying[peer.identity] = peer
                    self._pump()
        self._start_cold_reads()

    def _start_cold_reads(self):
        """Start the queued reads off the hub, ``replay_reads`` at most under way."""
        waiting = self._cold_waiting
        while waiting and self._cold_reads < self.replay_reads:
            identity, peer = waiting.popitem(last=False)
            if self._peers.get(identity) is not peer or peer.mode is not _REPLAY:
                peer.reading = False  # gone, or live again meanwhile
                continue
            stream = peer.stream
            self._cold_reads += 1
            stream.reads += 1
            self.stats["replay_cold_reads"] += 1
            if peer.since is not None:
                self.run_in_thread(stream.journal.seq_at_time, peer.since, on_done=partial(self._since_found, peer))
                continue
            # at most what its credit can take (the credit is budgeted: so is what reads bring), and
            # records whose Python objects hold no more than that again (a batch at least)
            budget = max(1, min(4 << 20, peer.credit))
            count = min(self.replay_fetch, max(self.replay_batch, budget // _RECORD_BYTES))
            self.run_in_thread(self._read, stream.journal, peer.next, budget, count,
                               on_done=partial(self._cold_read_done, peer, peer.next))

    def _cold_read_done(self, peer, seq, records, error):
        """Back in the loop: a read off the hub for ``peer`` from ``seq`` brought ``records`` (or ``error``)."""
        self._cold_reads -= 1
        peer.stream.reads -= 1
        peer.reading = False
        if self._peers.get(peer.identity) is peer and peer.mode is _REPLAY:
            peer.fetched = (seq, records if error is None else error)
            if peer.credit and not peer.held:
                self._replaying[peer.identity] = peer
                self._pump()
        self._start_cold_reads()

    def _read(self, journal, seq, max_bytes=4 << 20, batch=None):
        """Up to ``batch`` records from ``seq`` (default ``replay_batch``).  A batch that cannot be read is
        tried in halves, so that the records before a corrupt one are still delivered and the error names
        its sequence.  Blocks on the disk unless ``journal.cached(seq)``: safe in a thread."""
        batch = batch or self.replay_batch
        while True:
            try:
                return journal.read(seq, max_records=batch, max_bytes=max_bytes)
            except SequenceGone:
                raise
            except JournalError:
                if batch == 1:
                    raise
                batch >>= 1

    def _unreadable(self, peer, error):
        """Replay cannot read message ``peer.next``: say so to the peer (INVALID "REPLAY: ..."), never skip it.

        The peer stays where it is; its next CREDIT tries again (a journal
        repaired meanwhile serves it).
        """
        stream = peer.stream
        self.stats["replay_errors"] += 1
        log.error("%s: stream %s: replay cannot read sequence %d: %s", self.name,
                  stream.name.decode("ascii", "replace"), peer.next, error)
        self._send(peer.identity, p.invalid("REPLAY: stream %s: sequence %d cannot be read: %s"
                                            % (stream.name.decode("ascii", "replace"), peer.next, error)))

    def _go_live(self, peer):
        peer.mode = _LIVE
        peer.fetched = None
        peer.floor = peer.next
        peer.stream.matcher.add(peer.filter)
