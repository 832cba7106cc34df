"""The journal's on-disk format: records, segment and index headers, file names, errors.

See the package docstring (:mod:`zactors.actors.journal`) for the layout.
Imports no gevent; everything here is pure and thread-safe.
"""
from __future__ import annotations

import errno as _errno
import os
import struct
from collections import namedtuple

from .. import journal_codec as _codec
from .files import OS_FILES, Files

__all__ = [
    "Record", "JournalError", "JournalFull", "SequenceGone", "FORMAT_VERSION", "SEGMENT_MAGIC",
    "INDEX_MAGIC", "SEGMENT_SUFFIX", "INDEX_SUFFIX", "INDEX_INTERVAL", "HEADER_SIZE", "RECORD_OVERHEAD",
    "MAX_RECORD", "EPOCHS_NAME", "CLEAN_NAME", "segment_name", "segment_header", "list_segments",
    "os_error", "fresh_error", "READ_VERSIONS", "MAX_PRODUCER", "parse_index", "INDEX_HEADER", "INDEX_ENTRY",
]


class Record(namedtuple("Record", "seq timestamp key body")):
    """One journal record: seq (int >= 1), timestamp (float seconds), key and body (bytes);
    ``producer`` (bytes, or None) and ``pseq`` (int, 0 without a producer) of an idempotent
    producer.

    A Record is a 4-tuple (seq, timestamp, key, body) unless it was read with its producer
    asked for (``JournalReader.records(producers=True)``, recovery): then it is a 6-tuple
    ending with (producer, pseq).  Code that unpacks four items keeps working.
    """

    __slots__ = ()

    def __new__(cls, seq: int, timestamp: float, key: bytes, body: bytes, producer: bytes | None = None,
                pseq: int = 0) -> Record:
        if producer is None:
            return tuple.__new__(cls, (seq, timestamp, key, body))
        return tuple.__new__(cls, (seq, timestamp, key, body, producer, pseq))

    @property
    def producer(self) -> bytes | None:
        return self[4] if len(self) > 4 else None  # a 6-item Record

    @property
    def pseq(self) -> int:
        return self[5] if len(self) > 4 else 0

    def __repr__(self) -> str:
        extra = ", producer=%r, pseq=%r" % (self[4], self[5]) if len(self) > 4 else ""
        return "Record(seq=%r, timestamp=%r, key=%r, body=%r%s)" % (self[:4] + (extra,))

    def __getnewargs__(self) -> tuple[object, ...]:
        return tuple(self)


_codec.bind(Record)

FORMAT_VERSION = 2                  # of new segments; version 1 segments stay readable
READ_VERSIONS = (1, 2)
MAX_PRODUCER = _codec.MAX_PRODUCER  # bytes of a producer id
SEGMENT_MAGIC = b"ZJSG"
INDEX_MAGIC = b"ZJIX"
SEGMENT_SUFFIX = ".seg"
INDEX_SUFFIX = ".idx"
INDEX_INTERVAL = 4096               # bytes of segment between sparse index entries
EPOCHS_NAME = "EPOCHS"              # the epoch history
CLEAN_NAME = "CLEAN"                # the clean-close marker

SEGMENT_HEADER = struct.Struct("<4sHHQ")        # magic, version, flags, base sequence
HEADER_SIZE = SEGMENT_HEADER.size
RECORD_OVERHEAD = _codec.RECORD_HEAD + 4        # 32 bytes of framing per record
MAX_RECORD = 1 << 30                # key + body bound: a bad length never makes us allocate GiBs
_NO_SPACE = (_errno.ENOSPC, _errno.EDQUOT)


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


INDEX_HEADER = struct.Struct("<4sHHQQdQI")  # magic, version, flags, base, last seq, last ts, size, count
INDEX_ENTRY = struct.Struct("<QdQ")          # seq, timestamp, offset


def parse_index(data: bytes, base: int, size: int) -> tuple[int, float, int, memoryview] | None:
    """The one sparse-index parser: ``(last_seq, last_ts, end, entries)`` of the ``.idx`` bytes
    ``data`` of the segment ``base`` whose file is ``size`` bytes (``entries`` a memoryview of
    ``count`` packed :data:`INDEX_ENTRY`), or None when it is damaged or stale (the caller
    then walks the segment from its header)."""
    if len(data) < INDEX_HEADER.size + 4 or _codec.crc(memoryview(data)[:-4]) != int.from_bytes(data[-4:], "little"):
        return None
    magic, version, _flags, ibase, last_seq, last_ts, end, count = INDEX_HEADER.unpack_from(data)
    if magic != INDEX_MAGIC or version not in READ_VERSIONS or ibase != base or end != size \
            or len(data) != INDEX_HEADER.size + count * INDEX_ENTRY.size + 4:
        return None
    return last_seq, last_ts, end, memoryview(data)[INDEX_HEADER.size:-4]


def segment_name(base_seq: int) -> str:
    """The file name of the segment whose first sequence is ``base_seq``."""
    return "%020d%s" % (base_seq, SEGMENT_SUFFIX)


def segment_header(base_seq: int) -> bytes:
    """The 16-byte header of the segment whose first sequence is ``base_seq``."""
    return SEGMENT_HEADER.pack(SEGMENT_MAGIC, FORMAT_VERSION, 0, base_seq)


def list_segments(directory: str, files: Files = OS_FILES) -> list[tuple[int, str]]:
    """Sorted [(base_seq, path)] of the segment files in ``directory``."""
    found = []
    for name in files.listdir(directory):
        if name.endswith(SEGMENT_SUFFIX) and len(name) == 20 + len(SEGMENT_SUFFIX) \
                and name[:20].isascii() and name[:20].isdigit():
            found.append((int(name[:20]), os.path.join(directory, name)))
    found.sort()
    return found


def os_error(action: str, path: str, exc: OSError, cls: type[JournalError] | None = None) -> JournalError:
    """A JournalError (JournalFull for no space) naming the errno of ``exc``."""
    code = exc.errno
    name = _errno.errorcode.get(code, str(code)) if code is not None else "?"
    if cls is None:
        cls = JournalFull if code in _NO_SPACE else JournalError
    return cls("journal %s %s failed: %s (%s)" % (action, path, name, exc.strerror), code)


def fresh_error(error: JournalError) -> JournalError:
    """A new exception like ``error``: re-raising one stored exception grows its traceback."""
    return type(error)(str(error), error.errno)
