"""One segment file: the record walker (recovery's scan), its sparse index, batch reads;
and the LRU cache of the read descriptors of segment files.

Imports no gevent.  A :class:`Segment` is used by one writer (or one reader)
at a time for scanning; its reads may run in threads (their descriptors are
pinned in the :class:`FdCache` while in use).
"""
from __future__ import annotations

import bisect
import os
import struct
import threading
from collections import OrderedDict
from contextlib import contextmanager

from .. import journal_codec as _codec
from ..journal_codec import crc as _crc
from .format import (
    FORMAT_VERSION, HEADER_SIZE, INDEX_ENTRY, INDEX_HEADER, INDEX_INTERVAL, INDEX_MAGIC, INDEX_SUFFIX,
    READ_VERSIONS, SEGMENT_HEADER, SEGMENT_MAGIC, SEGMENT_SUFFIX, JournalError, parse_index,
)

__all__ = ["FdCache", "Segment", "time_to_seq"]

_IDX_HEADER = INDEX_HEADER
_IDX_ENTRY = INDEX_ENTRY
_PREFIX = struct.Struct("<II")              # length, crc
_U32 = struct.Struct("<I")
_pack_u32 = _U32.pack
_unpack_prefix = _PREFIX.unpack_from
_decode = _codec.decode                     # a chunk of records decoded into Records, in one call


_OVERHEAD = _codec.RECORD_HEAD + 4          # framing bytes per record
_LAST_SEQ = (1 << 64) - 1
_MANY = (1 << 62)


_corruption = _codec.corruption             # why the walker refused a record


class FdCache:
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


class Segment:
    """One segment file: its sparse index and the end of its complete records.

    ``end`` is the byte size of complete, valid records (what readers may
    read); ``last_seq`` the last sequence in it (``base - 1`` when empty).
    Its read descriptor lives in the owner's :class:`FdCache`.
    """

    __slots__ = ("base", "path", "end", "last_seq", "last_ts", "idx_seq", "idx_ts", "idx_off",
                 "indexed", "checked", "producers", "version", "_next_index", "_fds")

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
        self.producers = None       # a new segment's producer table as of its base (its snapshot, to write)
        self.version = FORMAT_VERSION   # of its header (what a scan from the start read)
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

    def scan(self, limit=None, producers=None):
        """Extend the index over the complete, valid records after ``end``
        (checking each record's CRC, sequence and lengths).

        Stops at the first torn or invalid record, or at ``limit`` bytes.
        Returns None when it stopped at the end of the data, else a reason
        string for the invalid record at ``self.end``.  ``producers``, a
        :class:`ProducerTable`, learns the producer of each valid record.
        """
        with self._fds.use(self) as fd:
            return self._scan(fd, limit, producers)

    def _scan(self, fd, limit, producers=None):
        if self.end == HEADER_SIZE and not self.indexed:
            head = os.pread(fd, HEADER_SIZE, 0)
            if len(head) < HEADER_SIZE:
                return None if not head else "torn segment header"
            magic, version, _flags, base = SEGMENT_HEADER.unpack(head)
            if magic != SEGMENT_MAGIC or base != self.base:
                return "bad segment header"
            if version not in READ_VERSIONS:
                raise JournalError("%s: unsupported journal format version %d" % (self.path, version))
            self.version = version
        size = os.fstat(fd).st_size if limit is None else limit
        pos = self.end
        expect = self.last_seq + 1
        last_ts = self.last_ts if self.last_ts is not None else -1e300
        next_index = self._next_index
        idx_seq, idx_ts, idx_off = self.idx_seq, self.idx_ts, self.idx_off
        chunk = 1 << 20
        reason = None
        records = []
        while pos < size and reason is None:
            buf = os.pread(fd, min(chunk, size - pos), pos)
            n = len(buf)
            if n == 0:
                break
            records.clear()         # the codec's walker checks lengths and CRCs; here, sequence and time
            _, _, status = _decode(buf, 0, records, 0, _LAST_SEQ, _MANY, _MANY, 0, True)
            at = 0
            for rec in records:
                seq, ts, key, body = rec[0], rec[1], rec[2], rec[3]
                if seq != expect:
                    reason = "sequence %d where %d was due" % (seq, expect)
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
                if len(rec) > 4:          # a producer trailer (format 2)
                    if producers is not None:
                        producers.put(rec[4], rec[5], seq)
                    at += _OVERHEAD + len(key) + len(body) + 9 + len(rec[4])
                else:
                    at += _OVERHEAD + len(key) + len(body)
            if status == 2 and reason is None:
                reason = _corruption(buf, at)
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
        parsed = parse_index(data, self.base, size)
        if parsed is None:
            return False
        last_seq, last_ts, end, entries = parsed
        seqs, tss, offs = [], [], []
        for seq, ts, off in _IDX_ENTRY.iter_unpack(entries):
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

    def read(self, from_seq, to_seq, out, max_records, max_bytes, end=None, offset=None, producers=False):
        """Append records ``from_seq..to_seq`` to ``out`` (bounded by the counts).

        Returns the payload bytes added.  Reads at most up to ``end`` bytes
        (default: the segment's known end), in large ``pread`` chunks.
        CRCs are checked, except over bytes a scan has checked already.
        With ``producers``, records that carry one are 6-item Records.
        """
        with self._fds.use(self) as fd:
            return self._read(fd, from_seq, to_seq, out, max_records, max_bytes, end, offset, producers)

    def _read(self, fd, from_seq, to_seq, out, max_records, max_bytes, end, offset, producers=False):
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
                                      checked - pos, producers)
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


def time_to_seq(segments, timestamp, first, end_seq, active=None, active_end=None):
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
