"""Journal records to DELIVER frames, a batch per call: in C when built.

``frames(records, start, limit, credit, match) -> (frames, credit, next, short)``
turns ``records[start:]`` (journal ``Record`` tuples ``(seq, timestamp, key,
body)``, sequences ascending) into DELIVER frames (the ZEPS wire, see
:func:`.protocol.deliver`), stopping before the first record whose sequence is
past ``limit`` or whose frame costs more than the ``credit`` left (``short`` is
then True).  ``match`` chooses the records: None (all), a tuple of key
prefixes, or a callable taking the key.  Returns the frames, the credit left,
and the index of the first record not consumed (records the filter skipped
are consumed).

The C extension ``zactors.patterns.zeps._deliver`` (built from
``patterns/zeps/_deliver.c`` when a compiler is there; optional) does it in
one call; :func:`py_frames` is its pure-Python twin, used when it was not
built or when the environment sets ``ZACTORS_PURE_PYTHON=1``.  Pure
functions: thread-safe.
"""
import logging
import os
import struct

__all__ = ["SPEEDUPS", "frames", "py_frames", "matcher_of"]

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">2sBQB").pack   # signature, 7, sequence, key length
_u32 = struct.Struct(">I").pack
_SIG = b"\xaa\xa5"
_join = b"".join


def py_frames(records, start, limit, credit, match):
    out = []
    append = out.append
    prefixes = match if type(match) is tuple else None
    if match is not None and prefixes is None and not callable(match):
        raise TypeError("match must be None, a tuple of prefixes or a callable")
    i = max(start, 0)
    n = len(records)
    short = False
    while i < n:
        seq, _, key, body = records[i]
        if seq > limit:
            break
        if match is not None and not (key.startswith(prefixes) if prefixes is not None else match(key)):
            i += 1
            continue
        if len(key) > 255 or len(body) > 0xFFFFFFFF:
            raise ValueError("DELIVER key over 255 bytes or body over 4 GiB")
        size = 16 + len(key) + len(body)
        if credit < size:
            short = True
            break
        append(_join((_HEAD(_SIG, 7, seq, len(key)), key, _u32(len(body)), body)))
        credit -= size
        i += 1
    return out, credit, i, short


def matcher_of(flt):
    """The ``match`` argument for a :class:`~.matcher.Filter`: None when it matches every key."""
    if flt.regexes:
        return flt
    if b"" in flt.prefixes:
        return None
    return flt.prefixes


def _load():
    if os.environ.get("ZACTORS_PURE_PYTHON"):
        return None
    try:
        from . import _deliver as c
    except ImportError as exc:
        log.debug("zactors: pure-Python DELIVER batches (%s)", exc)
        return None
    return c


_c = _load()
#: True when the C version is in use
SPEEDUPS = _c is not None
frames = _c.frames if SPEEDUPS else py_frames
