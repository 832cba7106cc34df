"""Persistence of a Clone server's map in the kernel's :class:`~zactors.actors.journal.Journal`.

Layout: ``DIR/gen-NNNNNNNN/`` journals, one *generation* each.  Every change
the server applies (a set, a delete, an expiry) is one record: key = the map
key, body = msgpack ``[sequence, uuid, properties, value, expires]``
(``expires``: wall-clock epoch seconds or None; an empty value is a delete).
Two other bodies: ``[sequence]`` (a *mark*: the map was at ``sequence``,
written first in a compacted generation, so that a restart never hands out a
sequence again even when the last change was a delete), and ``[first, last]``
(a *void*: the records of journal sequences first..last of this generation
were refused to their clients after a failed write and do not count).
Writes and fsyncs run through :class:`~zactors.actors.group_commit.GroupCommit`
(fsync every ``interval`` s by default, off the loop).

Acknowledgement: ``ack="written"`` (survives a crash of the process) or
``"synced"`` (fsynced: survives a power loss).  ``on_durable(jseq)`` runs in
the loop whenever the records up to journal sequence ``jseq`` (what
:meth:`MapJournal.record` returned) reach that level; ``on_error(exc)``
when a write or an fsync fails (the records not written are then
:meth:`voided <MapJournal.void>` by the owner, who refuses them).

Compaction: when a generation holds more than ``4 x keys + 10,000`` records,
or when the map was replaced (a re-sync from the peer), a new generation
starts: a cooperative task writes a cut of the map into it while new changes
go to both generations; once the cut is written and fsynced a ``COMPLETE``
file marks it, and the older generations are removed.  Recovery replays the
newest complete generation, keeping for each key the record with the highest
sequence, so the cut and the changes made meanwhile may interleave in any
order.  Incomplete generations are removed on open.

Files are created 0600 in 0700 directories (they hold keys and values).

Used from the server actor's loop only; not thread-safe.  Recovery reads
the journal on the hub's threadpool: the server's ``setup`` waits for it,
the rest of the process runs meanwhile.
"""
import logging
import os
import shutil
import time

import msgpack
from gevent import get_hub

from zactors.actors.group_commit import GroupCommit
from zactors.actors.journal import Journal, JournalError
from zactors.actors.journal.recovery import collector_paused

from .hashmap import Entry

__all__ = ["MapJournal"]

log = logging.getLogger(__name__)

_COMPLETE = "COMPLETE"


def _generations(directory):
    out = []
    for name in os.listdir(directory):
        if name.startswith("gen-") and name[4:].isdigit():
            out.append((int(name[4:]), os.path.join(directory, name)))
    return sorted(out)


def _open_and_replay(path, files=None):
    """``(journal, {key: Entry}, sequence)`` of the generation at ``path`` (through the file layer
    ``files``): opening the journal checks its records and cuts a torn tail.  Blocks; touches nothing
    but the new journal (any thread)."""
    journal = Journal(path, files=files)
    try:
        live, sequence, voids = _replay(journal, ())
        if voids:
            live, sequence, _ = _replay(journal, voids)
    except BaseException:
        journal.close(sync=False)
        raise
    return journal, live, sequence


def _replay(journal, voids):
    """``({key: Entry}, sequence, voids)`` from one generation's open ``journal``, skipping the ``voids``.

    One pass that builds the map's own :class:`~.hashmap.Entry` objects (ttl as a deadline on this
    process's monotonic clock), reading the journal in large batches through the writer, whose
    opening checked the records already: about 1.5 us a key.  For each key the record with the
    highest sequence wins, a delete too; deletes and expired keys leave at the end.
    """
    with collector_paused():  # a million new entries would start collections that walk the whole map
        return _replay_entries(journal, voids)


