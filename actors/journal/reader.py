"""JournalReader: read-only access to a journal directory that another process may be writing.

Imports no gevent (Spark workers use it).  Not thread-safe: one per thread.
"""
from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from typing import Any, Self

from .files import OS_FILES, Files
from .format import SEGMENT_SUFFIX, JournalError, Record, SequenceGone, list_segments
from .segment import FdCache, Segment, time_to_seq

__all__ = ["JournalReader"]


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
        self._fds = FdCache(self.files, open_segments)
        self._segments: dict[int, Any] = {}
        self._order: list[int] = []
        self.refresh()

    def refresh(self) -> None:
        """Re-list the segment files (new segments, retention)."""
        found = list_segments(self.directory, self.files)
        old = self._segments
        self._segments = {}
        for base, path in found:
            seg = old.get(base)
            if seg is None:
                seg = Segment(base, path, self._fds)
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

    def read(self, from_seq: int, max_records: int = 1024, max_bytes: int | None = 1 << 20,
             producers: bool = False) -> list[Record]:
        """Like :meth:`Journal.read`, for written records.  With ``producers``, a record
        appended with a producer comes with its ``producer`` and ``pseq`` (a 6-item Record)."""
        if from_seq < 1:
            raise ValueError("journal sequences start at 1, got %r" % (from_seq,))
        if from_seq < self._order[0] or from_seq > self._segments[self._order[-1]].last_seq:
            self.refresh()
        try:
            return self._read(from_seq, max_records, max_bytes, producers)
        except FileNotFoundError:           # retention removed a segment under us
            self.refresh()
            try:
                return self._read(from_seq, max_records, max_bytes, producers)
            except FileNotFoundError:
                raise SequenceGone(self.first_seq) from None

    def _read(self, from_seq, max_records, max_bytes, producers=False):
        i = self._locate(from_seq)
        out = []
        seq = from_seq
        budget = max_bytes
        limit = None
        while i < len(self._order) and len(out) < max_records:
            seg = self._seg(i)
            if limit is None:
                limit = seg.last_seq
            got = seg.read(seq, seg.last_seq, out, max_records, budget, producers=producers)
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
                until: float | None = None, producers: bool = False) -> Iterator[Record]:
        """Iterate records from ``from_seq`` (or the first at or after time
        ``since``) to ``to_seq`` / time ``until`` inclusive, or to the last
        record written when the iteration reaches it (``producers``: as in :meth:`read`)."""
        if since is not None:
            start = self.seq_at_time(since)
            from_seq = start if from_seq is None else max(from_seq, start)
        seq = self.first_seq if from_seq is None else from_seq
        while to_seq is None or seq <= to_seq:
            batch = self.read(seq, 4096, None, producers)
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
                return time_to_seq(segments, timestamp, self._order[0], last.last_seq + 1)
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
        seg = self._segments.get(base) or Segment(base, os.path.join(self.directory, name), self._fds)
        try:
            self._fds.acquire(seg)             # it may be gone: retention
            self._fds.release(seg)
        except FileNotFoundError:
            raise SequenceGone(self.first_seq) from None
        if not seg.indexed:
            later = [b for b in list_segments(self.directory, self.files) if b[0] > base]
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
