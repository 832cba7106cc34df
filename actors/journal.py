"""Journal: a crash-safe, segmented, append-only log of (key, body) records.

:class:`Journal` is the writer, a plain object its owner (a ZEPS broker, a
Clone server) consults per message; :class:`JournalReader` reads a journal
that this or another process writes.  Nothing here imports gevent or zmq:
Spark workers import this module to read segments.

Durability is in three steps, each visible as a sequence number:

- :meth:`Journal.append` frames the record into a memory buffer and returns
  its sequence (``last_seq``).  It never touches the disk.
- :meth:`Journal.write` hands the buffer to the OS (``written_seq``): those
  records survive a ``kill -9`` of the process.
- :meth:`Journal.sync` fsyncs what was written (``synced_seq``): those records
  survive a power loss.  It blocks for about a millisecond, so an actor calls
  it through ``Actor.run_in_thread``; the group-commit policy (every batch,
  every N ms, never) belongs to the owner: see
  :class:`zactors.actors.group_commit.GroupCommit`, which drives both from an
  actor's loop.

Reading: :meth:`Journal.read` serves recent records from a tail cache (about
``tail_cache_bytes`` of them; records not yet written always stay cached, so
the memory bound is roughly ``tail_cache_bytes + 2 * buffer_bytes``), older
ones from the segment files with separate descriptors and large ``pread``
calls, never blocking the writer.  Seeking by time uses the sparse index,
then a scan; timestamps are kept non-decreasing for that.

What blocks (an actor calls these through ``Actor.run_in_thread``, as
:class:`~zactors.actors.group_commit.GroupCommit` does):

- never: ``append``, ``stats``, the sequence properties, ``epoch``/``epochs``/
  ``check_resume``, ``rolling``, ``cached``;
- ``write``: a ``write(2)`` per segment touched (fast, like a send), except
  when ``rolling``: the roll fsyncs the full segment, creates the next one and
  fsyncs the directory (milliseconds);
- ``sync``: an fsync (about a millisecond, far more on a busy disk);
- ``read`` / ``seq_at_time``: memory when the tail cache holds the records
  (``cached(seq)``), else ``pread`` on segment files (a cold disk);
- ``apply_retention``: unlinks and a directory fsync;
- opening (recovery scans the active segment, fsyncs) and ``close``.

Read descriptors of segment files live in an LRU cache of ``open_segments``
(default 16): a replay over a thousand segments keeps 16 open, not a thousand.

Threads: ``append``, ``read``, ``seq_at_time``, ``stats`` and the sequence
properties are meant for the owner's loop; :meth:`write` and :meth:`sync` may
run in another thread while the loop keeps appending (appends go to a fresh
buffer; the buffer swap is the only thing they share with ``append``, under a
short lock that is never held across I/O).  Call ``write`` from one place at a
time (a loop, or one thread); ``sync`` may overlap ``write``.  ``read`` and
``seq_at_time`` are also safe from a thread (cold reads); ``close`` must not
race anything.  :class:`JournalReader` is for one thread.

Failure: an I/O error while writing (ENOSPC, EIO...) makes ``write`` raise
:class:`JournalFull` (no space: ENOSPC, EDQUOT) or :class:`JournalError` (any
other), naming the errno; the file is cut back to its last complete record and
the unwritten records stay in memory.  From then on ``append`` refuses new
records with that error, until a later ``write`` succeeds (call it again once
space is freed: it retries the held records) or the journal is reopened
(held records are then lost, but they were never reported written).  A
failed ``fsync`` is final: the journal refuses everything until reopened.

File format, version 1 (public and stable; all integers little-endian)
-----------------------------------------------------------------------

One directory per stream, holding:

``NNNNNNNNNNNNNNNNNNNN.seg``
    A segment: its first sequence, zero-padded to 20 digits (Kafka style).
    Header (16 bytes): magic ``ZJSG``, u16 version (1), u16 flags (0),
    u64 base sequence (equal to the file name).  Then records, back to back::

        u32 length      bytes after the crc field (20 + key_len + 4 + body_len)
        u32 crc         CRC-32C (Castagnoli) of those ``length`` bytes
        u64 sequence    base sequence + record index: consecutive, from 1
        f64 timestamp   seconds since the epoch (time.time), non-decreasing
        u32 key_len, key bytes
        u32 body_len, body bytes

``NNNNNNNNNNNNNNNNNNNN.idx``
    The sparse index of a sealed segment, written when the segment rolls
    over (derived data: rebuilt by a scan when missing or damaged).  Header
    (44 bytes): magic ``ZJIX``, u16 version, u16 flags, u64 base sequence,
    u64 last sequence, f64 last timestamp, u64 segment size in bytes,
    u32 entry count; then entries of (u64 sequence, f64 timestamp,
    u64 file offset) for the first record and one about every 4 KiB of
    segment; then a u32 CRC-32C of everything before it.

``LOCK``
    Held with ``flock`` by the one writer (a second writer is refused).

``EPOCHS``
    The epoch history, ASCII: the line ``zactors journal epochs 1``, then one
    line ``epoch start_seq`` per epoch, oldest first.  Replaced atomically
    (temp file, fsync, rename, directory fsync).

``CLEAN``
    Empty; present only while the journal is closed cleanly (everything
    synced).  Opening removes it (durably) before accepting records.

Epochs: sequences are never handed to two different records within one
epoch.  A power loss can drop records that were written (and maybe already
delivered) but not synced, and recovery can cut a corrupt record and what
follows; the sequences after the cut would then be reused.  So when the
journal is opened without ``CLEAN`` (a crash, a kill) or recovery cut
anything, a new epoch starts at the next sequence.  A client that remembers
(epoch, last sequence seen) asks :meth:`Journal.check_resume` whether it can
resume (Kafka's leader epochs are the model).

The newest segment is the active one; it is never removed, so the next
sequence survives a journal whose records retention removed entirely (an
empty segment named by the next sequence).

Recovery on open scans the active segment and cuts it at the first torn or
corrupt record (bad length, CRC or sequence): a warning is logged, the cut is
counted in ``stats()`` (``truncated_bytes``, ``crc_errors``) and the sequence
continues after the last good record.  Records after a corrupt one in the
middle of the active segment are lost (the log says how many bytes).  Sealed
segments are checked when read: a bad record there raises
:class:`JournalError` (never a silent skip).

Retention (:meth:`Journal.apply_retention`, also run when a segment rolls
over) removes whole sealed segments, oldest first, while the journal is
larger than ``retain_bytes`` or the segment's newest record is older than
``retain_seconds``.  An idle active segment whose records are all past the
age is first rolled over to an empty one, so age retention empties an idle
journal (the sequence goes on from the empty segment's name).  A read before the first retained sequence raises
:class:`SequenceGone` carrying ``first_seq``.
"""
from __future__ import annotations

