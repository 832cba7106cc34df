"""The journal's record codec: framing for append, the one record walker, batch decoding; in C when built.

The record layout is the journal's file format (see :mod:`.journal`), all
little-endian::

    u32 length | u32 crc32c | u64 seq | f64 timestamp | u32 klen_flags | key | u32 blen | body
    [| producer id | u64 producer seq | u8 producer id length]    (format 2, when flagged)

``klen_flags`` holds the key length in bits 0-30; bit 31 (``FLAG_PRODUCER``,
format 2 only) says the record ends with the producer trailer.  A record
without one is the same bytes in both formats.

The C extension ``zactors.actors._journal`` (built from ``actors/_journal.c``
at install when a compiler is there; optional) does each call's work in one C
call (CRC-32C with SSE4.2 when the CPU has it); the pure-Python twins here
behave identically and are used when it was not built, or when the
environment sets ``ZACTORS_PURE_PYTHON=1``.  Nothing here imports gevent or
zmq; every function is pure (thread-safe on distinct buffers).

* ``walk(buf, at, verify_at)`` (Python; C has its own ``walk``, the same
  checks): the one record walker.  Checks the record at ``at`` and returns
  ``(status, stop, seq, timestamp, klen, blen, producer, pseq)``: status 0
  valid, 1 incomplete (it runs past the end of ``buf``), 2 corrupt (bad
  length, CRC, or key/body/producer lengths).  The CRC is checked (when the
  record ends past ``verify_at``) before any field is believed.  ``decode``,
  ``columns`` and the numpy twin of ``columns`` (Spark) all walk with it.
* ``frame(buf, seq, timestamp, key, body[, producer, pseq])``: append one
  framed record to the bytearray ``buf`` (``seq`` an int, ``timestamp`` a
  float, ``key`` and ``body`` bytes; ``producer`` bytes of at most 255 and
  ``pseq`` a u64 add the producer trailer) and return it as a 4-item
  ``Record`` (the tail cache's).
* ``decode(buf, at, out, from_seq, to_seq, max_out, budget, verify_at[, producers])``:
  decode the complete records of ``buf`` from offset ``at`` on, appending a
  ``Record`` to the list ``out`` for each one with ``from_seq <= seq``
  (earlier ones are walked and checked, not decoded).  Stops when a record's
  ``seq`` is past ``to_seq``, when ``out`` holds ``max_out`` records, or
  before a record that would take the payload (key + body) bytes added past
  ``budget`` while ``out`` is not empty.  Returns ``(at, total, status)``:
  the offset after the last record consumed, the payload bytes added, and
  ``status`` 0 (out of complete records: a partial one, or none, at ``at``),
  1 (stopped) or 2 (the record at ``at`` is corrupt).  With ``producers``
  true a record that carries a producer becomes a 6-item ``Record`` (its
  ``producer`` and ``pseq`` set); otherwise every Record has 4 items.
* ``crc(data, value=0)``: CRC-32C.
* ``Appender``: the base class of the journal writer: its per-record state
  and, in C, its common append in one call (see :class:`PyAppender`, the twin).
* ``columns``: the C extension's ``columns(buf, from_seq, to_seq)`` (records
  as Arrow column buffers, see ``actors/_journal.c``), or None without it:
  its twin, in numpy over ``walk``, is the Spark reader's
  (``patterns/zeps/spark/segments.py``).
"""
import struct
import threading

from crc32c import crc32c as _crc32c
from .purepython import optional_extension

__all__ = ["SPEEDUPS", "frame", "decode", "crc", "columns", "walk", "py_frame", "py_decode", "RECORD_HEAD",
           "MIN_LENGTH", "FLAG_PRODUCER", "MAX_PRODUCER", "corruption", "Appender", "PyAppender"]

_REC = struct.Struct("<IIQdI")      # length, crc, seq, timestamp, key_len
_PREFIX = struct.Struct("<II")
_HEAD = struct.Struct("<QdI")
_U32 = struct.Struct("<I")
RECORD_HEAD = _REC.size             # 28
MIN_LENGTH = _HEAD.size + _U32.size  # 24: length of a record with empty key and body
FLAG_PRODUCER = 1 << 31             # in klen_flags: the record ends with the producer trailer
MAX_PRODUCER = 255                  # bytes of a producer id
_KLEN_MASK = FLAG_PRODUCER - 1
_MAX_LENGTH = MIN_LENGTH + (1 << 30) + 9 + MAX_PRODUCER
_U64 = struct.Struct("<Q")
_pack_u64 = _U64.pack
_unpack_u64 = _U64.unpack_from
_pack_prefix = _PREFIX.pack
_pack_head = _HEAD.pack
_pack_u32 = _U32.pack
_unpack_u32 = _U32.unpack_from
_unpack_rec = _REC.unpack_from
_join = b"".join
_tuple_new = tuple.__new__

_Record = None                      # journal.Record, set by bind()


def bind(record_type):
    """Set the namedtuple type ``decode`` makes (the journal's ``Record``)."""
    global _Record
    _Record = record_type
    if _c is not None:
        _c.bind(record_type)


def py_crc(data, value=0):
    return _crc32c(data, value)


