"""DELIVER frames in batches, both ways: journal records to frames (broker), frames to messages (subscriber); in C when built.

``frames(records, start, limit, credit, match) -> (frames, credit, next, short)``
turns ``records[start:]`` (journal ``Record`` tuples ``(seq, timestamp, key,
body)``, sequences ascending) into DELIVER frames (the ZEPS wire, see
:func:`.protocol.deliver`), stopping before the first record whose sequence is
past ``limit`` or whose frame costs more than the ``credit`` left (``short`` is
then True).  ``match`` chooses the records: None (all), a tuple of key
prefixes, or a callable taking the key.  Returns the frames, the credit left,
and the index of the first record not consumed (records the filter skipped
are consumed).

``parse(frames, start, last) -> (messages, last, size, next, duplicates)``
turns the DELIVER frames of the list ``frames`` from index ``start`` on into
``Message`` tuples ``(seq, key, body)``, stopping at the first frame that is
not a well-formed DELIVER (its index is ``next``; ``len(frames)`` when all
were).  A DELIVER whose sequence is not above ``last`` (the previous one;
negative: none yet) is dropped and counted in ``duplicates``.  Returns the
messages, the new ``last``, and the bytes of the frames taken (their credit).

The C extension ``zactors.patterns.zeps._deliver`` (built from
``patterns/zeps/_deliver.c`` when a compiler is there; optional) does it in
one call; :func:`py_frames` is its pure-Python twin, used when it was not
built or when the environment sets ``ZACTORS_PURE_PYTHON=1``.  Pure
functions: thread-safe.
"""
import struct

from zactors.actors.purepython import optional_extension

__all__ = ["SPEEDUPS", "frames", "parse", "bind", "py_frames", "py_parse", "matcher_of"]

_HEAD = struct.Struct(">2sBQB").pack   # signature, 7, sequence, key length
_u32 = struct.Struct(">I").pack
_SIG = b"\xaa\xa5"
_join = b"".join
_unpack_u32 = struct.Struct(">I").unpack_from
_unpack_u64 = struct.Struct(">Q").unpack_from
_tuple_new = tuple.__new__
_Message = None                        # client.Message, set by bind()


def bind(message_type):
    """Set the namedtuple type ``parse`` makes (the client's ``Message``)."""
    global _Message
    _Message = message_type
    if _c is not None:
        _c.bind(message_type)


def py_parse(frames, start, last):
    out = []
    append = out.append
    new, message = _tuple_new, _Message
    size = dups = 0
    i = max(start, 0)
    n = len(frames)
    while i < n:
        frame = frames[i]
        if type(frame) is not bytes:
            break
        length = len(frame)
        if length < 16 or frame[2] != 7 or frame[0] != 0xAA or frame[1] != 0xA5:
            break
        end = 12 + frame[11]
        if length < end + 4 or _unpack_u32(frame, end)[0] != length - end - 4:
            break
        seq = _unpack_u64(frame, 3)[0]
        i += 1
        if seq <= last:
            dups += 1
            continue
        append(new(message, (seq, frame[12:end], frame[end + 4:])))
        last = seq
        size += length
    return out, last, size, i, dups


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


_c = optional_extension(__package__ + "._deliver", "pure-Python DELIVER batches")
#: True when the C version is in use
SPEEDUPS = _c is not None
frames, parse = (_c.frames, _c.parse) if SPEEDUPS else (py_frames, py_parse)
