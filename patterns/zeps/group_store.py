"""The journal of one stream's consumer groups: their records (:mod:`.group_state`) on disk, compacted.

Layout: ``<journal_dir>/<stream directory>.groups/<generation>/``, each
generation a :class:`~zactors.actors.journal.Journal` (CRC'd records, crash
recovery) written by a :class:`~zactors.actors.group_commit.GroupCommit`
with the broker's fsync policy.  The stream directory never holds a ``.``
(:mod:`.names` escapes it), so the broker never takes it for a stream.

A generation starts with a snapshot (one ``S`` record per group) closed by
``["E"]``; records follow.  :meth:`GroupStore.compact` starts the next
generation from a fresh snapshot once the log is much longer than the state
it holds; the old one is deleted only once the new one's snapshot is at the
store's level (written; synced unless ``fsync="never"``).  Opening takes the
newest generation whose snapshot is complete and deletes the others, so a
crash at any point leaves a consistent state.

Descriptors: a store's journal is open only while it is needed.  A store
made without one (the broker loads every stream's groups at start and closes
their journals at once) opens it on the threadpool at its first
:meth:`~GroupStore.log` or :meth:`~GroupStore.when` (the records and the
callbacks wait for it); :meth:`GroupStore.close_soon` (its stream closed)
closes it on the threadpool once nothing waits on it.  So the stores open are
those of the open streams (the broker's open-streams budget), whatever the
number of streams with groups on disk.

Blocking: :func:`load` reads and deletes files (broker setup, or a thread);
:meth:`GroupStore.log` never blocks (GroupCommit writes off the loop's
critical path and fsyncs on the threadpool); :meth:`GroupStore.compact` opens
the new journal on the threadpool; :meth:`GroupStore.when` calls back once
what was logged is at a level (a pair's passive acknowledges replicated
records with it).  The store belongs to the broker's loop.
"""
from __future__ import annotations

import logging
import os
import shutil

import msgpack
from gevent import get_hub

from zactors.actors.group_commit import GroupCommit
from zactors.actors.journal import Journal, JournalError

__all__ = ["GroupStore", "load"]

log = logging.getLogger("zactors.patterns.zeps.broker")
#: journal segment size of a group store
_SEGMENT = 8 << 20
#: compact once the log holds this many records more than the snapshot's state, and 4x that state
_MIN_COMPACT = 100000


def _journal(path):
    return Journal(path, segment_bytes=_SEGMENT, tail_cache_bytes=1 << 20, open_segments=2)


def _records(journal):
    seq, out = journal.first_seq, []
    while True:
        batch = journal.read(seq, 4096, 4 << 20)
        if not batch:
            return out
        for record in batch:
            out.append(msgpack.unpackb(record.body, raw=False, strict_map_key=False,
                                       use_list=True, max_array_len=1 << 24))
        seq = batch[-1].seq + 1


def _generations(directory):
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted((int(n) for n in names if n.isdigit()), reverse=True)


def load(directory):
    """``(generation, journal, records)`` of the newest complete generation under ``directory`` (created
    empty when there is none); older or incomplete generations are deleted.  Blocks (disk)."""
    chosen = None
    for gen in _generations(directory):
        path = os.path.join(directory, "%016d" % gen)
        if chosen is not None:
            shutil.rmtree(path, ignore_errors=True)
            continue
        journal = None
        try:
            journal = _journal(path)
            records = _records(journal)
        except (JournalError, OSError, ValueError, msgpack.UnpackException) as exc:
            log.error("group store %s: generation %d unreadable (%s); trying the previous one", directory, gen, exc)
            if journal is not None:     # (its records were bad: its descriptors and lock go)
                journal.close(sync=False)
            shutil.rmtree(path, ignore_errors=True)
            continue
        if ["E"] not in records:  # its snapshot never reached the disk: the previous generation holds all
            journal.close(sync=False)
            shutil.rmtree(path, ignore_errors=True)
            continue
        chosen = gen, journal, records
    if chosen is None:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        journal = _journal(os.path.join(directory, "%016d" % 1))
        try:
            journal.append(b"", msgpack.packb(["E"]))
            journal.write()
            journal.sync()
        except BaseException:
            journal.close(sync=False)
            raise
        chosen = 1, journal, [["E"]]
    return chosen


