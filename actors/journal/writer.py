"""Journal: the writer of one journal directory (see the package docstring).

A plain object its owner (a ZEPS broker, a Clone server) consults per
message.  Which methods block, and which may run in threads, is in the
package docstring.
"""
from __future__ import annotations

import bisect
import fcntl
import logging
import os
import threading
import time
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Self

from .. import journal_codec as _codec
from .files import OS_FILES, Files
from .format import (
    CLEAN_NAME, FORMAT_VERSION, HEADER_SIZE, INDEX_INTERVAL, INDEX_SUFFIX, MAX_RECORD, RECORD_OVERHEAD,
    SEGMENT_SUFFIX, JournalError, JournalFull, Record, SequenceGone, fresh_error, list_segments, os_error,
    segment_header, segment_name,
)
from .producers import PRODUCERS_SUFFIX, ProducerTable, check_producer, load_snapshot, snapshot_bytes, snapshot_path
from .recovery import open_epochs, recover_active, resume_point
from .segment import FdCache, Segment, time_to_seq

__all__ = ["Journal"]

log = logging.getLogger(__name__)

_Bytes = bytes | bytearray | memoryview
_MEM_OVERHEAD = 160                 # rough bytes of Python objects per cached Record
_now = time.time
_INF = float("inf")
_frame = _codec.frame               # one record framed (and its CRC) into the write buffer, in one call
if TYPE_CHECKING:                   # (the checker sees the twin: the C type has the same fields)
    from ..journal_codec import PyAppender as Appender
else:
    Appender = _codec.Appender      # the per-record state (and in C, the common append in one call)
if _codec.SPEEDUPS and (_codec.APPENDER_CONSTANTS != (INDEX_INTERVAL, _MEM_OVERHEAD)):
    raise ImportError("zactors.actors._journal was built with other constants %r: rebuild it"
                      % (_codec.APPENDER_CONSTANTS,))
_timestamp = attrgetter("timestamp")


def check_bytes(value, what):
    if type(value) is bytes:
        return value
    try:
        return bytes(memoryview(value))
    except TypeError:
        raise TypeError("journal %s must be bytes-like, not %s" % (what, type(value).__name__)) from None


