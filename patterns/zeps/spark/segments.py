"""Journal segments to Arrow: the fast path of the batch and streaming readers.

Reads the journal's public on-disk format (see :mod:`zactors.actors.journal`)
in large ``pread`` chunks and turns each chunk into one
:class:`pyarrow.RecordBatch`.  With the journal's C codec
(``journal_codec.columns``) one C call per chunk checks every record and
fills the Arrow buffers; without it the numpy twin walks the records with
the codec's Python walker (``journal_codec.walk``, the same checks as C's:
one walker for the journal, its recovery, its reader and this), one Python
step per record, and gathers the columns in vectorised calls.  Format 1 and
2 segments both (a producer trailer is not part of the body).  Imports no gevent
or zmq; plain functions, safe in any thread.
"""
import bisect
import os
import struct

import numpy as np
import pyarrow as pa
from zactors.actors.journal_codec import columns as _c_columns, corruption as _corruption, walk as _walk
from zactors.actors.journal import HEADER_SIZE, INDEX_SUFFIX, SEGMENT_SUFFIX, JournalError, SequenceGone
from zactors.actors.journal.format import READ_VERSIONS, parse_index

__all__ = ["SCHEMA", "sparse_index", "segment_batches", "offset_of", "empty_batch"]

#: Arrow schema of the raw columns (the ``stream`` column is added by the reader)
SCHEMA = pa.schema([("seq", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
                    ("key", pa.binary()), ("body", pa.binary())])

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_PREFIX = struct.Struct("<II")
_unpack_prefix = _PREFIX.unpack_from
_IDX_ENTRY = np.dtype([("seq", "<u8"), ("ts", "<f8"), ("off", "<u8")])
CHUNK = 8 << 20                     # bytes per pread, and so roughly per record batch


def sparse_index(path):
    """(seqs, offsets) of a sealed segment's ``.idx`` file (public format, read by the journal's
    one index parser), or None when it is missing, stale or damaged (the caller then walks from
    the header)."""
    idx = path[:-len(SEGMENT_SUFFIX)] + INDEX_SUFFIX
    try:
        with open(idx, "rb") as f:
            data = f.read()
        size = os.stat(path).st_size
    except OSError:
        return None
    name = os.path.basename(path)
    parsed = parse_index(data, int(name[:20]) if name[:20].isdigit() else -1, size)
    if parsed is None:
        return None
    entries = np.frombuffer(parsed[3], _IDX_ENTRY)
    return entries["seq"].tolist(), entries["off"].tolist()


def offset_of(index, base, seq):
    """Byte offset at or before record ``seq``, and that record's sequence, from a sparse index."""
    if index is None:
        return HEADER_SIZE, base
    seqs, offs = index
    i = bisect.bisect_right(seqs, seq) - 1
    return (offs[i], seqs[i]) if i >= 0 else (HEADER_SIZE, base)


def empty_batch(schema=SCHEMA):
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def _gather(a, at, width, dtype):
    """Little-endian integers/floats of ``width`` bytes at byte offsets ``at`` of uint8 array ``a``."""
    return a[at[:, None] + np.arange(width)].view(dtype).ravel()


def _binary(a, skips, lengths, tails):
    """An Arrow binary array of the values laid out in ``a`` as runs of (skip, value, tail) bytes,
    one run per record, back to back: one ``np.repeat`` mask and one masked copy, no Python per row."""
    total = int(lengths.sum())
    offsets = np.zeros(len(lengths) + 1, np.int32 if total < (1 << 31) else np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if total == 0:
        data = b""
    else:
        runs = np.empty(3 * len(lengths), np.int64)
        runs[0::3], runs[1::3], runs[2::3] = skips, lengths, tails
        keep = np.repeat(np.tile(np.array([False, True, False]), len(lengths)), runs)
        data = a[keep]
    kind = pa.binary() if offsets.dtype == np.int32 else pa.large_binary()
    array = pa.Array.from_buffers(kind, len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return array if kind == pa.binary() else array.cast(pa.binary())


def _columns_numpy(buf, pos, path, seq, from_seq, to_seq):
    """(bytes used, records walked, batch or None) for the complete records of ``buf`` (read at
    file offset ``pos``, its first record due to be ``seq``): the numpy twin of the C codec's
    ``columns``, walking with the codec's walker and gathering the columns with numpy."""
    starts, stops, klens, blens = [], [], [], []
    at = scanned = 0
    first = None
    while True:
        status, stop, s, _ts, klen, blen, _pid, _pseq = _walk(buf, at)
        if status == 1:
            break
        if status == 2:
            raise JournalError("%s: corrupt record at offset %d (%s)" % (path, pos + at, _corruption(buf, at)))
        if s != seq + scanned:
            raise JournalError("%s: corrupt segment near offset %d (sequence %d where %d was due)"
                               % (path, pos + at, s, seq + scanned))
        if s > to_seq:
            break
        if s >= from_seq:
            if first is None:
                first = s
            starts.append(at)
            stops.append(stop)
            klens.append(klen)
            blens.append(blen)
        scanned += 1
        at = stop
    if not starts:
        return at, scanned, None
    count = len(starts)
    st = np.array(starts, np.int64)
    a = np.frombuffer(buf, np.uint8, stops[-1])
    seqs = np.arange(first, first + count, dtype=np.int64)
    ts = (_gather(a, st + 16, 8, "<f8") * 1e6).astype(np.int64)
    klen = np.array(klens, np.int64)
    blen = np.array(blens, np.int64)
    tail = np.array(stops, np.int64) - st - 32 - klen - blen       # a producer trailer, or 0
    region = a[starts[0]:stops[-1]]                 # the selected records, back to back
    return at, scanned, pa.RecordBatch.from_arrays([
        pa.array(seqs),
        pa.Array.from_buffers(_TIMESTAMP, count, [None, pa.py_buffer(ts)]),
        _binary(region, 28, klen, 4 + blen + tail),
        _binary(region, 32 + klen, blen, tail),
    ], schema=SCHEMA)


def _columns_c(buf, pos, path, seq, from_seq, to_seq):
    """:func:`_columns_numpy` in one C call (``journal_codec.columns``): no Python per record."""
    used, scanned, first, status, count, seqs, stamps, koffs, keys, boffs, bodies = _c_columns(buf, from_seq, to_seq)
    if scanned and first != seq or status == 3:      # the first record, or the one at `used`, out of turn
        at, due = (used, seq + scanned) if status == 3 else (0, seq)
        raise JournalError("%s: corrupt segment near offset %d (sequence %d where %d was due)"
                           % (path, pos + at, int.from_bytes(buf[at + 8:at + 16], "little"), due))
    if status == 2:
        raise JournalError("%s: corrupt record at offset %d (%s)" % (path, pos + used, _corruption(buf, used)))
    if not count:
        return used, scanned, None
    buffer = pa.py_buffer
    return used, scanned, pa.RecordBatch.from_arrays([
        pa.Array.from_buffers(pa.int64(), count, [None, buffer(seqs)]),
        pa.Array.from_buffers(_TIMESTAMP, count, [None, buffer(stamps)]),
        pa.Array.from_buffers(pa.binary(), count, [None, buffer(koffs), buffer(keys)]),
        pa.Array.from_buffers(pa.binary(), count, [None, buffer(boffs), buffer(bodies)]),
    ], schema=SCHEMA)


_chunk_columns = _columns_c if _c_columns is not None else _columns_numpy


def segment_batches(path, base, from_seq, to_seq, *, index=None, chunk=CHUNK):
    """Yield record batches (:data:`SCHEMA`) of records ``from_seq..to_seq`` of one segment.

    Stops early at the segment's end (the active segment: what is written so
    far).  Raises :class:`JournalError` naming the file and offset on a
    corrupt record, :class:`SequenceGone` if retention removed the file.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise SequenceGone(from_seq) from None
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, HEADER_SIZE, 0)
        if len(head) < HEADER_SIZE or head[:4] != b"ZJSG" or int.from_bytes(head[8:16], "little") != base:
            raise JournalError("%s: not a journal segment (bad header)" % path)
        if int.from_bytes(head[4:6], "little") not in READ_VERSIONS:
            raise JournalError("%s: unsupported journal format version %d" % (path, int.from_bytes(head[4:6], "little")))
        pos, seq = offset_of(index if index is not None else sparse_index(path), base, from_seq)
        while seq <= to_seq and pos < size:
            buf = os.pread(fd, min(chunk, size - pos), pos)
            used, scanned, batch = _chunk_columns(buf, pos, path, seq, from_seq, to_seq)
            if not scanned:
                if len(buf) >= 8:
                    need = 8 + _unpack_prefix(buf, 0)[0]
                    if need > len(buf) and pos + need <= size:
                        chunk = need                # one record bigger than the chunk: read it whole
                        continue
                return                              # torn tail of the active segment: not written yet
            pos += used
            seq += scanned
            if batch is not None:
                yield batch
    finally:
        os.close(fd)