class GroupStore:
    """The log of one stream's groups.  ``snapshot()`` (given to :meth:`compact`) returns the records of
    the current state; see the module docstring."""

    def __init__(self, actor, directory, generation, journal, fsync, interval, records):
        self.actor = actor
        self.directory = directory
        self.generation = generation
        self.fsync = fsync
        self.interval = interval
        self.appended = len(records)   # records in this generation
        self.compacting = False
        self._check_at = 0             # should_compact looks at the state again from this many records on
        self.errors = 0
        self._waiting = set()          # when() callbacks not called yet: a compaction's snapshot covers them
        self.journal = self.commit = None   # (None: closed; it opens on the threadpool when needed)
        self._held = []                # records logged while the journal is closed
        self._deferred = []            # (level, callback) of when() calls made meanwhile
        self._opening = self._closing = self._closed = False
        self._job = None               # the open or close under way on the threadpool (close() waits for it)
        if journal is not None:
            self._open(journal)

    def _open(self, journal):
        self.journal = journal
        self.commit = GroupCommit(self.actor, journal, fsync=self.fsync, interval=self.interval, retry=0.1,
                                  on_error=self._failed)
        self.commit.start()

    def _failed(self, exc):
        self.errors += 1
        log.error("group store %s: %s", self.directory, exc)

    def log(self, record):
        """Append ``record`` (a list); written this round, fsynced by the policy.  False if refused.
        While the journal is closed the record waits for it (it opens on the threadpool)."""
        if self.journal is None:
            self._held.append(record)
            self.appended += 1
            self._reopen()
            return True
        try:
            self.journal.append(b"", msgpack.packb(record))
        except JournalError as exc:
            self._failed(exc)
            return False
        self.appended += 1
        self.commit.kick()
        return True

    def when(self, level, callback):
        """``callback()`` once everything logged so far is at ``level`` ("written" or "synced"), in this
        generation or in the snapshot of the next one (a compaction)."""
        if self.journal is None:
            self._deferred.append((level, callback))
            self._reopen()
            return

        def done(_seq=None):
            if waiter in self._waiting:
                self._waiting.discard(waiter)
                callback()

        waiter = (done,)
        self._waiting.add(waiter)
        self.commit.when(level, done, self.journal.last_seq)

    def should_compact(self, live):
        """True when the log is much longer than ``live()`` (the records a snapshot would hold), called
        at most once per 1,024 records logged (it may walk every group of the stream)."""
        if self.compacting or self.journal is None or self.appended <= _MIN_COMPACT or self.appended < self._check_at:
            return False
        self._check_at = self.appended + min(1024, _MIN_COMPACT)
        return self.appended > 4 * live()

    def compact(self, snapshot):
        """Start the next generation from ``snapshot()`` (called in the loop once its journal is open)."""
        self.compacting = True
        path = os.path.join(self.directory, "%016d" % (self.generation + 1))
        self.actor.run_in_thread(_journal, path, on_done=lambda journal, error: self._compact(journal, error, snapshot))

    def _compact(self, journal, error, snapshot):
        if error is not None or self.journal.closed:
            self.compacting = False
            if error is not None:
                self._failed(error)
            if journal is not None:
                journal.close(sync=False)
            return
        old_journal, old_commit = self.journal, self.commit
        records = snapshot() + [["E"]]
        try:
            for record in records:
                journal.append(b"", msgpack.packb(record))
        except JournalError as exc:  # (the old generation goes on: it holds everything)
            self.compacting = False
            self._failed(exc)
            journal.close(sync=False)
            return
        last = journal.last_seq
        covered = list(self._waiting)   # what was logged before: in the new snapshot too
        self.generation += 1
        self.appended = len(records)
        self._check_at = 0
        self._open(journal)
        old_path = old_journal.directory

        def kept(_):  # the new snapshot is at the level: the old generation may go
            for waiter in covered:
                waiter[0]()
            old_commit.stop(sync=False)
            old_journal.close(sync=False)
            self.compacting = False
            self.actor.run_in_thread(shutil.rmtree, old_path, True, on_done=lambda *_: None)

        if self.fsync == "never":
            self.commit.when_written(kept, last)
        else:
            self.commit.when_synced(kept, last)
        self.commit.kick()

    @property
    def path(self):
        """The directory of the current generation's journal."""
        return os.path.join(self.directory, "%016d" % self.generation)

    def _reopen(self):
        """Open the journal on the threadpool (after a close under way)."""
        if self._opening or self._closing or self._closed:
            return
        self._opening = True
        self._spawn(_journal, self.path, on_done=self._reopened)

    def _spawn(self, func, *args, on_done):
        """``func(*args)`` on the hub's threadpool; ``on_done(result, error)`` then in the broker's loop."""
        post = self.actor.post

        def call():
            try:
                result = func(*args)
            except Exception as exc:
                post(on_done, None, exc)
                return None
            post(on_done, result, None)
            return result

        self._job = get_hub().threadpool.spawn(call)

    def _reopened(self, journal, error):
        if not self._opening:       # (close() took it already)
            return
        self._opening = False
        if error is not None:
            if not isinstance(error, (JournalError, OSError)):
                raise error
            self._failed(error)     # (the records and callbacks wait: tried again)
            self.actor.call_later(1.0, self._reopen)
            return
        if self._closed:            # (the broker stopped meanwhile)
            journal.close(sync=self.fsync != "never")
            return
        self._open(journal)
        held, self._held = self._held, []
        try:
            for record in held:
                journal.append(b"", msgpack.packb(record))
        except JournalError as exc:
            self._failed(exc)
        self.commit.kick()
        deferred, self._deferred = self._deferred, []
        for level, callback in deferred:
            self.when(level, callback)

    def close_soon(self):
        """The stream closed: close the journal on the threadpool once nothing waits on it (else it stays
        open, and closes with the stream's next close)."""
        if self.journal is None or self.compacting or self._waiting or self._opening:
            return
        journal, commit = self.journal, self.commit
        if journal.written_seq != journal.last_seq:
            return
        self.journal = self.commit = None
        commit.stop(sync=False, write=False)
        self._closing = True
        self._spawn(journal.close, self.fsync != "never", on_done=self._closed_now)

    def _closed_now(self, _result, error):
        if not self._closing:       # (close() waited for it already)
            return
        self._closing = False
        if error is not None:
            self._failed(error)
        if self._held or self._deferred:    # needed again meanwhile
            self._reopen()

    def close(self):
        """Write (and fsync) what is left, close.  Blocks: teardown."""
        sync = self.fsync != "never"
        job, self._job = self._job, None
        if job is not None and (self._opening or self._closing):  # its result, now
            try:
                journal = job.get()
            except (JournalError, OSError):
                journal = None
            if self._opening and journal is not None:
                self._reopened(journal, None)
            self._opening = self._closing = False
        self._closed = True
        if self.journal is None:
            if not self._held:
                return
            try:                        # what waited for the journal to open
                self._open(_journal(self.path))
                for record in self._held:
                    self.journal.append(b"", msgpack.packb(record))
            except (JournalError, OSError) as exc:
                self._failed(exc)
                return
        self.commit.stop(sync=sync)
        self.journal.close(sync=sync)