import bisect
import errno as _errno
import fcntl
import logging
import os
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from operator import attrgetter
from typing import Any, NamedTuple, Self

from . import journal_codec as _codec
from .journal_codec import crc as _crc
from .journal_files import OS_FILES, Files

__all__ = [
    "Journal", "JournalReader", "Record",
    "JournalError", "JournalFull", "SequenceGone",
    "FORMAT_VERSION", "RECORD_OVERHEAD", "segment_name", "Files",
]

log = logging.getLogger(__name__)

class Record(NamedTuple):
    """One journal record: seq (int >= 1), timestamp (float seconds), key and body (bytes)."""

    seq: int
    timestamp: float
    key: bytes
    body: bytes


_Bytes = bytes | bytearray | memoryview
_codec.bind(Record)

FORMAT_VERSION = 1
SEGMENT_MAGIC = b"ZJSG"
INDEX_MAGIC = b"ZJIX"
SEGMENT_SUFFIX = ".seg"
INDEX_SUFFIX = ".idx"
INDEX_INTERVAL = 4096               # bytes of segment between sparse index entries

_SEG_HEADER = struct.Struct("<4sHHQ")
_IDX_HEADER = struct.Struct("<4sHHQQdQI")
_IDX_ENTRY = struct.Struct("<QdQ")
_PREFIX = struct.Struct("<II")      # length, crc
_HEAD = struct.Struct("<QdI")       # seq, timestamp, key_len
_U32 = struct.Struct("<I")
_REC = struct.Struct("<IIQdI")      # the fixed head of a record: length, crc, seq, timestamp, key_len
HEADER_SIZE = _SEG_HEADER.size
RECORD_OVERHEAD = _PREFIX.size + _HEAD.size + _U32.size    # 32 bytes of framing per record
MAX_RECORD = 1 << 30                # key + body bound: a bad length never makes us allocate GiBs
_MEM_OVERHEAD = 160                 # rough bytes of Python objects per cached Record
_NO_SPACE = (_errno.ENOSPC, _errno.EDQUOT)

_pack_u32 = _U32.pack
_unpack_prefix = _PREFIX.unpack_from
_unpack_u32 = _U32.unpack_from
_unpack_rec = _REC.unpack_from
_MIN_LENGTH = _HEAD.size + _U32.size             # length of a record with empty key and body
_MAX_LENGTH = _MIN_LENGTH + MAX_RECORD
_now = time.time
_INF = float("inf")
_tuple_new = tuple.__new__         # _tuple_new(Record, fields): skips namedtuple's Python __new__
_frame = _codec.frame               # one record framed (and its CRC) into the write buffer, in one call
_decode = _codec.decode             # a chunk of records decoded into Records, in one call
_timestamp = attrgetter("timestamp")


class JournalError(Exception):
    """An I/O error, a corrupt sealed segment, or a misuse of the journal.

    ``errno`` is the OS error number when an OS error caused it, else None.
    """

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class JournalFull(JournalError):
    """No room: the disk is full (``errno`` ENOSPC/EDQUOT), or the memory buffer
    of unwritten records is full (``errno`` None: call :meth:`Journal.write`)."""


class SequenceGone(JournalError):
    """The sequence asked for was removed by retention; ``first_seq`` is the
    first one still available."""

    def __init__(self, first_seq: int) -> None:
        super().__init__("sequence removed by retention; first available is %d" % first_seq)
        self.first_seq = first_seq

    def __reduce__(self) -> tuple[type[SequenceGone], tuple[int]]:
        return (SequenceGone, (self.first_seq,))


def segment_name(base_seq: int) -> str:
    """The file name of the segment whose first sequence is ``base_seq``."""
    return "%020d%s" % (base_seq, SEGMENT_SUFFIX)


def _list_segments(directory, files=OS_FILES):
    """Sorted [(base_seq, path)] of the segment files in ``directory``."""
    found = []
    for name in files.listdir(directory):
        if name.endswith(SEGMENT_SUFFIX) and len(name) == 20 + len(SEGMENT_SUFFIX) \
                and name[:20].isascii() and name[:20].isdigit():
            found.append((int(name[:20]), os.path.join(directory, name)))
    found.sort()
    return found


