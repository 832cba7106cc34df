"""The journal's record codec: framing for append, batch decoding for reads; in C when built.

The record layout is the journal's file format (see :mod:`.journal`), all
little-endian::

    u32 length | u32 crc32c | u64 seq | f64 timestamp | u32 klen | key | u32 blen | body

The C extension ``zactors.actors._journal`` (built from ``actors/_journal.c``
at install when a compiler is there; optional) does each call's work in one C
call (CRC-32C with SSE4.2 when the CPU has it); the pure-Python twins here
behave identically and are used when it was not built, or when the
environment sets ``ZACTORS_PURE_PYTHON=1``.  Nothing here imports gevent or
zmq; every function is pure (thread-safe on distinct buffers).

* ``frame(buf, seq, timestamp, key, body)``: append one framed record to the
  bytearray ``buf`` (``seq`` an int, ``timestamp`` a float, ``key`` and
  ``body`` bytes) and return it as a ``Record``.
* ``decode(buf, at, out, from_seq, to_seq, max_out, budget, verify_at)``:
  decode the complete records of ``buf`` from offset ``at`` on, appending a
  ``Record`` to the list ``out`` for each one with ``from_seq <= seq``
  (earlier ones are skipped unchecked).  Stops when a record's ``seq`` is past
  ``to_seq``, when ``out`` holds ``max_out`` records, or before a record that
  would take the payload (key + body) bytes added past ``budget`` while
  ``out`` is not empty.  The CRC of every record ending past ``verify_at`` is
  checked, skipped ones included (a flipped sequence never hides a record).  Returns ``(at, total, status)``: the offset after the last record
  consumed, the payload bytes added, and ``status`` 0 (out of complete
  records: a partial one, or none, at ``at``), 1 (stopped) or 2 (the record
  at ``at`` is corrupt: bad length, CRC, or key/body lengths).  The one
  record walker: reads use it, and so does the journal's recovery scan
  (``decode`` with every sequence wanted, then sequence and time checks).
* ``crc(data, value=0)``: CRC-32C.
* ``columns``: the C extension's ``columns(buf, from_seq, to_seq)`` (records
  as Arrow column buffers, see ``actors/_journal.c``), or None without it:
  its twin, in numpy, is the Spark reader's (``patterns/zeps/spark/segments.py``).
"""
import struct

from crc32c import crc32c as _crc32c
from .purepython import optional_extension

__all__ = ["SPEEDUPS", "frame", "decode", "crc", "columns", "py_frame", "py_decode", "RECORD_HEAD", "MIN_LENGTH"]

_REC = struct.Struct("<IIQdI")      # length, crc, seq, timestamp, key_len
_PREFIX = struct.Struct("<II")
_HEAD = struct.Struct("<QdI")
_U32 = struct.Struct("<I")
RECORD_HEAD = _REC.size             # 28
MIN_LENGTH = _HEAD.size + _U32.size  # 24: length of a record with empty key and body
_MAX_LENGTH = MIN_LENGTH + (1 << 30)
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


def py_frame(buf, seq, timestamp, key, body):
    if type(buf) is not bytearray or type(key) is not bytes or type(body) is not bytes \
            or type(seq) is not int or type(timestamp) is not float:
        raise TypeError("frame() takes a bytearray, an int, a float, then bytes key and body")
    payload = _join((_pack_head(seq, timestamp, len(key)), key, _pack_u32(len(body)), body))
    buf += _pack_prefix(len(payload), _crc32c(payload))
    buf += payload
    return _tuple_new(_Record, (seq, timestamp, key, body))


def py_decode(buf, at, out, from_seq, to_seq, max_out, budget, verify_at):
    if type(buf) is not bytes:
        buf = bytes(buf)
    n = len(buf)
    mv = memoryview(buf)
    append = out.append
    new, record = _tuple_new, _Record
    total = 0
    if at < 0:
        at = 0
    while at + 28 <= n:
        length, crc, seq, ts, klen = _unpack_rec(buf, at)
        stop = at + 8 + length
        if length < 24 or length > _MAX_LENGTH:
            return at, total, 2
        if stop > n:
            break
        if stop > verify_at and _crc32c(mv[at + 8:stop]) != crc:  # before the sequence is believed
            return at, total, 2
        if seq >= from_seq:
            if seq > to_seq:
                return at, total, 1
            if klen > length - 24 or _unpack_u32(buf, at + 28 + klen)[0] != length - 24 - klen:
                return at, total, 2
            size = length - 24
            if total + size > budget and out:
                return at, total, 1
            k = at + 28
            append(new(record, (seq, ts, buf[k:k + klen], buf[k + klen + 4:stop])))
            total += size
            if len(out) >= max_out:
                return stop, total, 1
        at = stop
    return at, total, 0


_c = optional_extension(__package__ + "._journal", "pure-Python journal codec")
#: True when the C codec is in use
SPEEDUPS = _c is not None
if SPEEDUPS:
    frame, decode, crc, columns = _c.frame, _c.decode, _c.crc, _c.columns
else:
    frame, decode, crc, columns = py_frame, py_decode, py_crc, None