def _replay_entries(journal, voids):
    unpack = msgpack.unpackb
    now, wall = time.monotonic(), time.time()
    entries = {}
    get = entries.get
    sequence, found, prune = 0, [], False
    seq = journal.first_seq
    while True:
        batch = journal.read(seq, 65536, None)
        if not batch:
            break
        for jseq, _time, key, body in batch:
            change = unpack(body)
            if len(change) != 5:
                if len(change) == 2:
                    found.append(tuple(change))
                elif change[0] > sequence:
                    sequence = change[0]
                continue
            if voids and any(first <= jseq <= last for first, last in voids):
                continue
            number, uuid, props, value, expires = change
            if number > sequence:
                sequence = number
            old = get(key)
            if old is None or number > old.sequence:
                if expires is None:
                    entries[key] = Entry(value, number, uuid, props, None)
                else:
                    entries[key] = Entry(value, number, uuid, props, now + (expires - wall))
                    prune = True
                if not value:
                    prune = True
        seq = batch[-1].seq + 1
    if prune:
        entries = {k: e for k, e in entries.items() if e.value and (e.deadline is None or e.deadline > now)}
    return entries, sequence, found


class MapJournal:
    """The journal of one server's map in ``directory`` (see the module docstring)."""

    def __init__(self, actor, directory, *, fsync="interval", interval=0.1, chunk=1000, ack="written",
                 on_durable=None, on_error=None, retry=1.0, files=None):
        if ack not in ("written", "synced"):
            raise ValueError("ack must be 'written' or 'synced', not %r" % (ack,))
        self.actor = actor
        self.ack = ack
        self.on_durable = on_durable
        self.on_error = on_error
        self.retry = retry
        self._voids = []            # (first, last) journal sequences to void once appends are taken again
        self.directory = os.fspath(directory)
        self.fsync = fsync
        self.interval = interval
        self.chunk = chunk
        self.files = files          # the journals' file layer (Journal's files=: tests simulate power losses)
        os.makedirs(self.directory, mode=0o700, exist_ok=True)   # keys and values: the owner's only
        self.generation = None
        self.journal = self.commit = None
        self._next = None           # (generation, journal, commit) being written by compaction
        self._task = None
        self.compactions = 0

    # -- recovery -------------------------------------------------------------
    def recover(self):
        """``({key: Entry}, sequence)`` from the newest complete generation (the live keys only)."""
        complete = [(n, path) for n, path in _generations(self.directory)
                    if os.path.exists(os.path.join(path, _COMPLETE))]
        for n, path in _generations(self.directory):
            if not complete or n > complete[-1][0] or n < complete[-1][0]:
                shutil.rmtree(path, ignore_errors=True)  # unfinished compaction, or superseded
        live, sequence = {}, 0
        if complete:
            self.generation, path = complete[-1]
            # seconds for a large map: on the hub's threadpool, so that only this actor waits for it
            self.journal, live, sequence = get_hub().threadpool.apply(_open_and_replay, (path, self.files))
        else:
            self.generation = 0
            path = self._path(0)
            os.makedirs(path, mode=0o700, exist_ok=True)
            self._mark_complete(path)
            self.journal = Journal(path, files=self.files)
        self.commit = self._commit(self.journal, main=True)
        log.info("%s: recovered %d key(s) at sequence %d from %s", self.actor.name, len(live), sequence, path)
        return live, sequence

    def _commit(self, journal, main):
        if main:
            durable = self._durable
            commit = GroupCommit(self.actor, journal, fsync=self.fsync, interval=self.interval, retry=self.retry,
                                 on_written=durable if self.ack == "written" else self._written,
                                 on_synced=durable if self.ack == "synced" else None, on_error=self._failed)
        else:
            commit = GroupCommit(self.actor, journal, fsync=self.fsync, interval=self.interval, retry=self.retry,
                                 on_error=self._next_failed)
        commit.start()
        return commit

    def _written(self, jseq):
        self._append_voids()

    def _durable(self, jseq):
        self._append_voids()
        if self.on_durable is not None:
            self.on_durable(jseq)

    def _failed(self, exc):
        if self._next is not None:  # the new generation holds the records being refused too
            self._task.cancel()
            self._abandon()
        if self.on_error is not None:
            self.on_error(exc)

    def _next_failed(self, exc):
        if self._next is not None:
            log.error("%s: compaction abandoned: %s", self.actor.name, exc)
            self._task.cancel()
            self._abandon()

    def void(self, first, last):
        """Records ``first``..``last`` (journal sequences) do not count: written as soon as the journal
        takes appends again (a restart before then may find them)."""
        self._voids.append((first, last))
        self._append_voids()

    def _append_voids(self):
        if not self._voids or self.journal.error is not None:
            return
        while self._voids:
            self.journal.append(b"", msgpack.packb(self._voids[0]))
            self._voids.pop(0)
        self.commit.kick()

    def _path(self, n):
        return os.path.join(self.directory, "gen-%08d" % n)

    def _mark_complete(self, path):
        fd = os.open(os.path.join(path, _COMPLETE), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        dfd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    # -- appending -------------------------------------------------------------
    def record(self, key, sequence, uuid, properties, value, expires):
        """Journal one change (value b"": a delete); return its journal sequence.

        Raises :class:`~zactors.actors.journal.JournalError` while the journal
        refuses appends (a write failed and was not yet retried successfully)."""
        return self.append(key, msgpack.packb((sequence, uuid, properties, value, expires)))

    def append(self, key, body):
        """Journal a record packed by :meth:`record`; return its journal sequence."""
        jseq = self.journal.append(key, body)
        self.commit.kick()
        if self._next is not None:
            self._next[1].append(key, body)
            self._next[2].kick()
        return jseq

    def maybe_compact(self, entries, expires_of, sequence, tail=()):
        """Start a compaction if the journal holds far more records than the map has keys."""
        if (self._next is None and not self._voids and self.journal.error is None
                and self.journal.last_seq > 4 * len(entries) + 10000):
            self.compact(entries, expires_of, sequence, tail)

    def compact(self, entries, expires_of, sequence, tail=()):
        """Write a cut of ``entries`` ({key: entry}) at ``sequence`` into a new generation, as a
        cooperative task; ``tail``: ``(key, body)`` records journaled but not yet in ``entries``."""
        if self._next is not None:
            self._task.cancel()
            self._abandon()
        n = self.generation + 1 if self._next is None else self._next[0] + 1
        path = self._path(n)
        shutil.rmtree(path, ignore_errors=True)
        journal = Journal(path, files=self.files)
        commit = self._commit(journal, main=False)
        journal.append(b"", msgpack.packb((sequence,)))
        for key, body in tail:
            journal.append(key, body)
        self._next = (n, journal, commit)
        self._task = self.actor.start_task(self._write_cut(dict(entries), expires_of, journal, commit),
                                           on_done=self._cut_done)

    def _write_cut(self, cut, expires_of, journal, commit):
        pack = msgpack.packb
        for i, (key, e) in enumerate(cut.items(), 1):
            journal.append(key, pack((e.sequence, e.uuid, e.properties, e.value, expires_of(e))))
            if i % self.chunk == 0:
                commit.kick()
                yield
        commit.kick()

    def _cut_done(self, task):
        if task.cancelled or self._next is None:
            return
        if task.error is not None:
            log.error("%s: compaction failed: %s", self.actor.name, task.error)
            self._abandon()
            return
        n, journal, commit = self._next
        commit.when_synced(lambda seq, n=n: self._switch(n))

    def _switch(self, n):
        if self._next is None or self._next[0] != n:
            return
        _n, journal, commit = self._next
        try:  # the changes appended since the cut was synced: the new generation must hold them all
            journal.write()
            journal.sync()
        except JournalError as exc:
            log.error("%s: compaction abandoned: %s", self.actor.name, exc)
            self._abandon()
            return
        self._mark_complete(self._path(n))
        old_path = self._path(self.generation)
        self.commit.stop()
        self.journal.close()
        commit.stop(sync=False)   # re-made as the main one: it reports durability from now on
        self.generation, self.journal = n, journal
        self.commit = self._commit(journal, main=True)
        self._next = self._task = None
        shutil.rmtree(old_path, ignore_errors=True)
        self.compactions += 1
        log.info("%s: journal compacted into generation %d", self.actor.name, n)
        if self.on_durable is not None:  # both generations were synced: everything so far is durable
            self.on_durable(None)

    def _abandon(self):
        n, journal, commit = self._next
        self._next = self._task = None
        commit.stop(sync=False)
        journal.close(sync=False)
        shutil.rmtree(self._path(n), ignore_errors=True)

    def close(self):
        if self._task is not None:
            self._task.cancel()
        if self._next is not None:
            self._abandon()
        if self.commit is not None:
            self.commit.stop()
            self.journal.close()