def _oserror(action, path, exc, cls=None):
    """A JournalError (JournalFull for no space) naming the errno of ``exc``."""
    code = exc.errno
    name = _errno.errorcode.get(code, str(code))
    if cls is None:
        cls = JournalFull if code in _NO_SPACE else JournalError
    return cls("journal %s %s failed: %s (%s)" % (action, path, name, exc.strerror), code)


def _fresh(error):
    """A new exception like ``error``: re-raising one stored exception grows its traceback."""
    return type(error)(str(error), error.errno)


EPOCHS_NAME = "EPOCHS"
CLEAN_NAME = "CLEAN"
_EPOCHS_HEAD = "zactors journal epochs 1\n"


def _format_epochs(epochs):
    return (_EPOCHS_HEAD + "".join("%d %d\n" % pair for pair in epochs)).encode("ascii")


def _read_epochs(path):
    """[(epoch, start_seq)] from the epochs file; None when there is none."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise JournalError("journal epochs file %s unreadable: %s" % (path, exc)) from None
    lines = text.splitlines()
    try:
        if not lines or lines[0] + "\n" != _EPOCHS_HEAD:
            raise ValueError("bad header")
        epochs = [(int(a), int(b)) for a, b in (line.split() for line in lines[1:])]
        if not epochs or any(e2 <= e1 or s2 < 1 for (e1, _), (e2, s2) in zip(epochs, epochs[1:])):
            raise ValueError("epochs out of order")
    except ValueError as exc:
        raise JournalError("journal epochs file %s is damaged (%s): the journal cannot tell "
                           "which sequences clients may hold" % (path, exc)) from None
    return epochs


class _FdCache:
    """Read descriptors of segment files: at most ``cap`` kept open, the least
    recently used closed first (a replay over a thousand segments holds
    ``cap`` fds, not a thousand).  A descriptor in use (between
    :meth:`acquire` and :meth:`release`) is never closed under its reader;
    while ``cap`` are in use at once a few more may be open.  Thread-safe.
    """

    __slots__ = ("files", "cap", "opens", "evictions", "_lock", "_open")

    def __init__(self, files, cap):
        if cap < 1:
            raise ValueError("open_segments must be >= 1, got %r" % (cap,))
        self.files = files
        self.cap = cap
        self.opens = 0
        self.evictions = 0
        self._lock = threading.Lock()
        self._open = OrderedDict()      # segment -> [fd, users, dropped]

    def __len__(self):
        return len(self._open)

    def acquire(self, seg):
        """A read-only descriptor of ``seg``'s file (opened if need be; may block)."""
        with self._lock:
            entry = self._open.get(seg)
            if entry is not None:
                entry[1] += 1
                self._open.move_to_end(seg)
                return entry[0]
        fd = self.files.open(seg.path, os.O_RDONLY)      # outside the lock: may block, may raise
        with self._lock:
            entry = self._open.get(seg)
            if entry is not None:       # another thread opened it meanwhile
                entry[1] += 1
                self._open.move_to_end(seg)
                self.files.close(fd)
                return entry[0]
            self._open[seg] = [fd, 1, False]
            self.opens += 1
            self._trim()
            return fd

    def release(self, seg):
        with self._lock:
            entry = self._open.get(seg)
            if entry is not None:
                entry[1] -= 1
                if entry[2] and not entry[1]:
                    del self._open[seg]
                    self.files.close(entry[0])
                else:
                    self._trim()

    @contextmanager
    def use(self, seg):
        fd = self.acquire(seg)
        try:
            yield fd
        finally:
            self.release(seg)

    def drop(self, seg):
        """Close ``seg``'s descriptor (once its readers are done with it)."""
        with self._lock:
            entry = self._open.get(seg)
            if entry is not None:
                if entry[1]:
                    entry[2] = True
                else:
                    del self._open[seg]
                    self.files.close(entry[0])

    def close_all(self):
        with self._lock:
            entries, self._open = list(self._open.values()), OrderedDict()
        for fd, _users, _dropped in entries:
            self.files.close(fd)

    def _trim(self):
        if len(self._open) <= self.cap:
            return
        for seg in list(self._open):
            entry = self._open[seg]
            if not entry[1]:
                del self._open[seg]
                self.files.close(entry[0])
                self.evictions += 1
                if len(self._open) <= self.cap:
                    return