def walk(buf, at, verify_at=0):
    """The one record walker (see the module docstring): ``(status, stop, seq, timestamp, klen, blen,
    producer, pseq)`` for the record at ``at`` of the bytes ``buf``."""
    n = len(buf)
    if at + 28 > n:
        return _INCOMPLETE
    length, crc, seq, ts, kf = _unpack_rec(buf, at)
    if length < 24 or length > _MAX_LENGTH:
        return _CORRUPT
    stop = at + 8 + length
    if stop > n:
        return _INCOMPLETE
    if stop > verify_at and _crc32c(memoryview(buf)[at + 8:stop]) != crc:  # before the fields are believed
        return _CORRUPT
    room = length - 24
    producer = None
    pseq = tail = 0
    if kf & FLAG_PRODUCER:
        if room < 9:
            return _CORRUPT
        tail = 9 + buf[stop - 1]
        if tail > room:
            return _CORRUPT
        producer = buf[stop - tail:stop - 9]
        pseq = _unpack_u64(buf, stop - 9)[0]
    klen = kf & _KLEN_MASK
    if klen > room - tail or _unpack_u32(buf, at + 28 + klen)[0] != room - tail - klen:
        return _CORRUPT
    return 0, stop, seq, ts, klen, room - tail - klen, producer, pseq


def corruption(buf, at):
    """Why :func:`walk` refused the record at ``at`` of ``buf`` (for an error message)."""
    length, crc = _PREFIX.unpack_from(buf, at)
    if not 24 <= length <= _MAX_LENGTH:
        return "bad record length %d" % length
    if _crc32c(memoryview(buf)[at + 8:at + 8 + length]) != crc:
        return "bad CRC"
    return "bad key/body/producer lengths"


_INCOMPLETE = (1, 0, 0, 0.0, 0, 0, None, 0)
_CORRUPT = (2, 0, 0, 0.0, 0, 0, None, 0)


def py_frame(buf, seq, timestamp, key, body, producer=None, pseq=0):
    if type(buf) is not bytearray or type(key) is not bytes or type(body) is not bytes \
            or type(seq) is not int or type(timestamp) is not float \
            or producer is not None and (type(producer) is not bytes or type(pseq) is not int):
        raise TypeError("frame() takes a bytearray, an int, a float, then bytes key and body"
                        " (and bytes producer, int pseq)")
    if len(key) + len(body) > (1 << 30):
        raise ValueError("journal record too large")
    if producer is None:
        payload = _join((_pack_head(seq, timestamp, len(key)), key, _pack_u32(len(body)), body))
    else:
        if len(producer) > MAX_PRODUCER:
            raise ValueError("journal producer id longer than 255 bytes")
        payload = _join((_pack_head(seq, timestamp, len(key) | FLAG_PRODUCER), key, _pack_u32(len(body)), body,
                         producer, _pack_u64(pseq), bytes((len(producer),))))
    buf += _pack_prefix(len(payload), _crc32c(payload))
    buf += payload
    return _tuple_new(_Record, (seq, timestamp, key, body))


def py_decode(buf, at, out, from_seq, to_seq, max_out, budget, verify_at, producers=False):
    if type(buf) is not bytes:
        buf = bytes(buf)
    append = out.append
    new, record = _tuple_new, _Record
    total = 0
    if at < 0:
        at = 0
    while True:
        status, stop, seq, ts, klen, blen, producer, pseq = walk(buf, at, verify_at)
        if status:
            return at, total, 0 if status == 1 else 2
        if seq >= from_seq:
            if seq > to_seq:
                return at, total, 1
            size = klen + blen
            if total + size > budget and out:
                return at, total, 1
            k = at + 28
            if producers and producer is not None:
                append(new(record, (seq, ts, buf[k:k + klen], buf[k + klen + 4:k + klen + 4 + blen], producer, pseq)))
            else:
                append(new(record, (seq, ts, buf[k:k + klen], buf[k + klen + 4:k + klen + 4 + blen])))
            total += size
            if len(out) >= max_out:
                return stop, total, 1
        at = stop


class PyAppender:
    """The pure-Python twin of the C ``Appender``: the journal writer's per-record state, as slots.

    The writer (:class:`~zactors.actors.journal.Journal`) derives from one of
    the two.  The C one also has ``append_record``, which does the common
    append (bytes, no producer, room in the segment and the buffer) in one
    call, under the writer's ``_lock``, and hands everything else to the
    writer's ``_append_record``; with this twin, ``_append_record`` is
    ``append_record``.
    """

    __slots__ = ("_next_seq", "_last_ts", "_tail_end", "_pending", "_pending_bytes", "segment_bytes", "buffer_bytes",
                 "_index_at", "_cache", "_cache_bytes", "_evict_at", "_refuse", "_lock")

    def __init__(self):
        self._lock = threading.Lock()   # the C one has its own Lock, which it takes without a Python call


_c = optional_extension(__package__ + "._journal", "pure-Python journal codec")
#: True when the C codec is in use
SPEEDUPS = _c is not None
if SPEEDUPS:
    frame, decode, crc, columns, Appender = _c.frame, _c.decode, _c.crc, _c.columns, _c.Appender
    #: (index interval, cache bytes per record) the C Appender was built with (the writer checks them)
    APPENDER_CONSTANTS = (_c.INDEX_INTERVAL, _c.MEM_OVERHEAD)
else:
    frame, decode, crc, columns, Appender = py_frame, py_decode, py_crc, None, PyAppender
    APPENDER_CONSTANTS = None
