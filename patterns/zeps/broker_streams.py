"""The ZEPS broker's streams: opening, creating and closing them within their budgets, and their
journals' errors and retention (a mixin of :class:`.broker.Broker`).

A stream is a :class:`_Stream`: its journal, the GroupCommit that writes
it, its matcher and peers.  Streams on disk are opened at start; others are
created on an ATTACH within the stream budgets (permission ``create``,
``max_streams_per_peer``, ``max_streams``); at most ``max_open_streams`` are
open at once (the idlest is closed for a new one), and one idle for
``stream_idle`` seconds is closed; one that never held a message is deleted.
Runs in the broker's loop only (journals open and close in it).
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from collections import OrderedDict
from functools import partial

from zactors.actors.group_commit import GroupCommit
from zactors.actors.journal import Journal, JournalError

from . import protocol as p
from .matcher import Matcher
from .names import stream_directory, stream_name

__all__: list[str] = []

log = logging.getLogger("zactors.patterns.zeps.broker")  # one logger for the whole broker
_monotonic = time.monotonic
#: descriptors an open stream may take (journal segment, directory, index, ...): for max_open_streams
_FDS_PER_STREAM = 4
#: a stream closes for a new one only once it has been idle (and its journal quiet) this long (s)
_MIN_IDLE = 1.0


def _open_stream_budget(max_streams):
    """Streams open at once by default: a quarter of half the open-file limit (the rest for connections)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return max_streams
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return max_streams
    return max(1, min(max_streams, soft // 2 // _FDS_PER_STREAM))




class _Stream:
    __slots__ = ("name", "journal", "commit", "matcher", "peers", "fresh", "delivered_seq", "samples",
                 "publishes", "pings", "producers", "idle_since", "creator", "pinned", "reads")

    def __init__(self, name, journal, commit):
        self.name = name
        self.journal = journal
        self.commit = commit      # its GroupCommit: writes, fsyncs, PING-OK waits
        self.matcher = Matcher()
        self.peers = {}           # identity -> _Peer attached here
        self.fresh = []           # journal Records appended this round: written, then delivered live
        self.delivered_seq = journal.last_seq  # the publish path delivered up to here
        self.samples = []         # (monotonic, last_seq) for the rate
        self.publishes = 0
        self.pings = {}           # ack="synced": token -> identity of a PING waiting for its fsync
        self.producers = OrderedDict()  # PUBLISH-ID: producer -> (its last sequence, our sequence), LRU order
        self.idle_since = _monotonic()  # no peer since then (None while it has peers)
        self.creator = None       # the peer (key or identity) that created it, for its quota
        self.pinned = False       # declared: never closed for idleness
        self.reads = 0            # replay reads of its journal under way off the hub (it stays open)




class Streams:
    """Stream lifecycle.  State: ``_streams`` (name -> open _Stream), ``_closed_streams`` (name -> its INFO
    when closed), ``_creators`` (peer -> streams it created), ``_max_open``."""

    def _existing(self):
        """Names of the streams whose journals are in ``journal_dir`` already."""
        names = []
        for entry in sorted(os.listdir(self.journal_dir)):
            name = stream_name(entry)
            if name is not None and os.path.isdir(os.path.join(self.journal_dir, entry)):
                names.append(name)
        return names

    def _open(self, identity, name, key=None):
        """Open (or create) stream ``name``; None, and INVALID to ``identity`` if any, when it cannot.

        ``identity`` (and its ``key``) is the peer that asks, None for the broker itself: a
        stream new on disk is then created only within its permission and budgets.
        """
        owner = None
        if identity is not None and name not in self._closed_streams:  # a new stream
            if self.permissions is not None and not self.permissions.allows(key, "create", name):
                self._refuse(identity, "refused by the broker's permissions: this key may not create stream %s"
                             % name.decode(), "refused_create")
                return None
            if len(self._streams) + len(self._closed_streams) >= self.max_streams:
                self._stream_refused(identity, "too many streams (%d)" % self.max_streams)
                return None
            owner = key or identity
            if self._creators.get(owner, 0) >= self.max_streams_per_peer:
                self._stream_refused(identity, "stream quota: this peer created %d streams (at most %d)"
                                     % (self._creators[owner], self.max_streams_per_peer))
                return None
        if len(self._streams) >= self._max_open and not self._close_idlest():
            if identity is not None:
                self._stream_refused(identity, "too many open streams (%d), none idle for %gs" % (
                    self._max_open, _MIN_IDLE))
            return None
        directory = os.path.join(self.journal_dir, stream_directory(name))
        try:
            journal = Journal(directory, **self.journal_options)
        except (JournalError, OSError) as exc:
            self.stats["journal_open_errors"] += 1
            log.error("%s: cannot open stream %s: %s", self.name, name.decode("ascii", "replace"), exc)
            if identity is not None:
                self._invalid(identity, "cannot open stream %s: %s" % (name.decode(), exc))
            return None
        policy = self.fsync if isinstance(self.fsync, str) else "interval"
        interval = self.fsync if policy == "interval" else 0.1
        stream = _Stream(name, journal, None)
        seen = list(journal.producers().items())[-self.max_producers:] if self.max_producers else []
        stream.producers.update((int.from_bytes(pid, "little"), last) for pid, last in seen)  # PUBLISH-ID, kept
        deliver = partial(self._written, stream)
        if self._pair is not None:  # a pair: the active replicates (and may wait for it), the passive ACKs
            deliver = self._pair.at_level(stream, deliver)
        if self.level == "synced":  # an fsync after every write round: group commit, off the hub
            stream.commit = GroupCommit(self, journal, fsync="batch", retry=0.1, on_synced=deliver,
                                        on_error=partial(self._write_failed, stream))
        else:
            stream.commit = GroupCommit(self, journal, fsync=policy, interval=interval, retry=0.1,
                                        on_written=deliver, on_error=partial(self._write_failed, stream))
        stream.commit.start()
        self._streams[name] = stream
        self._closed_streams.pop(name, None)
        if owner is not None:
            stream.creator = owner
            self._creators[owner] = self._creators.get(owner, 0) + 1
        stream.samples.append((_monotonic(), journal.last_seq))
        log.info("%s: stream %s open (sequences %d..%d)", self.name, name.decode(), journal.first_seq,
                 journal.last_seq)
        return stream

    def _stream_refused(self, identity, reason):
        self.stats["streams_refused"] += 1
        if self.stats["streams_refused"] % 1000 == 1:
            log.warning("%s: stream refused to %r: %s (%d so far)", self.name, identity, reason,
                        self.stats["streams_refused"])
        self._send(identity, p.invalid(reason))

    def _closable(self, stream, now, idle):
        """No peer for ``idle`` seconds, not declared, and nothing left for its journal to write or sync."""
        since = stream.idle_since
        journal = stream.journal
        return (since is not None and now - since >= idle and not stream.pinned and not stream.fresh
                and not stream.reads
                and journal.written_seq == journal.last_seq
                and (self.fsync == "never" or journal.synced_seq == journal.written_seq))

    def _close_idle(self):
        now = _monotonic()
        for stream in [s for s in self._streams.values() if self._closable(s, now, self.stream_idle)]:
            self._close_stream(stream)

    def _close_idlest(self):
        """Close the stream idle longest (at least _MIN_IDLE) for a new one; False if there is none."""
        now = _monotonic()
        idle = [s for s in self._streams.values() if self._closable(s, now, _MIN_IDLE)]
        if not idle:
            return False
        self._close_stream(min(idle, key=lambda s: s.idle_since))
        return True

    def _close_stream(self, stream):
        """Close ``stream``'s journal (its descriptors); delete it if it never held a message."""
        name = stream.name
        del self._streams[name]
        stream.commit.stop()
        journal = stream.journal
        disk_bytes = journal.stats()["disk_bytes"]
        journal.close(sync=self.fsync != "never")
        self.stats["streams_closed"] += 1
        if journal.last_seq == 0 and not stream.pinned:
            shutil.rmtree(os.path.join(self.journal_dir, stream_directory(name)), ignore_errors=True)
            owner = stream.creator
            if owner is not None:
                left = self._creators.pop(owner) - 1
                if left:
                    self._creators[owner] = left
            log.debug("%s: empty stream %s deleted", self.name, name.decode("ascii", "replace"))
        else:
            last = journal.last_seq
            self._closed_streams[name] = {
                "first_seq": journal.first_seq, "last_seq": last, "written_seq": last, "synced_seq": last,
                "rate": 0.0, "bytes": disk_bytes, "peers": 0, "subscribers": [], "open": False}

    def _write_failed(self, stream, exc):
        """GroupCommit's ``on_error``: once per failing streak of writes, or a failed fsync.

        With ``ack="synced"`` the PINGs waiting for an fsync are answered
        INVALID "PING: ..." now (as ``when_written``'s ``on_error`` does for
        ``"written"``): not synced, and maybe never.
        """
        if stream.pings:
            pings, stream.pings = stream.pings, {}
            for identity in pings.values():
                self._invalid(identity, "PING: stream %s cannot write its journal: %s" % (stream.name.decode(), exc))
        if stream.journal.broken:  # a failed fsync: final, the journal refuses until reopened
            self.stats["journal_sync_errors"] += 1
            log.error("%s: stream %s: fsync failed: %s", self.name, stream.name.decode("ascii", "replace"), exc)
        else:
            self.stats["journal_write_errors"] += 1
            log.error("%s: stream %s: journal write failed (retrying every 0.1 s): %s", self.name,
                      stream.name.decode("ascii", "replace"), exc)

    def _retain(self):
        for stream in self._streams.values():
            try:
                stream.journal.apply_retention()
            except (JournalError, OSError) as exc:
                log.error("%s: stream %s: retention failed: %s", self.name, stream.name, exc)