class _Segment:
    """One segment file: its sparse index and the end of its complete records.

    ``end`` is the byte size of complete, valid records (what readers may
    read); ``last_seq`` the last sequence in it (``base - 1`` when empty).
    Its read descriptor lives in the owner's :class:`_FdCache`.
    """

    __slots__ = ("base", "path", "end", "last_seq", "last_ts", "idx_seq", "idx_ts", "idx_off",
                 "indexed", "checked", "_next_index", "_fds")

    def __init__(self, base, path, fds):
        self.base = base
        self.path = path
        self.end = HEADER_SIZE
        self.last_seq = base - 1
        self.last_ts = None
        self.idx_seq = []
        self.idx_ts = []
        self.idx_off = []
        self.indexed = False
        self.checked = HEADER_SIZE  # bytes from the start whose CRCs scan() checked
        self._next_index = 0        # offset at or past which the next record gets an index entry
        self._fds = fds

    @property
    def first_ts(self):
        return self.idx_ts[0] if self.idx_ts else None

    @property
    def empty(self):
        return self.last_seq < self.base

    def close(self):
        """Close its read descriptor (retention removed the file, or the owner closes)."""
        self._fds.drop(self)

    # -- scanning -------------------------------------------------------

    def scan(self, limit=None):
        """Extend the index over the complete, valid records after ``end``
        (checking each record's CRC, sequence and lengths).

        Stops at the first torn or invalid record, or at ``limit`` bytes.
        Returns None when it stopped at the end of the data, else a reason
        string for the invalid record at ``self.end``.
        """
        with self._fds.use(self) as fd:
            return self._scan(fd, limit)

    def _scan(self, fd, limit):
        if self.end == HEADER_SIZE and not self.indexed:
            head = os.pread(fd, HEADER_SIZE, 0)
            if len(head) < HEADER_SIZE:
                return None if not head else "torn segment header"
            magic, version, _flags, base = _SEG_HEADER.unpack(head)
            if magic != SEGMENT_MAGIC or base != self.base:
                return "bad segment header"
            if version != FORMAT_VERSION:
                raise JournalError("%s: unsupported journal format version %d" % (self.path, version))
        size = os.fstat(fd).st_size if limit is None else limit
        pos = self.end
        expect = self.last_seq + 1
        last_ts = self.last_ts if self.last_ts is not None else -1e300
        next_index = self._next_index
        idx_seq, idx_ts, idx_off = self.idx_seq, self.idx_ts, self.idx_off
        chunk = 1 << 20
        reason = None
        while pos < size and reason is None:
            buf = os.pread(fd, min(chunk, size - pos), pos)
            n = len(buf)
            if n == 0:
                break
            mv = memoryview(buf)
            at = 0
            while at + _REC.size <= n:
                length, crc, seq, ts, klen = _unpack_rec(buf, at)
                stop = at + 8 + length
                if length < _MIN_LENGTH or length > _MAX_LENGTH:
                    reason = "bad record length %d" % length
                    break
                if stop > n:
                    break
                if _crc(mv[at + 8:stop]) != crc:
                    reason = "bad CRC"
                    break
                if seq != expect:
                    reason = "sequence %d where %d was due" % (seq, expect)
                    break
                if klen > length - _MIN_LENGTH or _unpack_u32(buf, at + _REC.size + klen)[0] != length - _MIN_LENGTH - klen:
                    reason = "bad key/body lengths"
                    break
                if ts < last_ts:
                    reason = "timestamp going backwards"
                    break
                if pos + at >= next_index:
                    idx_seq.append(seq)
                    idx_ts.append(ts)
                    idx_off.append(pos + at)
                    next_index = pos + at + INDEX_INTERVAL
                last_ts = ts
                expect = seq + 1
                at = stop
            if at:
                if self.checked == self.end:
                    self.checked = pos + at
                pos += at
                self.end = pos
                self.last_seq = expect - 1
                self.last_ts = last_ts
                self._next_index = next_index
            elif reason is None:
                if n >= 8:
                    need = 8 + _unpack_prefix(buf, 0)[0]
                    if need > n and pos + need <= size:
                        chunk = need            # a record bigger than the chunk: read it whole
                        continue
                break                           # torn: the record runs past the end of the file
        return reason

    def load_index(self):
        """Load the ``.idx`` file of a sealed segment; False if missing or stale."""
        path = self.path[:-len(SEGMENT_SUFFIX)] + INDEX_SUFFIX
        try:
            with open(path, "rb") as f:
                data = f.read()
            size = os.stat(self.path).st_size
        except OSError:
            return False
        if len(data) < _IDX_HEADER.size + 4 or _crc(memoryview(data)[:-4]) != _unpack_u32(data, len(data) - 4)[0]:
            return False
        magic, version, _flags, base, last_seq, last_ts, end, count = _IDX_HEADER.unpack_from(data)
        if magic != INDEX_MAGIC or version != FORMAT_VERSION or base != self.base or end != size \
                or len(data) != _IDX_HEADER.size + count * _IDX_ENTRY.size + 4:
            return False
        seqs, tss, offs = [], [], []
        for seq, ts, off in _IDX_ENTRY.iter_unpack(memoryview(data)[_IDX_HEADER.size:-4]):
            seqs.append(seq)
            tss.append(ts)
            offs.append(off)
        self.idx_seq, self.idx_ts, self.idx_off = seqs, tss, offs
        self.last_seq, self.last_ts, self.end = last_seq, last_ts, end
        self._next_index = (offs[-1] + INDEX_INTERVAL) if offs else 0
        self.indexed = True
        return True

    def index_bytes(self):
        parts = [_IDX_HEADER.pack(INDEX_MAGIC, FORMAT_VERSION, 0, self.base, self.last_seq,
                                  self.last_ts or 0.0, self.end, len(self.idx_seq))]
        pack = _IDX_ENTRY.pack
        parts.extend(pack(s, t, o) for s, t, o in zip(self.idx_seq, self.idx_ts, self.idx_off))
        data = b"".join(parts)
        return data + _pack_u32(_crc(data))

    def ensure_index(self, expect_last=None):
        """Index a sealed segment (from its .idx, else by a full scan)."""
        if self.indexed:
            return
        if not self.load_index():
            if not self.idx_seq:
                self.end = self.checked = HEADER_SIZE   # ``end`` held the file size: scan from the start
            reason = self.scan()
            if reason is not None:
                raise JournalError("%s: corrupt record at offset %d (%s)" % (self.path, self.end, reason))
            self.indexed = True
        if expect_last is not None and self.last_seq != expect_last:
            raise JournalError("%s: ends at sequence %d but the next segment starts at %d: records lost"
                               % (self.path, self.last_seq, expect_last + 1))

    # -- reading --------------------------------------------------------

    def offset_for(self, seq):
        i = bisect.bisect_right(self.idx_seq, seq) - 1
        return self.idx_off[i] if i >= 0 else HEADER_SIZE

    def offset_for_time(self, ts):
        i = bisect.bisect_left(self.idx_ts, ts) - 1
        return (self.idx_off[i], self.idx_seq[i]) if i >= 0 else (HEADER_SIZE, self.base)

    def read(self, from_seq, to_seq, out, max_records, max_bytes, end=None, offset=None):
        """Append records ``from_seq..to_seq`` to ``out`` (bounded by the counts).

        Returns the payload bytes added.  Reads at most up to ``end`` bytes
        (default: the segment's known end), in large ``pread`` chunks.
        CRCs are checked, except over bytes a scan has checked already.
        """
        with self._fds.use(self) as fd:
            return self._read(fd, from_seq, to_seq, out, max_records, max_bytes, end, offset)

    def _read(self, fd, from_seq, to_seq, out, max_records, max_bytes, end, offset):
        end = self.end if end is None else end
        pos = self.offset_for(from_seq) if offset is None else offset
        checked = self.checked
        want = max_records - len(out)
        total = 0
        budget = (1 << 62) if max_bytes is None else max_bytes
        chunk = min(1 << 16, max(1 << 12, want << 9))   # small reads stay small; doubled as it goes
        while pos < end and want > 0:
            buf = os.pread(fd, min(chunk, end - pos), pos)
            n = len(buf)
            before = len(out)
            at, got, status = _decode(buf, 0, out, from_seq, to_seq, before + want, budget - total,
                                      checked - pos)
            total += got
            want -= len(out) - before
            if status == 1:
                return total
            if status == 2:
                raise JournalError("%s: corrupt record at offset %d (bad length or CRC)" % (self.path, pos + at))
            if at == 0:
                need = 8 + _unpack_prefix(buf, 0)[0] if n >= 8 else end
                if need > n and pos + need <= end:
                    chunk = need                # a record bigger than the chunk: read it whole
                    continue
                raise JournalError("%s: record at offset %d runs past the end of the data" % (self.path, pos))
            pos += at
            chunk = min(chunk * 2, 1 << 20)
        return total

    def time_to_seq(self, ts, end=None):
        """First sequence in this segment with timestamp >= ts (last_seq + 1 if none)."""
        if self.last_ts is None or self.last_ts < ts:
            return self.last_seq + 1
        off, seq = self.offset_for_time(ts)
        out = []
        while True:
            out.clear()
            self.read(seq, self.last_seq, out, 1024, None, end=end, offset=off)
            if not out:
                return self.last_seq + 1
            for rec in out:
                if rec.timestamp >= ts:
                    return rec.seq
            seq = out[-1].seq + 1
            off = self.offset_for(seq)


