"""The journal's on-disk format: records, segment and index headers, file names, errors.

See the package docstring (:mod:`zactors.actors.journal`) for the layout.
Imports no gevent; everything here is pure and thread-safe.
"""
from __future__ import annotations

import errno as _errno
import os
import struct
from typing import NamedTuple

from .. import journal_codec as _codec
from .files import OS_FILES, Files

__all__ = [
    "Record", "JournalError", "JournalFull", "SequenceGone", "FORMAT_VERSION", "SEGMENT_MAGIC",
    "INDEX_MAGIC", "SEGMENT_SUFFIX", "INDEX_SUFFIX", "INDEX_INTERVAL", "HEADER_SIZE", "RECORD_OVERHEAD",
    "MAX_RECORD", "EPOCHS_NAME", "CLEAN_NAME", "segment_name", "segment_header", "list_segments",
    "os_error", "fresh_error",
]


class Record(NamedTuple):
    """One journal record: seq (int >= 1), timestamp (float seconds), key and body (bytes)."""

    seq: int
    timestamp: float
    key: bytes
    body: bytes


_codec.bind(Record)

FORMAT_VERSION = 1
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
