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
starts: its directory and journal are made on the threadpool, then a
cooperative task writes a cut of the map into it while new changes go to
both generations; once the cut is written and fsynced a ``COMPLETE`` file
marks it (on the threadpool; new changes wait meanwhile: :meth:`MapJournal.covers`
says no), and the older generation is closed and removed on the threadpool.  Recovery replays the
newest complete generation, keeping for each key the record with the highest
sequence, so the cut and the changes made meanwhile may interleave in any
order.  Incomplete generations are removed on open.

Sequences are never handed out twice (issue #19).  A power loss in
``ack="written"`` mode (or recovery cutting a corrupt record) can take
changes whose KVPUBs clients already hold; handing their sequences to new
changes would make those clients drop the new KVPUBs as old.  So
``DIR/SEQUENCES`` keeps the map's *epoch* and a *reservation*: a sequence
is handed out only once the reservation covers it (:meth:`MapJournal.covers`;
the file is replaced durably, ``reserve`` sequences ahead, off the loop,
well before they are needed).  A recovery that may have lost changes (the
journal was not closed cleanly, or recovery cut records) starts a new epoch
and goes on from the reservation, past every sequence the server may have
published: a client holding one sees a newer snapshot and re-syncs.  A clean
restart keeps the sequence.  The file is ASCII: ``zactors clone sequences 1``,
then ``epoch reserved``.

Every file and directory operation (generations made and removed, ``COMPLETE``
markers, the sequences file, the journals) goes through the file layer
``files`` (tests simulate power losses with it); every directory entry is
fsynced before it is relied upon.

Files are created 0600 in 0700 directories (they hold keys and values).

Used from the server actor's loop only; not thread-safe.  No file I/O runs
in the loop: recovery reads the journal on the hub's threadpool (the
server's ``setup`` waits for it, the rest of the process runs meanwhile);
reservations, compactions' files and :meth:`MapJournal.close`'s fsyncs run
there too.
"""
import logging
import os
import threading
import time

import msgpack
from gevent import get_hub

from zactors.actors.group_commit import GroupCommit
from zactors.actors.journal import CLEAN_NAME, OS_FILES, Journal, JournalError
from zactors.actors.journal.format import fresh_error, os_error
from zactors.actors.journal.recovery import collector_paused

from .hashmap import Entry

__all__ = ["MapJournal"]

log = logging.getLogger(__name__)

_COMPLETE = "COMPLETE"
_SEQUENCES = "SEQUENCES"
_SEQUENCES_HEAD = b"zactors clone sequences 1\n"


def _read_sequences(directory):
    """``(epoch, reserved)`` from the sequences file of ``directory``; None when there is none."""
    path = os.path.join(directory, _SEQUENCES)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise os_error("read", path, exc) from None
    try:
        if not data.startswith(_SEQUENCES_HEAD):
            raise ValueError("bad header")
        epoch, reserved = (int(n) for n in data[len(_SEQUENCES_HEAD):].split())
        if epoch < 1 or reserved < 0:
            raise ValueError("out of range")
    except ValueError as exc:
        raise JournalError("%s is damaged (%s): the server cannot tell which sequences clients may hold"
                           % (path, exc)) from None
    return epoch, reserved


def _write_sequences(files, directory, epoch, reserved):
    """Replace the sequences file durably.  Blocks (fsyncs); any thread."""
    path = os.path.join(directory, _SEQUENCES)
    try:
        files.write_atomic(path, _SEQUENCES_HEAD + b"%d %d\n" % (epoch, reserved))
    except OSError as exc:
        raise os_error("write", path, exc) from None


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


class _Compaction:
    """A new generation being written: its number and path; while its journal opens on the threadpool,
    the records to start it with (``pending``) and the cut; then its journal, GroupCommit and task."""

    __slots__ = ("number", "path", "pending", "cut", "expires_of", "journal", "commit", "task", "abandoned", "lock")

    def __init__(self, number, path):
        self.number = number
        self.path = path
        self.pending = []           # (key, body): the mark, the tail, and what is appended while it opens
        self.cut = self.expires_of = None
        self.journal = self.commit = self.task = None
        self.abandoned = False      # set by the loop, under ``lock``: the opening thread then drops its journal
        self.lock = threading.Lock()


class MapJournal:
    """The journal of one server's map in ``directory`` (see the module docstring).

    ``reserve``: how many sequences the sequences file reserves ahead.
    ``on_reserved(error)`` runs in the loop when a reservation was written
    (``error`` None: :meth:`covers` may now say yes to more) or failed."""

    def __init__(self, actor, directory, *, fsync="interval", interval=0.1, chunk=1000, ack="written",
                 on_durable=None, on_error=None, retry=1.0, files=None, reserve=100000, on_reserved=None):
        if ack not in ("written", "synced"):
            raise ValueError("ack must be 'written' or 'synced', not %r" % (ack,))
        if reserve < 2:
            raise ValueError("reserve must be at least 2 sequences, not %r" % (reserve,))
        self.actor = actor
        self.ack = ack
        self.on_durable = on_durable
        self.on_error = on_error
        self.on_reserved = on_reserved
        self.retry = retry
        self._voids = []            # (first, last) journal sequences to void once appends are taken again
        self.directory = os.fspath(directory)
        self.fsync = fsync
        self.interval = interval
        self.chunk = chunk
        self.files = files          # the journals' file layer (Journal's files=: tests simulate power losses)
        self._files = OS_FILES if files is None else files
        os.makedirs(self.directory, mode=0o700, exist_ok=True)   # keys and values: the owner's only
        self.generation = None
        self.journal = self.commit = None
        self._next = None           # the _Compaction under way
        self._generations = 0       # the highest generation number used (one abandoned is never reused)
        self._switching = False     # the new generation is being marked complete: new changes wait
        self._jobs = []             # file jobs on the threadpool (close waits for them)
        self.compactions = 0
        self.reserve = reserve
        self.epoch = None           # the map's epoch: a new one after each recovery that may have lost changes
        self.reserved = 0           # the sequences file durably reserves sequences up to this one
        self.reserve_error = None   # the last reservation write failed (retried after ``retry`` s)
        self._reserving = False
        self._retry_at = 0.0

    # -- recovery -------------------------------------------------------------
    def recover(self):
        """``({key: Entry}, sequence)`` from the newest complete generation (the live keys only).

        ``sequence`` is where the server goes on: after a recovery that may
        have lost changes, past every sequence it may have handed out."""
        # seconds for a large map: on the hub's threadpool, so that only this actor waits for it
        live, sequence, jumped, path = get_hub().threadpool.apply(self._recover)
        self.commit = self._commit(self.journal, main=True)
        if jumped:  # a mark: a clean restart before the next change still goes on from here
            self.append(b"", msgpack.packb((sequence,)))
        log.info("%s: recovered %d key(s) at sequence %d from %s (epoch %d)", self.actor.name, len(live),
                 sequence, path, self.epoch)
        return live, sequence

    def _recover(self):
        try:
            return self._recover_files()
        except BaseException:   # the journal, if it opened, is closed: a retry finds it free
            if self.journal is not None:
                self.journal.close(sync=False)
                self.journal = None
            raise

    def _recover_files(self):
        files = self._files
        state = _read_sequences(self.directory)
        for name in os.listdir(self.directory):
            if name.endswith(".tmp"):
                files.unlink(os.path.join(self.directory, name))
        generations = _generations(self.directory)
        complete = [(n, path) for n, path in generations if os.path.exists(os.path.join(path, _COMPLETE))]
        for n, path in generations:
            if not complete or n != complete[-1][0]:
                self._remove(path)              # unfinished compaction, or superseded
        live, sequence = {}, 0
        if complete:
            self.generation, path = complete[-1]
            clean = os.path.exists(os.path.join(path, CLEAN_NAME))
            self.journal, live, sequence = _open_and_replay(path, self.files)
            lost = not clean or self.journal.stats()["truncated_bytes"] > 0
        else:
            self.generation = 0
            path = self._path(0)
            if state is None:   # a new map: its directory's own entry must survive a power loss too
                files.fsync_dir(os.path.dirname(os.path.abspath(self.directory)))
            self._make_generation(path)
            self._mark_complete(path)
            self.journal = Journal(path, files=self.files)
            lost = state is not None            # the map had generations, and none is left
        epoch, reserved = state if state is not None else (1, 0)
        jumped = False
        if lost:
            epoch += 1
            floor = reserved if state is not None else sequence + self.reserve  # older layout: a best guess
            log.warning("%s: %s may have lost changes clients hold; epoch %d goes on from sequence %d",
                        self.actor.name, path, epoch, max(floor, sequence))
            if floor > sequence:
                sequence, jumped = floor, True
        self.epoch = epoch
        self._generations = max(n for n, _ in generations) if generations else self.generation
        self.reserved = sequence + self.reserve
        _write_sequences(files, self.directory, epoch, self.reserved)
        return live, sequence, jumped, path

    def _commit(self, journal, main):
        """The GroupCommit of ``journal``: the main one reports durability, the next generation's only its
        failure.  Each is stopped before its journal stops being the one it was made for (a stopped
        GroupCommit reports nothing more, not even an fsync in flight)."""
        if main:
            commit = GroupCommit(self.actor, journal, fsync=self.fsync, interval=self.interval, retry=self.retry,
                                 on_written=self._durable if self.ack == "written" else self._written,
                                 on_synced=self._durable if self.ack == "synced" else None, on_error=self._failed)
        else:
            def next_failed(exc):
                log.error("%s: compaction abandoned: %s", self.actor.name, exc)
                self._abandon()
            commit = GroupCommit(self.actor, journal, fsync=self.fsync, interval=self.interval, retry=self.retry,
                                 on_error=next_failed)
        commit.start()
        return commit

    # -- sequence reservations ---------------------------------------------------
    def covers(self, sequence):
        """True when ``sequence`` may be handed out: the sequences file durably reserves it.

        Never blocks: once ``sequence`` is past half the reservation a new one
        is written on the threadpool (``on_reserved`` tells when).  Raises
        :class:`~zactors.actors.journal.JournalError` for a sequence past the
        reservation while the last reservation write failed (retried after
        ``retry`` seconds)."""
        if sequence > self.reserved - self.reserve // 2 and not self._reserving \
                and (self.reserve_error is None or time.monotonic() >= self._retry_at):
            target = max(sequence, self.reserved) + self.reserve
            self._reserving = True
            self.actor.run_in_thread(_write_sequences, self._files, self.directory, self.epoch, target,
                                     on_done=lambda _r, error: self._reserved(target, error))
        if self._switching:             # a compaction switches generations: a few fsyncs' wait
            return False
        if sequence <= self.reserved:
            return True
        if self.reserve_error is not None and not self._reserving:
            raise fresh_error(self.reserve_error)
        return False

    def _reserved(self, target, error):
        self._reserving = False
        if error is None:
            self.reserved = max(self.reserved, target)
            self.reserve_error = None
        else:
            if not isinstance(error, JournalError):
                error = JournalError("reserving sequences in %s failed: %r" % (self.directory, error))
            if self.reserve_error is None:
                log.error("%s: %s (retried in %gs)", self.actor.name, error, self.retry)
            self.reserve_error = error
            self._retry_at = time.monotonic() + self.retry
        if self.on_reserved is not None:
            self.on_reserved(error)

    def _written(self, _jseq):
        self._append_voids()

    def _durable(self, jseq):
        self._append_voids()
        if self.on_durable is not None:
            self.on_durable(jseq)

    def _failed(self, exc):
        if self._next is not None:  # the new generation holds the records being refused too
            self._abandon()
        if self.on_error is not None:
            self.on_error(exc)

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

    def _make_generation(self, path):
        """Make the directory of a generation, its entry durable.  Blocks."""
        self._files.mkdir(path, 0o700)
        self._files.fsync_dir(self.directory)

    def _mark_complete(self, path):
        """The ``COMPLETE`` marker of generation ``path``, durable.  Blocks."""
        files = self._files
        fd = files.open(os.path.join(path, _COMPLETE), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            files.fsync(fd)
        finally:
            files.close(fd)
        files.fsync_dir(path)

    def _remove(self, path):
        """Remove generation ``path`` (a journal directory: files only), durably.  Blocks; an error is
        logged (the next recovery removes what is left)."""
        files = self._files
        try:
            names = os.listdir(path)
            if _COMPLETE in names:      # first, durably: a crash half-way must not leave it complete
                files.unlink(os.path.join(path, _COMPLETE))
                files.fsync_dir(path)
                names.remove(_COMPLETE)
            for name in names:
                files.unlink(os.path.join(path, name))
            files.rmdir(path)
            files.fsync_dir(self.directory)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("%s: removing %s failed: %s", self.actor.name, path, exc)

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
        nxt = self._next
        if nxt is not None:
            if nxt.commit is None:      # still opening: it starts with these
                nxt.pending.append((key, body))
            else:
                nxt.journal.append(key, body)
                nxt.commit.kick()
        return jseq

    def maybe_compact(self, entries, expires_of, sequence, tail=()):
        """Start a compaction if the journal holds far more records than the map has keys."""
        if (self._next is None and not self._voids and self.journal.error is None
                and self.journal.last_seq > 4 * len(entries) + 10000):
            self.compact(entries, expires_of, sequence, tail)

    def compact(self, entries, expires_of, sequence, tail=()):
        """Write a cut of ``entries`` ({key: entry}) at ``sequence`` into a new generation, as a
        cooperative task; ``tail``: ``(key, body)`` records journaled but not yet in ``entries``.

        Never blocks: the new generation's directory and journal are made on the threadpool (the
        changes appended meanwhile are kept for it), then the cut is written in the loop."""
        if self._next is not None:
            self._abandon()
        self._generations += 1
        nxt = self._next = _Compaction(self._generations, self._path(self._generations))
        nxt.pending.append((b"", msgpack.packb((sequence,))))
        nxt.pending.extend(tail)
        nxt.cut = dict(entries)
        nxt.expires_of = expires_of
        self._thread(self._start_generation, nxt, on_done=lambda _r, error: self._started(nxt, error))

    def _start_generation(self, nxt):
        """On the threadpool: the new generation's directory and journal (or, once abandoned, nothing left)."""
        self._remove(nxt.path)          # a leftover of a crash
        self._make_generation(nxt.path)
        journal = Journal(nxt.path, files=self.files)
        with nxt.lock:
            if not nxt.abandoned:
                nxt.journal = journal
                return
        journal.close(sync=False)
        self._remove(nxt.path)

    def _started(self, nxt, error):
        if nxt is not self._next:       # abandoned meanwhile (its journal, if any, closes on its own)
            return
        if error is not None:
            if not isinstance(error, (OSError, JournalError)):
                raise error
            log.error("%s: compaction not started: %s", self.actor.name, error)  # a full disk: the map stays
            self._abandon()
            return
        journal = nxt.journal
        nxt.commit = self._commit(journal, main=False)
        try:
            for key, body in nxt.pending:
                journal.append(key, body)
        except JournalError as exc:
            log.error("%s: compaction abandoned: %s", self.actor.name, exc)
            self._abandon()
            return
        nxt.pending = None
        cut, nxt.cut = nxt.cut, None
        nxt.task = self.actor.start_task(self._write_cut(cut, nxt.expires_of, journal, nxt.commit),
                                         on_done=lambda task: self._cut_done(nxt, task))

    def _write_cut(self, cut, expires_of, journal, commit):
        pack = msgpack.packb
        for i, (key, e) in enumerate(cut.items(), 1):
            journal.append(key, pack((e.sequence, e.uuid, e.properties, e.value, expires_of(e))))
            if i % self.chunk == 0:
                commit.kick()
                yield
        commit.kick()

    def _cut_done(self, nxt, task):
        if task.cancelled or nxt is not self._next:
            return
        if task.error is not None:
            log.error("%s: compaction failed: %s", self.actor.name, task.error)
            self._abandon()
            return
        # New changes wait (covers() says no) until the switch: then everything in the new
        # generation is synced before it is marked complete, and nothing is appended meanwhile.
        self._switching = True
        nxt.commit.when_synced(lambda seq: self._switch(nxt))

    def _switch(self, nxt):
        """The cut (and every change) in the new generation is synced: mark it complete, off the loop."""
        if nxt is not self._next:
            return
        self._thread(self._complete, nxt, on_done=lambda _r, error: self._switched(nxt, error))

    def _complete(self, nxt):
        """On the threadpool: mark the new generation complete, unless it was abandoned (under its lock:
        an abandoned generation is never marked once its removal may have started)."""
        with nxt.lock:
            if not nxt.abandoned:
                self._mark_complete(nxt.path)

    def _switched(self, nxt, error):
        """The new generation is complete: it becomes the current one; the old one closes and goes,
        off the loop (a restart removes what a crash leaves of it)."""
        if nxt is not self._next:
            return
        if error is not None:
            if not isinstance(error, (OSError, JournalError)):
                raise error
            log.error("%s: compaction abandoned: %s", self.actor.name, error)
            self._abandon()
            return
        old_journal, old_path = self.journal, self._path(self.generation)
        self.commit.stop(sync=False, write=False)   # the old generation is superseded: nothing more to say
        nxt.commit.stop(sync=False, write=False)    # re-made as the main one: it reports durability from now on
        self.generation, self.journal = nxt.number, nxt.journal
        self.commit = self._commit(nxt.journal, main=True)
        self.commit.kick()              # (records a passive followed during the switch)
        self._next = None
        self._switching = False
        self._thread(self._close_and_remove, old_journal, old_path)
        self.compactions += 1
        log.info("%s: journal compacted into generation %d", self.actor.name, nxt.number)
        if self.on_durable is not None:  # both generations were synced: everything so far is durable
            self.on_durable(None)
        if self.on_reserved is not None:  # the changes that waited for the switch go on
            self.on_reserved(None)

    def _close_and_remove(self, journal, path):
        """Close ``journal`` (no fsync: it is dropped) and remove its generation.  Blocks; any thread."""
        journal.close(sync=False)
        self._remove(path)

    def _abandon(self):
        """Drop the compaction under way; its journal closes and its generation goes, off the loop."""
        nxt, self._next = self._next, None
        if self._switching:
            self._switching = False
            if self.on_reserved is not None:
                self.actor.call_later(0, self.on_reserved, None)   # the changes that waited go on
        if nxt.task is not None:
            nxt.task.cancel()
        if nxt.commit is not None:
            nxt.commit.stop(sync=False, write=False)
        with nxt.lock:
            nxt.abandoned = True
            journal = nxt.journal
        if journal is not None:         # (else still opening: _start_generation removes it)
            self._thread(self._close_and_remove, journal, nxt.path)

    def _thread(self, func, *args, on_done=None):
        """Run the blocking ``func(*args)`` on the hub's threadpool; ``on_done(result, error)`` then runs
        in the actor's loop.  :meth:`close` waits for every such job (their journals and directories)."""
        post = self.actor.post

        def call():
            try:
                result = func(*args)
            except Exception as exc:
                if on_done is None:
                    raise
                post(on_done, None, exc)
            else:
                if on_done is not None:
                    post(on_done, result, None)

        self._jobs = [job for job in self._jobs if not job.ready()]
        self._jobs.append(get_hub().threadpool.spawn(call))

    def close(self):
        """Write and fsync what is left and close the journal (clean: a restart keeps the epoch).  The
        fsyncs run on the hub's threadpool: the calling greenlet waits, the rest of the process runs;
        so do the compaction's file jobs still under way, which it waits for too."""
        if self._next is not None:
            self._abandon()
        if self.commit is not None:
            self.commit.stop(sync=False)
            get_hub().threadpool.apply(self.journal.close)
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            try:
                job.get()
            except (OSError, JournalError) as exc:
                log.warning("%s: %s", self.actor.name, exc)