def _check_bytes(value, what):
    if type(value) is bytes:
        return value
    try:
        return bytes(memoryview(value))
    except TypeError:
        raise TypeError("journal %s must be bytes-like, not %s" % (what, type(value).__name__)) from None


class Journal:
    """The writer of one journal directory (see the module docstring).

    ``segment_bytes``: roll to a new segment past this size.
    ``retain_bytes`` / ``retain_seconds``: retention (None: keep everything).
    ``tail_cache_bytes``: recent records kept in memory for :meth:`read`.
    ``buffer_bytes``: unwritten bytes at which :meth:`append` raises
    :class:`JournalFull` (the owner is not calling :meth:`write`).
    ``open_segments``: read descriptors of segment files kept open (an LRU
    cache; ``stats()`` counts ``fd_opens`` and ``fd_evictions``).
    ``files``: the file layer (:class:`~zactors.actors.journal_files.Files`;
    tests pass one that injects faults or simulates a power loss).
    """

    __slots__ = ("directory", "segment_bytes", "retain_bytes", "retain_seconds", "tail_cache_bytes",
                 "buffer_bytes", "files", "_fds", "_lock", "_io_lock", "_sync_lock", "_lockfd", "_segments",
                 "_bases", "_first_seq", "_next_seq", "_last_ts", "_tail_end", "_pending", "_pending_bytes",
                 "_written_seq", "_synced_seq", "_wfd", "_wseg", "_cache", "_cache_bytes", "_error",
                 "_fatal", "_refuse", "_index_at", "_evict_at", "_stats", "_epochs", "closed")

    def __init__(self, directory: str | os.PathLike[str], *, segment_bytes: int = 64 << 20,
                 retain_bytes: int | None = None, retain_seconds: float | None = None,
                 tail_cache_bytes: int = 32 << 20, buffer_bytes: int = 256 << 20,
                 open_segments: int = 16, files: Files | None = None) -> None:
        if segment_bytes < HEADER_SIZE + RECORD_OVERHEAD:
            raise ValueError("segment_bytes too small: %r" % segment_bytes)
        self.files = files = OS_FILES if files is None else files
        self._fds = _FdCache(files, open_segments)
        self.directory = os.fspath(directory)
        self.segment_bytes = segment_bytes
        self.retain_bytes = retain_bytes
        self.retain_seconds = retain_seconds
        self.tail_cache_bytes = tail_cache_bytes
        self.buffer_bytes = buffer_bytes
        self._lock = threading.Lock()       # appends vs the buffer swap and segment list changes
        self._io_lock = threading.Lock()    # the write descriptor: write(), roll, the sync snapshot
        self._sync_lock = threading.Lock()  # one fsync at a time
        self._stats: dict[str, Any] = dict(truncated_bytes=0, crc_errors=0, written_bytes=0, writes=0,
                           syncs=0, segments_removed=0, write_errors=0, fsync_errors=0)
        self._error: JournalError | None = None
        self._fatal: JournalError | None = None
        self._refuse: JournalError | None = None
        self._wfd: Any = None
        self._lockfd = None
        self.closed = True
        try:
            os.makedirs(self.directory, exist_ok=True)
            self._lockfd = files.open(os.path.join(self.directory, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _oserror("open", self.directory, exc) from None
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
            raise _oserror("open", exc.filename or self.directory, exc) from None
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
        for name in files.listdir(self.directory):
            if name.endswith(".tmp"):
                files.unlink(os.path.join(self.directory, name))
        found = _list_segments(self.directory, files)
        fresh = not found
        if fresh:
            self._create_segment_file(1)
            found = [(1, os.path.join(self.directory, segment_name(1)))]
        clean = os.path.exists(os.path.join(self.directory, CLEAN_NAME))
        segments = [_Segment(base, path, self._fds) for base, path in found]
        for seg in segments[:-1]:
            seg.end = os.stat(seg.path).st_size
        active = segments[-1]
        cut = self._recover(active)
        self._segments = segments
        self._bases = [seg.base for seg in segments]
        self._first_seq = segments[0].base
        self._next_seq = active.last_seq + 1
        self._last_ts = active.last_ts
        if self._last_ts is None and len(segments) > 1:
            prev = segments[-2]
            try:
                prev.ensure_index()
                self._last_ts = prev.last_ts
            except JournalError as exc:
                log.warning("%s", exc)
        if self._last_ts is None:
            self._last_ts = 0.0
        self._tail_end = active.end
        self._pending = [[active, bytearray(), active.last_seq]]
        self._pending_bytes = 0
        self._written_seq = self._synced_seq = active.last_seq
        self._wseg = active
        self._wfd = files.open(active.path, os.O_WRONLY | os.O_APPEND)
        if not active.empty:
            files.fsync(self._wfd)  # what a killed writer left in the page cache: synced_seq holds
        self._open_epoch(fresh, clean, cut, active.last_seq + 1)
        self._cache = []
        self._cache_bytes = 0
        self._evict_at = self.tail_cache_bytes
        self._index_at = active._next_index

    def _open_epoch(self, fresh, clean, cut, next_seq):
        """Load the epoch history; start a new epoch at ``next_seq`` after an
        unclean shutdown or a cut (written durably before any record of the
        new epoch); then remove the clean-close marker, durably: from now on a
        crash is unclean."""
        files = self.files
        path = os.path.join(self.directory, EPOCHS_NAME)
        epochs = None if fresh else _read_epochs(path)
        changed = epochs is None
        if epochs is None:              # a new journal, or one from before epochs: the history starts here
            epochs = [(1, 1)]
        if not fresh and (cut or not clean):
            epochs.append((epochs[-1][0] + 1, next_seq))
            changed = True
            log.warning("journal %s: %s; epoch %d starts at sequence %d", self.directory,
                        "recovery cut records" if cut else "not closed cleanly", epochs[-1][0], next_seq)
        if changed:
            files.write_atomic(path, _format_epochs(epochs))
        self._epochs = epochs
        if clean:
            files.unlink(os.path.join(self.directory, CLEAN_NAME))
            files.fsync_dir(self.directory)

    def _recover(self, seg):
        """Scan the active segment; cut it at the first torn or corrupt record.
        True when records (or a torn header) were cut."""
        size = os.stat(seg.path).st_size
        reason = seg.scan()
        seg.indexed = True
        if size < HEADER_SIZE:
            # torn header of a segment created just before a crash: it holds no record
            log.warning("journal %s: rewriting the torn header of %s", self.directory, seg.path)
            self._create_segment_file(seg.base)
            seg.close()
            return size > 0
        if seg.end < size:
            cut = size - seg.end
            self._stats["truncated_bytes"] += cut
            if reason is not None and reason != "bad segment header":
                self._stats["crc_errors"] += 1
            log.warning("journal %s: cut %d bytes after sequence %d in %s at offset %d (%s); "
                        "the records in them are lost", self.directory, cut, seg.last_seq,
                        os.path.basename(seg.path), seg.end, reason or "torn record")
            if reason == "bad segment header":
                raise JournalError("%s: bad segment header (not a version %d journal segment?)"
                                   % (seg.path, FORMAT_VERSION))
            files = self.files
            fd = files.open(seg.path, os.O_WRONLY)
            try:
                files.ftruncate(fd, seg.end)
                files.fsync(fd)
            finally:
                files.close(fd)
            seg.close()
            return True
        return False

    def _create_segment_file(self, base):
        """Create the segment file of ``base`` (header written and fsynced, directory synced)."""
        files = self.files
        path = os.path.join(self.directory, segment_name(base))
        fd = files.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            files.write(fd, _SEG_HEADER.pack(SEGMENT_MAGIC, FORMAT_VERSION, 0, base))
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
        epochs = self._epochs
        if epoch == epochs[-1][0]:
            last = self._next_seq - 1
        else:
            later = [start for e, start in epochs if e > epoch]
            if not later or not any(e == epoch for e, _ in epochs):
                return 0
            last = min(later) - 1
        return None if seq <= last else last

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

    def append_record(self, key: _Bytes, body: _Bytes, timestamp: float | None = None) -> Record:
        """:meth:`append`, returning the :class:`Record` (the one the tail cache holds)."""
        if type(key) is not bytes:
            key = _check_bytes(key, "key")
        if type(body) is not bytes:
            body = _check_bytes(body, "body")
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
            pos = self._tail_end
            if pos + size > self.segment_bytes or self._pending_bytes + size > self.buffer_bytes:
                pos = self._make_room(seq, size, pos)
            chunk = self._pending[-1]
            record = _frame(chunk[1], seq, timestamp, key, body)  # framed, CRC'd, and the cache's Record
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

    def _make_room(self, seq, size, pos):
        """append's slow path: refuse when the buffer is full, else roll over to
        a new segment (created on disk by the next write()).  Returns the offset."""
        if self._pending_bytes + size > self.buffer_bytes and self._pending_bytes:
            raise JournalFull("journal %s: %d bytes not yet written (buffer_bytes): call write()"
                              % (self.directory, self._pending_bytes))
        if pos + size > self.segment_bytes and pos > HEADER_SIZE:
            self._settle()
            seg = _Segment(seq, os.path.join(self.directory, segment_name(seq)), self._fds)
            seg.indexed = True
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
                    raise _fresh(self._error) from None  # set by _write_failed
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
        self._set_error(_oserror("write", seg.path, exc))
        log.error("%s; %d records held in memory, appends refused until a write succeeds",
                  self._error, unwritten[-1][2] - self._written_seq)
        try:
            self.files.ftruncate(self._wfd, seg.end)
        except OSError as exc2:
            self._set_error(self._error, fatal=_oserror("truncate", seg.path, exc2))
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
                self._set_error(self._error, fatal=_oserror("fsync", path, exc, JournalError))
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
        ipath = old.path[:-len(SEGMENT_SUFFIX)] + INDEX_SUFFIX
        try:    # derived data, so not fsynced: a torn or missing index is rebuilt by a scan
            ifd = files.open(ipath + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                files.write(ifd, old.index_bytes())
            finally:
                files.close(ifd)
            files.replace(ipath + ".tmp", ipath)
        except OSError as exc:
            log.warning("journal %s: could not write the index %s (%s); it will be rebuilt by a scan",
                        self.directory, ipath, exc)
            try:
                files.unlink(ipath + ".tmp")
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
            for seg in victims:
                seg.close()
                for path in (seg.path, seg.path[:-len(SEGMENT_SUFFIX)] + INDEX_SUFFIX):
                    try:
                        files.unlink(path)
                    except FileNotFoundError:
                        pass
                    except OSError as exc:
                        log.warning("journal %s: could not remove %s (%s)", self.directory, path, exc)
            try:    # removed for good, or a power loss brings the segments back
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
        seq = self._next_seq
        seg = _Segment(seq, os.path.join(self.directory, segment_name(seq)), self._fds)
        seg.indexed = True
        try:
            self._roll_file(seg)
        except OSError as exc:
            log.warning("journal %s: could not start a new segment for retention (%s)", self.directory, exc)
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
        return _time_to_seq(segments, timestamp, first, end_seq, self._wseg, self._wseg.end)

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


def _time_to_seq(segments, timestamp, first, end_seq, active=None, active_end=None):
    """Seek by time over sealed-then-active segments, below ``end_seq``."""
    # the last segment whose first record is at or before ``timestamp``
    lo, hi = 0, len(segments)
    while lo < hi:
        mid = (lo + hi) // 2
        seg = segments[mid]
        if not seg.indexed:
            seg.ensure_index()
        if seg.first_ts is not None and seg.first_ts < timestamp:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        return first
    seg = segments[lo - 1]
    seq = seg.time_to_seq(timestamp, end=active_end if seg is active else None)
    return min(seq, end_seq)


class JournalReader:
    """Read-only access to a journal directory, which another process may be
    writing.  Imports no gevent; not thread-safe (one per thread).

    It sees records once the writer has written them (``written_seq``), and
    notices new segments and retention as it reads.
    """

    def __init__(self, directory: str | os.PathLike[str], *, open_segments: int = 16,
                 files: Files | None = None) -> None:
        self.directory = os.fspath(directory)
        if not os.path.isdir(self.directory):
            raise JournalError("no journal directory %s" % self.directory)
        self.files = OS_FILES if files is None else files
        self._fds = _FdCache(self.files, open_segments)
        self._segments: dict[int, Any] = {}
        self._order: list[int] = []
        self.refresh()

    def refresh(self) -> None:
        """Re-list the segment files (new segments, retention)."""
        found = _list_segments(self.directory, self.files)
        old = self._segments
        self._segments = {}
        for base, path in found:
            seg = old.get(base)
            if seg is None:
                seg = _Segment(base, path, self._fds)
            self._segments[base] = seg
        for base, seg in old.items():
            if base not in self._segments:
                seg.close()
        self._order = [base for base, _ in found]
        if not self._order:
            raise JournalError("no journal segments in %s" % self.directory)

    def _seg(self, i):
        """Segment ``i`` of the listing, indexed (the last one scanned to its tail)."""
        base = self._order[i]
        seg = self._segments[base]
        if i + 1 < len(self._order):
            if not seg.indexed:
                seg.ensure_index(self._order[i + 1] - 1)
        else:
            seg.scan()          # follow the writer: complete records only
        return seg

    @property
    def first_seq(self) -> int:
        self.refresh()
        return self._order[0]

    @property
    def last_seq(self) -> int:
        self.refresh()
        for i in range(len(self._order) - 1, -1, -1):
            try:
                seg = self._seg(i)
            except FileNotFoundError:
                continue
            if not seg.empty or i == 0:
                return seg.last_seq
        return self._order[0] - 1

    def _locate(self, from_seq):
        i = bisect.bisect_right(self._order, from_seq) - 1
        if i < 0:
            raise SequenceGone(self._order[0])
        return i

    def read(self, from_seq: int, max_records: int = 1024, max_bytes: int | None = 1 << 20) -> list[Record]:
        """Like :meth:`Journal.read`, for written records."""
        if from_seq < 1:
            raise ValueError("journal sequences start at 1, got %r" % (from_seq,))
        if from_seq < self._order[0] or from_seq > self._segments[self._order[-1]].last_seq:
            self.refresh()
        try:
            return self._read(from_seq, max_records, max_bytes)
        except FileNotFoundError:           # retention removed a segment under us
            self.refresh()
            try:
                return self._read(from_seq, max_records, max_bytes)
            except FileNotFoundError:
                raise SequenceGone(self.first_seq) from None

    def _read(self, from_seq, max_records, max_bytes):
        i = self._locate(from_seq)
        out = []
        seq = from_seq
        budget = max_bytes
        limit = None
        while i < len(self._order) and len(out) < max_records:
            seg = self._seg(i)
            if limit is None:
                limit = seg.last_seq
            got = seg.read(seq, seg.last_seq, out, max_records, budget)
            if budget is not None:
                budget -= got
                if budget <= 0:
                    break
            if out:
                seq = out[-1].seq + 1
            if seq <= seg.last_seq:
                break
            i += 1
        if limit is not None and from_seq <= limit and (out[0].seq if out else None) != from_seq:
            raise JournalError("journal %s: sequence %d missing from its segment" % (self.directory, from_seq))
        return out

    def records(self, from_seq: int | None = None, to_seq: int | None = None, since: float | None = None,
                until: float | None = None) -> Iterator[Record]:
        """Iterate records from ``from_seq`` (or the first at or after time
        ``since``) to ``to_seq`` / time ``until`` inclusive, or to the last
        record written when the iteration reaches it."""
        if since is not None:
            start = self.seq_at_time(since)
            from_seq = start if from_seq is None else max(from_seq, start)
        seq = self.first_seq if from_seq is None else from_seq
        while to_seq is None or seq <= to_seq:
            batch = self.read(seq, 4096, None)
            if not batch:
                return
            for rec in batch:
                if (to_seq is not None and rec.seq > to_seq) or (until is not None and rec.timestamp > until):
                    return
                yield rec
            seq = batch[-1].seq + 1

    def seq_at_time(self, timestamp: float) -> int:  # type: ignore[return]  # the 2nd attempt returns or raises
        """First sequence with timestamp >= ``timestamp`` (see :meth:`Journal.seq_at_time`)."""
        for attempt in (0, 1):
            self.refresh()
            try:
                last = self._seg(len(self._order) - 1)      # scanned to its tail
                segments = [self._segments[base] for base in self._order]   # indexed when probed
                return _time_to_seq(segments, timestamp, self._order[0], last.last_seq + 1)
            except FileNotFoundError:       # retention removed a segment under us: list again
                if attempt:
                    raise JournalError("journal %s: segments keep vanishing" % self.directory) from None

    def segments(self) -> list[tuple[int, str, float, float, int]]:
        """[(base_seq, path, first_timestamp, last_timestamp, size)] of the
        non-empty segments, oldest first (for partitioning, e.g. in Spark)."""
        self.refresh()
        out = []
        for i in range(len(self._order)):
            try:
                seg = self._seg(i)
            except FileNotFoundError:
                continue
            if not seg.empty:
                out.append((seg.base, seg.path, seg.first_ts, seg.last_ts, seg.end))
        return out

    def read_segment(self, path: str, from_seq: int | None = None, to_seq: int | None = None) -> Iterator[Record]:

        """Iterate the records of one segment file (a path from :meth:`segments`)."""
        name = os.path.basename(path)
        if not (name.endswith(SEGMENT_SUFFIX) and len(name) == 24 and name[:20].isascii() and name[:20].isdigit()):
            raise JournalError("not a journal segment: %s" % path)
        base = int(name[:20])
        seg = self._segments.get(base) or _Segment(base, os.path.join(self.directory, name), self._fds)
        try:
            self._fds.acquire(seg)             # it may be gone: retention
            self._fds.release(seg)
        except FileNotFoundError:
            raise SequenceGone(self.first_seq) from None
        if not seg.indexed:
            later = [b for b in _list_segments(self.directory, self.files) if b[0] > base]
            if later:
                seg.ensure_index(later[0][0] - 1)
            else:
                seg.scan()
        seq = base if from_seq is None else max(from_seq, base)
        end = seg.last_seq if to_seq is None else min(to_seq, seg.last_seq)
        while seq <= end:
            out: list[Record] = []
            seg.read(seq, end, out, 4096, None)
            if not out:
                return
            yield from out
            seq = out[-1].seq + 1

    def close(self) -> None:
        self._fds.close_all()
        self._segments = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
