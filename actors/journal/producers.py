"""Idempotent producers: the table of each producer's last sequence, and its snapshot files.

A record appended with ``producer=(pid, pseq)`` carries both in its trailer
(format 2).  The journal keeps {pid: (last pseq, journal seq)} for the most
recent ``max_producers`` producers (least recently appended evicted first), so
that an owner (the ZEPS broker) drops a resent message as a duplicate across
a restart too.  Recovery rebuilds the table from what is on disk: the snapshot
of the active segment (the table as of its first sequence, written when it was
created), then the producers of the active segment's surviving records.  A
record cut by recovery, or lost with a power loss, is never in it, so a
producer's resend of it is journaled again rather than dropped.

Snapshot file ``NNNNNNNNNNNNNNNNNNNN.pid`` (beside the segment of that base;
written durably when the segment is created, but derived data: a damaged or
missing one is rebuilt by walking the segments before it), all little-endian: magic ``ZJPR``, u16 version (1),
u16 flags (0), u64 base sequence, u32 count; then per producer, oldest
first: u8 id length, id, u64 producer sequence, u64 journal sequence; then a
u32 CRC-32C of everything before it.

Imports no gevent.  A :class:`ProducerTable` is not thread-safe: the journal
uses it under its lock.
"""
from __future__ import annotations

import struct
from collections import OrderedDict

from .. import journal_codec as _codec
from .format import MAX_PRODUCER, SEGMENT_SUFFIX

__all__ = ["ProducerTable", "PRODUCERS_SUFFIX", "check_producer", "snapshot_path", "snapshot_bytes", "load_snapshot"]

PRODUCERS_SUFFIX = ".pid"
_MAGIC = b"ZJPR"
_HEAD = struct.Struct("<4sHHQI")        # magic, version, flags, base, count
_ENTRY = struct.Struct("<QQ")           # producer sequence, journal sequence


def check_producer(producer):
    """(pid bytes, pseq int) from a user's ``producer=(pid, pseq)``; ValueError/TypeError if bad."""
    try:
        pid, pseq = producer
    except (TypeError, ValueError):
        raise TypeError("journal producer must be (id bytes, sequence int), got %r" % (producer,)) from None
    if type(pid) is not bytes:
        try:
            pid = bytes(memoryview(pid))
        except TypeError:
            raise TypeError("journal producer id must be bytes-like, not %s" % type(pid).__name__) from None
    if len(pid) > MAX_PRODUCER:
        raise ValueError("journal producer id of %d bytes (at most %d)" % (len(pid), MAX_PRODUCER))
    if type(pseq) is not int or not 0 <= pseq < 1 << 64:
        raise ValueError("journal producer sequence must be an int in [0, 2**64), got %r" % (pseq,))
    return pid, pseq


class ProducerTable:
    """{pid: (last pseq, journal seq)}, at most ``cap`` producers, least recently put evicted first."""

    __slots__ = ("cap", "evicted", "_map")

    def __init__(self, cap):
        if cap < 0:
            raise ValueError("max_producers must be >= 0, got %r" % (cap,))
        self.cap = cap
        self.evicted = 0
        self._map = OrderedDict()

    def __len__(self):
        return len(self._map)

    def put(self, pid, pseq, seq):
        table = self._map
        table[pid] = (pseq, seq)
        table.move_to_end(pid)
        if len(table) > self.cap:
            table.popitem(last=False)
            self.evicted += 1

    def get(self, pid):
        """(last pseq, seq) of ``pid``, or None (never put, or evicted)."""
        return self._map.get(pid)

    def items(self):
        """[(pid, (pseq, seq))], oldest first (a copy)."""
        return list(self._map.items())

    def as_dict(self):
        return dict(self._map)

    def load(self, items):
        for pid, (pseq, seq) in items:
            self.put(pid, pseq, seq)


def snapshot_path(segment_path):
    return segment_path[:-len(SEGMENT_SUFFIX)] + PRODUCERS_SUFFIX


def snapshot_bytes(base, items):
    """The snapshot file's content for the table ``items`` as of sequence ``base``."""
    parts = [_HEAD.pack(_MAGIC, 1, 0, base, len(items))]
    pack = _ENTRY.pack
    for pid, (pseq, seq) in items:
        parts.append(bytes((len(pid),)) + pid + pack(pseq, seq))
    data = b"".join(parts)
    return data + _codec.crc(data).to_bytes(4, "little")


def load_snapshot(path, base):
    """[(pid, (pseq, seq))] from the snapshot file of the segment ``base``; None when it is
    missing, damaged, or claims a sequence at or past ``base``."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < _HEAD.size + 4 or _codec.crc(memoryview(data)[:-4]) != int.from_bytes(data[-4:], "little"):
        return None
    magic, version, _flags, sbase, count = _HEAD.unpack_from(data)
    if magic != _MAGIC or version != 1 or sbase != base:
        return None
    items = []
    at, end = _HEAD.size, len(data) - 4
    try:
        for _ in range(count):
            plen = data[at]
            pid = data[at + 1:at + 1 + plen]
            pseq, seq = _ENTRY.unpack_from(data, at + 1 + plen)
            at += 1 + plen + _ENTRY.size
            if at > end or not 1 <= seq < base:
                return None
            items.append((pid, (pseq, seq)))
    except (IndexError, struct.error):
        return None
    return items if at == end else None