class Journal(Appender):
    """The writer of one journal directory (see the module docstring).

    ``segment_bytes``: roll to a new segment past this size.
    ``retain_bytes`` / ``retain_seconds``: retention (None: keep everything).
    ``tail_cache_bytes``: recent records kept in memory for :meth:`read`.
    ``buffer_bytes``: unwritten bytes at which :meth:`append` raises
    :class:`JournalFull` (the owner is not calling :meth:`write`).
    ``open_segments``: read descriptors of segment files kept open (an LRU
    cache; ``stats()`` counts ``fd_opens`` and ``fd_evictions``).
    ``files``: the file layer (:class:`~zactors.actors.journal.files.Files`;
    tests pass one that injects faults or simulates a power loss).
    ``max_producers``: idempotent producers remembered (see :meth:`producers`).
    """

    # and, from Appender (C, or its twin's slots): _next_seq, _last_ts, _tail_end, _pending, _pending_bytes,
    # segment_bytes, buffer_bytes, _index_at, _cache, _cache_bytes, _evict_at, _refuse, _lock
    __slots__ = ("directory", "retain_bytes", "retain_seconds", "tail_cache_bytes", "files", "_fds", "_io_lock",
                 "_sync_lock", "_lockfd", "_segments", "_bases", "_first_seq", "_written_seq", "_synced_seq", "_wfd",
                 "_wseg", "_error", "_fatal", "_stats", "_epochs", "_producers", "closed")

    def __init__(self, directory: str | os.PathLike[str], *, segment_bytes: int = 64 << 20,
                 retain_bytes: int | None = None, retain_seconds: float | None = None,
                 tail_cache_bytes: int = 32 << 20, buffer_bytes: int = 256 << 20,
                 open_segments: int = 16, files: Files | None = None, max_producers: int = 10000) -> None:
        if segment_bytes < HEADER_SIZE + RECORD_OVERHEAD:
            raise ValueError("segment_bytes too small: %r" % segment_bytes)
        self.files = files = OS_FILES if files is None else files
        self._fds = FdCache(files, open_segments)
        self.directory = os.fspath(directory)
        self.segment_bytes = segment_bytes
        self.retain_bytes = retain_bytes
        self.retain_seconds = retain_seconds
        self.tail_cache_bytes = tail_cache_bytes
        self.buffer_bytes = buffer_bytes
        super().__init__()                  # Appender: its _lock, appends vs the buffer swap and segment list changes
        self._io_lock = threading.Lock()    # the write descriptor: write(), roll, the sync snapshot
        self._sync_lock = threading.Lock()  # one fsync at a time
        self._stats: dict[str, Any] = dict(truncated_bytes=0, crc_errors=0, written_bytes=0, writes=0,
                           syncs=0, segments_removed=0, write_errors=0, fsync_errors=0)
        self._producers = ProducerTable(max_producers)
        self._error: JournalError | None = None
        self._fatal: JournalError | None = None
        self._refuse: JournalError | None = None
        self._wfd: Any = None
        self._lockfd = None
        self.closed = True
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)   # message bodies: the owner's only
            self._lockfd = files.open(os.path.join(self.directory, "LOCK"), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise os_error("open", self.directory, exc) from None
        try:
            fcntl.flock(self._lockfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            files.close(self._lockfd)
            self._lockfd = None
            raise JournalError("journal %s is open by another writer" % self.directory) from None
        try:
            self._open()
        except OSError as exc:
            self._release()
            raise os_error("open", exc.filename or self.directory, exc) from None
        except BaseException:
            self._release()
            raise
        self.closed = False

    def _release(self):
        self._fds.close_all()
        if self._wfd is not None:
            self.files.close(self._wfd)
            self._wfd = None
        if self._lockfd is not None:
            self.files.close(self._lockfd)
            self._lockfd = None

    def _open(self):
        files = self.files
        names = files.listdir(self.directory)
        for name in names:
            if name.endswith(".tmp"):
                files.unlink(os.path.join(self.directory, name))
        found = list_segments(self.directory, files)
        have = {os.path.basename(path) for _, path in found}
        for name in names:              # a producer snapshot of a segment that is gone (lost, removed)
            if name.endswith(PRODUCERS_SUFFIX) and name[:-len(PRODUCERS_SUFFIX)] + SEGMENT_SUFFIX not in have:
                files.unlink(os.path.join(self.directory, name))
        fresh = not found
        if fresh:
            self._create_segment_file(1)
            found = [(1, os.path.join(self.directory, segment_name(1)))]
        clean = os.path.exists(os.path.join(self.directory, CLEAN_NAME))
        segments = [Segment(base, path, self._fds) for base, path in found]
        for seg in segments[:-1]:
            seg.end = os.stat(seg.path).st_size
        active = segments[-1]
        self._recover_producers(segments)
        cut = recover_active(self, active, self._producers)
        self._segments = segments
        self._bases = [seg.base for seg in segments]
        self._first_seq = segments[0].base
        self._next_seq = active.last_seq + 1
        last_ts = active.last_ts
        if last_ts is None and len(segments) > 1:
            prev = segments[-2]
            try:
                prev.ensure_index()
                last_ts = prev.last_ts
            except JournalError as exc:
                log.warning("%s", exc)
        self._last_ts = 0.0 if last_ts is None else last_ts
        self._tail_end = active.end
        self._pending = [[active, bytearray(), active.last_seq]]
        self._pending_bytes = 0
        self._written_seq = self._synced_seq = active.last_seq
        self._wseg = active
        self._wfd = files.open(active.path, os.O_WRONLY | os.O_APPEND)
        if not active.empty:
            files.fsync(self._wfd)  # what a killed writer left in the page cache: synced_seq holds
        self._epochs = open_epochs(self, fresh, clean, cut, active.last_seq + 1)
        self._cache = []
        self._cache_bytes = 0
        self._evict_at = self.tail_cache_bytes
        self._index_at = active._next_index
        if active.version < FORMAT_VERSION:  # new records go to a segment of the current format
            if active.empty:
                self._create_segment_file(active.base)
                active.version = FORMAT_VERSION
            else:
                with self._lock:
                    self._start_segment()

    def _recover_producers(self, segments):
        """Seed the producer table with the newest snapshot a segment has, then the producers of
        the sealed segments after it (recover_active adds the active segment's)."""
        start, items = 0, None
        for i in range(len(segments) - 1, -1, -1):
            items = load_snapshot(snapshot_path(segments[i].path), segments[i].base)
            if items is not None:
                start = i
                break
        if items:
            self._producers.load(items)
        complete = True
        for seg in segments[start:-1]:  # a snapshot lost or damaged: walk the sealed segments it covered
            walker = Segment(seg.base, seg.path, self._fds)
            try:
                reason = walker.scan(producers=self._producers)
            finally:
                walker.close()
            if reason is not None:
                complete = False
                log.warning("journal %s: %s: corrupt record at offset %d (%s); producers after it are not known",
                            self.directory, seg.path, walker.end, reason)
        if start < len(segments) - 1 and complete:     # walked: the next open need not walk again
            self._write_snapshot(segments[-1].path, segments[-1].base, self._producers.items())

    def _create_segment_file(self, base):
        """Create the segment file of ``base`` (header written and fsynced, directory synced)."""
        files = self.files
        path = os.path.join(self.directory, segment_name(base))
        fd = files.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        try:
            files.write(fd, segment_header(base))
            files.fsync(fd)
            files.fsync_dir(self.directory)
        except BaseException:
            files.close(fd)
            try:
                files.unlink(path)
            except OSError:
                pass
            raise
        files.close(fd)
        return path

    # -- sequences ------------------------------------------------------

    @property
    def first_seq(self) -> int:
        """First retained sequence (``last_seq + 1`` when the journal is empty)."""
        return self._first_seq

    @property
    def last_seq(self) -> int:
        """Last appended sequence (0 for a new journal)."""
        return self._next_seq - 1

    @property
    def written_seq(self) -> int:
        """Last sequence handed to the OS: survives a kill -9 of the process."""
        return self._written_seq

    @property
    def synced_seq(self) -> int:
        """Last sequence fsynced: survives a power loss."""
        return self._synced_seq

    @property
    def epoch(self) -> int:
        """The current epoch: a new one starts (at the next sequence) whenever
        the journal is opened after an unclean shutdown or recovery cut records."""
        return self._epochs[-1][0]

    @property
    def epochs(self) -> list[tuple[int, int]]:
        """The epoch history: [(epoch, start_seq)], oldest first (a copy)."""
        return list(self._epochs)

    def check_resume(self, epoch: int, seq: int) -> int | None:
        """Can a client that last saw ``seq`` in ``epoch`` resume at ``seq + 1``?

        None when it can: every record up to ``seq`` of that epoch is still
        the one it saw.  Otherwise the last sequence of ``epoch`` that survived
        (the client holds records after it that were lost, and their sequences
        went, or will go, to other records): it must drop what it holds past
        that sequence and resume after it.  0 for an epoch this journal never had.
        """
        return resume_point(self._epochs, self._next_seq - 1, epoch, seq)

    @property
    def error(self) -> JournalError | None:
        """The error that makes the journal refuse appends, or None."""
        return self._fatal or self._error

    @property
    def broken(self) -> bool:
        """True after an error only reopening clears (a failed fsync or truncate)."""
        return self._fatal is not None

    # -- writing --------------------------------------------------------

    def append(self, key: _Bytes, body: _Bytes, timestamp: float | None = None) -> int:
        """Buffer a record and return its sequence.  O(1), no I/O.

        ``timestamp`` defaults to ``time.time()``; one lower than the previous
        record's is raised to it (timestamps never go backwards, so seeking by
        time works).  Raises :class:`JournalFull` or :class:`JournalError`
        while the journal refuses appends (see the module docstring).
        """
        return self.append_record(key, body, timestamp)[0]

    def _append_record(self, key: _Bytes, body: _Bytes, timestamp: float | None = None,
                       producer: tuple[bytes, int] | None = None) -> Record:
        """:meth:`append`, returning the :class:`Record` (the one the tail cache holds: 4 items).

        ``producer=(pid, pseq)`` (an id of at most 255 bytes, a u64 sequence)
        stores them with the record and in :meth:`producers`.  The journal
        does not refuse a duplicate itself: its owner checks the table first.

        This is the general path, and the pure-Python twin of the C
        ``Appender.append_record`` (the public name: it does the common case,
        bytes without a producer and with room, in one C call, and calls this
        for everything else).
        """
        if producer is not None:
            pid, pseq = check_producer(producer)
        if type(key) is not bytes:
            key = check_bytes(key, "key")
        if type(body) is not bytes:
            body = check_bytes(body, "body")
        klen = len(key)
        blen = len(body)
        if klen + blen > MAX_RECORD:
            raise ValueError("journal record too large: %d bytes (limit %d)" % (klen + blen, MAX_RECORD))
        if timestamp is None:
            timestamp = _now()
        else:
            timestamp = float(timestamp)
            if timestamp != timestamp or timestamp in (_INF, -_INF):
                raise ValueError("journal timestamp must be finite, got %r" % timestamp)
        with self._lock:
            if self._refuse is not None:
                raise self._refusal()
            if timestamp < self._last_ts:
                timestamp = self._last_ts
            seq = self._next_seq
            size = klen + blen + RECORD_OVERHEAD
            if producer is not None:
                size += 9 + len(pid)
            pos = self._tail_end
            if pos + size > self.segment_bytes or self._pending_bytes + size > self.buffer_bytes:
                pos = self._make_room(seq, size, pos)
            chunk = self._pending[-1]
            if producer is None:
                record = _frame(chunk[1], seq, timestamp, key, body)  # framed, CRC'd, and the cache's Record
            else:
                record = _frame(chunk[1], seq, timestamp, key, body, pid, pseq)
                self._producers.put(pid, pseq, seq)
            chunk[2] = seq
            if pos >= self._index_at:
                seg = chunk[0]
                seg.idx_seq.append(seq)
                seg.idx_ts.append(timestamp)
                seg.idx_off.append(pos)
                self._index_at = pos + INDEX_INTERVAL
            self._tail_end = pos + size
            self._pending_bytes += size
            self._next_seq = seq + 1
            self._last_ts = timestamp
            self._cache.append(record)
            self._cache_bytes += klen + blen + _MEM_OVERHEAD
            if self._cache_bytes > self._evict_at:
                self._evict()
        return record

    if not _codec.SPEEDUPS:
        append_record = _append_record

    def _make_room(self, seq, size, pos):
        """append's slow path: refuse when the buffer is full, else roll over to
        a new segment (created on disk by the next write()).  Returns the offset."""
        if self._pending_bytes + size > self.buffer_bytes and self._pending_bytes:
            raise JournalFull("journal %s: %d bytes not yet written (buffer_bytes): call write()"
                              % (self.directory, self._pending_bytes))
        if pos + size > self.segment_bytes and pos > HEADER_SIZE:
            self._settle()
            seg = Segment(seq, os.path.join(self.directory, segment_name(seq)), self._fds)
            seg.indexed = True
            seg.producers = self._producers.items()     # as of its base: its snapshot
            self._segments.append(seg)
            self._bases.append(seq)
            self._pending.append([seg, bytearray(), seq - 1])
            self._index_at = 0
            pos = HEADER_SIZE
        return pos

    def _settle(self):
        """Bring the newest segment's last_seq/last_ts up to date (append skips it)."""
        seg = self._segments[-1]
        if self._next_seq > seg.base:
            seg.last_seq = self._next_seq - 1
            seg.last_ts = self._last_ts

    def _set_error(self, error=None, fatal=None):
        if fatal is not None:
            self._fatal = fatal
        self._error = error
        self._refuse = self._fatal or self._error or (JournalError("closed") if self.closed else None)

    def _refusal(self):
        if self.closed:
            return JournalError("journal %s is closed" % self.directory)
        if self._fatal is not None:
            return self._stopped()
        cause = self._error
        return type(cause)("journal %s refuses appends: %s" % (self.directory, cause), cause.errno)

    def _evict(self):
        """Drop the oldest written records until the cache is 1/32 under its bound.

        A small step each time (about 1 ms of work at the default bound)
        rather than a quarter at once, which stalled the loop for ~30 ms.
        """
        cache = self._cache
        target = self._cache_bytes - (self.tail_cache_bytes - (self.tail_cache_bytes >> 5))
        written = self._written_seq
        dropped = 0
        n = 0
        for rec in cache:
            if dropped >= target or rec.seq > written:
                break
            dropped += len(rec.key) + len(rec.body) + _MEM_OVERHEAD
            n += 1
        if n:
            del cache[:n]
            self._cache_bytes -= dropped
        if self._cache_bytes > self.tail_cache_bytes:
            self._evict_at = 1 << 62        # the rest is unwritten: wait for write()

    def write(self) -> int:
        """Hand the buffered records to the OS; return ``written_seq``.

        Fast (a write per segment touched) unless a segment rolls over
        (:attr:`rolling`): the roll fsyncs the full segment, creates the next
        one and fsyncs the directory (blocks for milliseconds: an actor runs
        that write on its threadpool, as GroupCommit does).  May run in a
        thread while the loop appends.  On an I/O error raises
        :class:`JournalFull` / :class:`JournalError` and keeps the records
        for a retry; after a failed fsync raises :class:`JournalError` for good.
        """
        with self._io_lock:
            if self._fatal is not None:
                raise self._stopped()
            if self.closed:
                raise JournalError("journal %s is closed" % self.directory)
            with self._lock:
                self._settle()
                pending = self._pending
                if len(pending) == 1 and not pending[0][1]:
                    self._set_error(None)
                    return self._written_seq
                last = pending[-1]
                self._pending = [[last[0], bytearray(), last[2]]]
                self._pending_bytes = 0
            rolled = False
            write = self.files.write
            for i, (seg, data, last_seq) in enumerate(pending):
                try:
                    if seg is not self._wseg:
                        self._roll_file(seg)
                        rolled = True
                    if data:
                        view = memoryview(data)
                        while view:
                            view = view[write(self._wfd, view):]
                        del view
                except OSError as exc:
                    self._write_failed(exc, pending[i:])
                    raise fresh_error(self._error) from None  # type: ignore[arg-type]  # set by _write_failed
                except JournalError:                # a failed fsync: the journal stopped
                    self._requeue(pending[i:])
                    raise
                seg.end += len(data)
                self._written_seq = last_seq
                self._stats["written_bytes"] += len(data)
            self._stats["writes"] += 1
            self._evict_at = self.tail_cache_bytes
            self._set_error(None)
        if rolled and (self.retain_bytes is not None or self.retain_seconds is not None):
            self.apply_retention()
        return self._written_seq

    @property
    def rolling(self) -> bool:
        """True when the next :meth:`write` rolls over to a new segment (and so
        blocks on fsyncs: run it off the hub)."""
        pending = self._pending
        return len(pending) > 1 or pending[0][0] is not self._wseg

    def _write_failed(self, exc, unwritten):
        """Cut the file back to its last complete record and requeue ``unwritten``."""
        self._stats["write_errors"] += 1
        seg = self._wseg
        self._set_error(os_error("write", seg.path, exc))
        log.error("%s; %d records held in memory, appends refused until a write succeeds",
                  self._error, unwritten[-1][2] - self._written_seq)
        try:
            self.files.ftruncate(self._wfd, seg.end)
        except OSError as exc2:
            self._set_error(self._error, fatal=os_error("truncate", seg.path, exc2))
            log.error("%s: the journal must be reopened", self._fatal)
        self._requeue(unwritten)

    def _requeue(self, unwritten):
        """Put the chunks a failed write took back in front of what was appended meanwhile."""
        with self._lock:
            held = self._pending
            chunks = [list(chunk) for chunk in unwritten]
            head = held[0]              # the chunk appends went to, on the segment written last
            if head[0] is chunks[-1][0]:
                # a new bytearray: the failed write may still hold a view of the old one
                chunks[-1] = [head[0], chunks[-1][1] + head[1], head[2]]
                held = held[1:]
            self._pending = chunks + held
            self._pending_bytes = sum(len(c[1]) for c in self._pending)

    def _fsync(self, fd, path):
        """fsync ``fd``; a failure stops the journal for good (it never retries an fsync:
        the kernel may have dropped the pages it failed to write, and a retry that
        succeeds would vouch for data that is gone).  Raises a :class:`JournalError`."""
        try:
            self.files.fsync(fd)
        except OSError as exc:
            raise self._fsync_failed(path, exc) from None

    def _fsync_failed(self, path, exc):
        """Stop the journal (once, logged once); the error to raise."""
        with self._lock:
            first = self._fatal is None
            if first:
                self._stats["fsync_errors"] += 1
                self._set_error(self._error, fatal=os_error("fsync", path, exc, JournalError))
        if first:
            log.error("%s: the journal stopped (an fsync is never retried); reopen it", self._fatal)
        return self._stopped()

    def _stopped(self):
        """A fresh error saying why the journal stopped (a stored one re-raised grows its traceback)."""
        return JournalError("journal %s stopped: %s; it must be reopened (records not synced may be lost)"
                            % (self.directory, self._fatal), self._fatal.errno)

    def _roll_file(self, seg):
        """Seal the segment being written and start writing ``seg``."""
        old = self._wseg
        files = self.files
        self._fsync(self._wfd, old.path)
        self._synced_seq = max(self._synced_seq, self._written_seq)
        self._create_segment_file(seg.base)
        fd = files.open(seg.path, os.O_WRONLY | os.O_APPEND)
        files.close(self._wfd)
        self._wfd = fd
        self._wseg = seg
        seg.end = HEADER_SIZE
        old.indexed = True
        if seg.producers is not None:
            self._write_snapshot(seg.path, seg.base, seg.producers)
            seg.producers = None
        self._write_derived(old.path[:-len(SEGMENT_SUFFIX)] + INDEX_SUFFIX, old.index_bytes(), "index")

    def _write_snapshot(self, path, base, items):
        """Write the producer snapshot of the segment ``base`` durably (a few ms, at a roll: off the
        hub), so that recovery after a power loss need not walk sealed segments.  On failure the
        stale one is removed: recovery then walks."""
        spath = snapshot_path(path)
        try:
            self.files.write_atomic(spath, snapshot_bytes(base, items))
        except OSError as exc:
            log.warning("journal %s: could not write the producer snapshot %s (%s); recovery will walk "
                        "the segments before it", self.directory, spath, exc)
            for stale in (spath + ".tmp", spath):
                try:
                    self.files.unlink(stale)
                except OSError:
                    pass

    def _write_derived(self, path, data, what):
        """Write a file of derived data (an index): not fsynced (a torn or missing one is rebuilt
        by a scan); on failure the stale one is removed."""
        files = self.files
        try:
            ifd = files.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                view = memoryview(data)
                while view:
                    view = view[files.write(ifd, view):]
            finally:
                files.close(ifd)
            files.replace(path + ".tmp", path)
        except OSError as exc:
            log.warning("journal %s: could not write the %s %s (%s); it will be rebuilt by a scan",
                        self.directory, what, path, exc)
            for stale in (path + ".tmp", path):
                try:
                    files.unlink(stale)
                except OSError:
                    pass

    def sync(self) -> int:
        """fsync what was written; return ``synced_seq``.  Blocks ~1 ms: run it in a thread.

        A failed fsync stops the journal: this and every later call raise
        :class:`JournalError` (logged once) until the journal is reopened."""
        with self._sync_lock:
            with self._io_lock:
                if self._fatal is not None:
                    raise self._stopped()
                if self.closed:
                    raise JournalError("journal %s is closed" % self.directory)
                seq = self._written_seq
                if seq <= self._synced_seq:
                    return self._synced_seq
                fd = self.files.dup(self._wfd)
                path = self._wseg.path
            try:
                self._fsync(fd, path)
            finally:
                self.files.close(fd)
            self._stats["syncs"] += 1
            with self._io_lock:
                if seq > self._synced_seq:
                    self._synced_seq = seq
                return self._synced_seq

    # -- retention ------------------------------------------------------

    def apply_retention(self, now: float | None = None) -> int:
        """Remove whole sealed segments past ``retain_bytes`` / ``retain_seconds``.

        Never removes the segment being written.  Returns the number of
        segments removed.
        """
        if self.retain_bytes is None and self.retain_seconds is None:
            return 0
        now = time.time() if now is None else now
        with self._io_lock:
            with self._lock:
                self._settle()
                if self.retain_seconds is not None:
                    self._roll_if_idle(now - self.retain_seconds)
                segments = list(self._segments)
            active = segments.index(self._wseg)
            total = sum(seg.end for seg in segments[:active + 1])
            victims = []
            for i in range(active):
                seg = segments[i]
                too_big = self.retain_bytes is not None and total > self.retain_bytes
                too_old = False
                if not too_big and self.retain_seconds is not None:
                    try:
                        seg.ensure_index()
                    except JournalError as exc:
                        log.warning("%s", exc)
                    too_old = seg.last_ts is not None and seg.last_ts < now - self.retain_seconds
                if not (too_big or too_old):
                    break
                victims.append(seg)
                total -= seg.end
            if not victims:
                return 0
            with self._lock:
                del self._segments[:len(victims)]
                del self._bases[:len(victims)]
                self._first_seq = self._segments[0].base
            files = self.files
            for n, seg in enumerate(victims, 1):
                seg.close()
                for path in (seg.path, seg.path[:-len(SEGMENT_SUFFIX)] + INDEX_SUFFIX, snapshot_path(seg.path)):
                    try:
                        files.unlink(path)
                    except FileNotFoundError:
                        pass
                    except OSError as exc:
                        log.warning("journal %s: could not remove %s (%s)", self.directory, path, exc)
                if n % 16 == 0 or n == len(victims):
                    try:    # removed for good (a power loss would bring them back), 16 at a time
                        files.fsync_dir(self.directory)
                    except OSError as exc:
                        log.warning("journal %s: could not fsync the directory (%s)", self.directory, exc)
            self._stats["segments_removed"] += len(victims)
            log.info("journal %s: retention removed %d segments; first sequence now %d",
                     self.directory, len(victims), self._first_seq)
            return len(victims)

    def _roll_if_idle(self, cutoff):
        """Start an empty segment when every record of the active one, all
        written, is older than ``cutoff``: age retention can then remove it.
        (The empty segment, named by the next sequence, keeps the sequence.)"""
        latest = self._segments[-1]
        if latest is not self._wseg or latest.empty or latest.last_ts >= cutoff \
                or len(self._pending) != 1 or self._pending[0][1]:
            return
        self._start_segment()

    def _start_segment(self):
        """Seal the active segment (all written) and start an empty one at the next sequence."""
        seq = self._next_seq
        seg = Segment(seq, os.path.join(self.directory, segment_name(seq)), self._fds)
        seg.indexed = True
        seg.producers = self._producers.items()
        try:
            self._roll_file(seg)
        except OSError as exc:
            log.warning("journal %s: could not start a new segment (%s)", self.directory, exc)
            return
        self._segments.append(seg)
        self._bases.append(seq)
        self._pending = [[seg, bytearray(), seq - 1]]
        self._tail_end = HEADER_SIZE
        self._index_at = 0

    # -- reading --------------------------------------------------------

    def cached(self, from_seq: int) -> bool:
        """True when :meth:`read` from ``from_seq`` is served from memory (no disk read)."""
        with self._lock:
            cache = self._cache
            return from_seq >= self._next_seq or bool(cache) and from_seq >= cache[0].seq

    def read(self, from_seq: int, max_records: int = 1024, max_bytes: int | None = 1 << 20) -> list[Record]:
        """Records from ``from_seq`` on, at most ``max_records`` and about
        ``max_bytes`` of key + body (always at least one record when one exists).

        Served from the tail cache when it holds ``from_seq``, else from the
        segment files (blocking on a cold disk: call it in a thread for
        that).  Returns [] past ``last_seq``; raises :class:`SequenceGone`
        before ``first_seq``.
        """
        if from_seq < 1:
            raise ValueError("journal sequences start at 1, got %r" % (from_seq,))
        with self._lock:
            self._settle()
            if from_seq < self._first_seq:
                raise SequenceGone(self._first_seq)
            if from_seq >= self._next_seq or max_records <= 0:
                return []
            cache = self._cache
            if cache and from_seq >= cache[0].seq:
                i = from_seq - cache[0].seq
                out = cache[i:i + max_records]
            else:
                out = None
                cache_first = cache[0].seq if cache else self._next_seq
                segments = list(self._segments)
                bases = list(self._bases)
        if out is not None:
            if max_bytes is not None:
                total = 0
                for n, rec in enumerate(out):
                    total += len(rec.key) + len(rec.body)
                    if total > max_bytes and n:
                        del out[n:]
                        break
            return out
        to_seq = min(cache_first - 1, self._written_seq)
        out = []
        i = bisect.bisect_right(bases, from_seq) - 1
        seq = from_seq
        budget = max_bytes
        try:
            while i < len(segments) and seq <= to_seq and len(out) < max_records:
                seg = segments[i]
                if not seg.indexed:
                    seg.ensure_index(bases[i + 1] - 1 if i + 1 < len(bases) else None)
                got = seg.read(seq, to_seq, out, max_records, budget)
                if budget is not None:
                    budget -= got
                    if budget <= 0:
                        break
                seq = out[-1].seq + 1 if out else seq
                if seq <= seg.last_seq:
                    break
                i += 1
        except FileNotFoundError as exc:
            if from_seq < self._first_seq:      # retention removed it while we read
                raise SequenceGone(self._first_seq) from None
            raise JournalError("journal %s: segment file missing: %s" % (self.directory, exc.filename)) from None
        if (out[0].seq if out else None) != from_seq and from_seq <= to_seq:
            raise JournalError("journal %s: sequence %d missing from its segment" % (self.directory, from_seq))
        if out and out[-1].seq == to_seq and len(out) < max_records and (budget is None or budget > 0):
            out.extend(self.read(to_seq + 1, max_records - len(out), budget and max(budget, 1)))
        return out

    def seq_at_time(self, timestamp: float) -> int:
        """First sequence whose record's timestamp is >= ``timestamp``
        (``last_seq + 1`` if none; ``first_seq`` if all are)."""
        with self._lock:
            self._settle()
            cache = self._cache
            if cache and timestamp > cache[0].timestamp:
                i = bisect.bisect_left(cache, timestamp, key=_timestamp)
                return max(cache[0].seq + i, self._first_seq)
            segments = list(self._segments)
            first = self._first_seq
            end_seq = cache[0].seq if cache else self._next_seq
        return time_to_seq(segments, timestamp, first, end_seq, self._wseg, self._wseg.end)

    # -- idempotent producers -----------------------------------------

    def producers(self) -> dict[bytes, tuple[int, int]]:
        """{producer id: (its last pseq, that record's seq)} of the most recent
        ``max_producers`` producers, oldest first (a new dict).

        On open, recovered from what is on disk (a record recovery cut or a
        power loss dropped is not in it); then updated by every append with a
        producer, written or not (as ``last_seq`` is).  Never blocks."""
        with self._lock:
            return self._producers.as_dict()

    def producer(self, pid: bytes) -> tuple[int, int] | None:
        """(last pseq, that record's seq) of producer ``pid``, or None when the
        journal does not remember it (never appended, or evicted: the least
        recently appended go first, as recovery rebuilds the table).  The one
        table an owner checks for a duplicate before it appends.  Never blocks."""
        with self._lock:
            return self._producers.get(pid)

    @property
    def producers_evicted(self) -> int:
        """Producers evicted from the table (over ``max_producers``) since the journal opened."""
        return self._producers.evicted

    # -- the rest -------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """A snapshot of the journal's state and counters (a new dict).

        ``segments``, ``disk_bytes``, ``first_seq``/``last_seq``/``written_seq``/
        ``synced_seq``, ``pending_bytes`` (appended, not yet written),
        ``cache_records``/``cache_bytes``, ``truncated_bytes`` and ``crc_errors``
        (recovery at open), ``written_bytes``, ``writes``, ``syncs``,
        ``write_errors``, ``fsync_errors``, ``segments_removed``,
        ``open_fds``/``fd_opens``/``fd_evictions`` (the read-descriptor cache),
        ``error`` (why appends are refused, or None), ``directory``.
        """
        with self._lock:
            self._settle()
            segments = list(self._segments)
            out = dict(self._stats)
            out.update(
                directory=self.directory, segments=len(segments),
                disk_bytes=sum(seg.end for seg in segments),
                first_seq=self._first_seq, last_seq=self._next_seq - 1,
                written_seq=self._written_seq, synced_seq=self._synced_seq,
                pending_bytes=self._pending_bytes, cache_records=len(self._cache),
                cache_bytes=self._cache_bytes, open_fds=len(self._fds), fd_opens=self._fds.opens,
                fd_evictions=self._fds.evictions, epoch=self._epochs[-1][0],
                producers=len(self._producers), producers_evicted=self._producers.evicted,
                error=None if self.error is None else str(self.error))
        return out

    def close(self, sync: bool = True) -> None:
        """Write (and by default fsync) what is buffered, then release the directory.

        Records that cannot be written are lost (an error is logged)."""
        if self.closed:
            return
        try:
            if self._fatal is None:
                self.write()
                if sync:
                    self.sync()
                if self._synced_seq == self._next_seq - 1 and self._error is None and self._fatal is None:
                    self._mark_clean()
        except JournalError as exc:
            log.error("journal %s closed with records unwritten: %s", self.directory, exc)
        finally:
            with self._io_lock:
                self.closed = True
                self._set_error(self._error)
                self._release()
                self._cache = []

    def _mark_clean(self):
        """Leave the clean-close marker: every record is synced, the next open keeps the epoch."""
        files = self.files
        try:
            files.close(files.open(os.path.join(self.directory, CLEAN_NAME), os.O_WRONLY | os.O_CREAT))
            files.fsync_dir(self.directory)
        except OSError as exc:
            log.warning("journal %s: no clean-close marker (%s): the next open starts a new epoch",
                        self.directory, exc)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<Journal %s seq %d..%d written %d synced %d>" % (
            self.directory, self._first_seq, self._next_seq - 1, self._written_seq, self._synced_seq)
