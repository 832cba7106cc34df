"""The ZEPS broker's replay: subscribers behind the live stream, served from the journal (a mixin of
:class:`.broker.Broker`).

One cooperative task (:meth:`Replay._replay`) serves every replaying
subscriber in turn, a batch per step, so that the loop keeps flowing.  A
step whose records are in the journal's tail cache reads them in the loop;
one that would read the disk asks the hub's threadpool for them and goes on
with the others, and that subscriber's replay continues when they arrive
(``replay_reads`` such reads at most in flight; counted ``replay_cold_reads``).
Runs in the broker's loop only (the cold reads: ``Journal.read``, safe from a
thread).
"""
from __future__ import annotations

import logging
import struct

from zactors.actors.journal import JournalError, SequenceGone
from zactors.actors.speedups import send_each

from . import protocol as p
from .broker_peers import _LIVE
from .deliver import frames as _frames, matcher_of

__all__: list[str] = []

log = logging.getLogger("zactors.patterns.zeps.broker")  # one logger for the whole broker
_unpack_u64 = struct.Struct(">Q").unpack_from


class Replay:
    """Replay tasks and cold reads.  State: ``_replaying`` (peers with credit waiting to be replayed, an
    ordered set), ``_pumping`` (the task runs)."""

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
        if peer.held:
            return False
        limit = stream.delivered_seq
        if peer.next > limit:
            self._go_live(peer)
            return False
        try:
            records = self._read(stream.journal, peer.next)
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
        # the whole batch matched and encoded in one call, and sent in one while libzmq takes it
        frames, credit, consumed, short = _frames(records, 0, limit, peer.credit, matcher_of(peer.filter))
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
        more = not short
        if stopped:
            credit += sum(map(len, frames[sent:]))  # not sent: not spent
            if sent:
                peer.next = _unpack_u64(frames[sent - 1], 3)[0] + 1
            more = False
        elif consumed:
            peer.next = records[consumed - 1][0] + 1
        peer.credit = credit
        peer.delivered += sent
        self.stats["replayed"] += sent
        if not more:
            return False
        if peer.next > limit:
            self._go_live(peer)
            return False
        if not records:
            self._unreadable(peer, "the journal returned nothing (written up to %d)" % limit)
            return False
        return True

    def _read(self, journal, seq):
        """Up to a batch of records from ``seq``.  A batch that cannot be read is tried in halves, so
        that the records before a corrupt one are still delivered and the error names its sequence."""
        batch = self.replay_batch
        while True:
            try:
                return journal.read(seq, max_records=batch, max_bytes=4 << 20)
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
        peer.floor = peer.next
        peer.stream.matcher.add(peer.filter)
