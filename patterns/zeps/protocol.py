"""ZEPS codec: every command of the ZEPS ABNF, one command per ZeroMQ frame.

Each command is ``AA A5`` (the signature), a one-byte command id, then its
fields: ``string`` = 1-byte length + bytes, ``chunk`` = 4-byte length +
bytes, numbers unsigned big-endian.  :func:`decode` turns one frame into a
typed message (a namedtuple below) or raises :class:`ProtocolError` (and
nothing else) with a reason a person can read; the encoders return one
``bytes`` frame.  Pure functions: no sockets, safe everywhere.

Where the spec is silent, zactors decides (the README says the same):

* **latest** (SUBSCRIBE) is the last sequence the client already has: the
  broker delivers from ``latest + 1``.  ``0`` replays the whole retained
  journal (sequences start at 1).  :data:`NEW` (``2**64 - 1``) means "only
  messages published after this SUBSCRIBE".  A ``latest + 1`` that retention
  already removed starts at the first retained message: the client sees the
  jump in the sequence numbers.
* **credit**: one DELIVER costs its encoded frame size in bytes,
  ``deliver_cost(key, body) = 16 + len(key) + len(body)``.  The broker sends a
  message once the credit covers its whole cost, so a client's window must be
  at least the largest message (the broker bounds messages).
* **several SUBSCRIBEs on one peering** add patterns to one subscription: a
  message matching any of them is delivered once.  The first SUBSCRIBE sets
  the start point; later ones take effect from the peering's current
  position (their ``latest`` is ignored).  Use one peering per start point.
* **PING** may come from either side; the receiver answers PING-OK.  The
  broker answers a client's PING only once every PUBLISH received before it
  on that peering is written to the journal (``Publisher.flush`` uses that);
  when the journal cannot write (disk full), it answers INVALID with a
  reason starting ``PING:`` instead, and writes later once it can.
* **DETACH**: a client's DETACH is answered with DETACH-OK and ends the
  peering; the broker sends DETACH when it drops a peering (shutdown, a
  silent peer) and expects no answer (a DETACH-OK from the client is
  ignored).
* **strings**: ``protocol``, ``stream`` and ``reason`` are printable ASCII
  (``stream`` also non-empty); ``key`` and ``pattern`` may hold any bytes
  (UTF-8 routing keys work).

zactors extension, never seen by a spec-only client: **SUBSCRIBE-SINCE**
(command id 13) = ``signature %d13 pattern since``, ``since`` a number-8 of
microseconds since the Unix epoch: replay from the first message journaled
at or after that time (Redis ``XRANGE`` by time, JetStream
``by_start_time``), then live.  Only zactors clients send it, and only when
asked for a time; a broker that does not know it answers INVALID.

zactors extension for tools: **QUERY** (id 14, no fields) asks the broker
for its introspection, answered by **QUERY-OK** (id 15) = ``signature %d15
report``, ``report`` a chunk of JSON (streams, subscribers, counters).  A
peering needs no ATTACH to QUERY.

zactors extensions a client asks for: **FEATURES** (id 18, C: after ATTACH)
= ``signature %d18 features``, ``features`` a string of space-separated
names; the broker answers nothing, ignores names it does not know (and a
FEATURES before ATTACH), and from then on may send that peering the
extension commands the names ask for.  A spec-only client never sends it, so
it never sees them.  Names: ``gaps`` asks for **GAP** (id 19, S) =
``signature %d19 first last`` (two number-8): sequences ``first..last`` will
never be delivered to this peering, retention removed them before it read
them; delivery goes on at ``last + 1``.  ``epochs`` asks for **EPOCH**
(id 21, S, the answer to that FEATURES) = ``signature %d21 epoch seq`` (two
number-8): ``epoch`` is the stream journal's current epoch (it changes only
when the journal lost or may have lost messages: an unclean shutdown, a
cut), ``seq`` the first sequence of that epoch.  The client keeps the epoch
beside the last sequence it holds; when it resumes, it sends **EPOCH** (id
21, C, after that FEATURES, before its first SUBSCRIBE) = ``signature %d21
epoch seq``: it holds messages up to sequence ``seq`` (its SUBSCRIBE's
``latest``), and knew the stream in ``epoch``.  If the journal lost that
position since (``Journal.check_resume``: whatever broker runs and epochs
came between, and even when new messages have since taken the stream past
``seq``), the SUBSCRIBE is answered with the ROLLBACK below, naming the last
sequence of ``epoch`` that survived.  An EPOCH before ATTACH is answered
INVALID (and DETACH).

zactors extension for idempotent publishing: **PUBLISH-ID** (id 20, C) =
``signature %d20 producer sequence key body`` (producer and sequence
number-8, then PUBLISH's fields): ``producer`` is a random id the publisher
chose, ``sequence`` counts its messages from 1.  The broker journals it like
a PUBLISH unless it has already journaled that producer's ``sequence`` (or
a later one) on the stream: then it drops it as a duplicate (a publisher
resends what was not confirmed after a lost peering or a broker restart).
The table (``max_producers`` per stream, least recently used evicted) is
kept in the stream's journal with each message, so it survives a broker
restart: what the journal kept is dropped, what it lost is journaled anew.

zactors extension, the **JOURNALED field**: when the broker refuses a
message of a peering that publishes with PUBLISH-ID because its journal
refuses appends (disk full, quota, an I/O error), or answers its PING with
INVALID ``PING:`` for that reason, the reason starts (after ``PING: ``) with
``[journaled=N] `` or ``[journaled=N held=H] ``: ``N`` is that producer's
last sequence at the broker's acknowledgement level (its messages up to
``N`` are kept, ``written`` or ``synced``), ``H`` the last one appended but
not yet there (held in the broker's memory: written if the journal can
write again before the broker stops; those after ``H`` were refused).  So
that what a producer has journaled on a peering is always its first
messages, once the journal refused one (sequence ``F``) the broker refuses
the producer's later ones on that peering too (counted, without an INVALID
each) and answers its PINGs with INVALID ``PING:`` and the field, until it
sends ``F`` or an earlier one again (it resends what is not confirmed, in
order: those already held are dropped as duplicates).  A client that sends PUBLISH-ID reads the field
(``Publisher.journaled``); a spec-only client never sends PUBLISH-ID, so
it never sees the field or the refusals after ``F``.

Errors every client gets, as INVALID with a reason prefix (like ``PING:``):

* ``REPLAY:`` the journal cannot give a replaying subscriber a message
  (a corrupt record): ``REPLAY: stream NAME: sequence N cannot be read:
  ...``.  Nothing more is delivered to that peering from there: the
  broker does not skip data.
* ``ROLLBACK:`` answers a SUBSCRIBE whose ``latest`` (not :data:`NEW`) is
  past the stream's last sequence: ``ROLLBACK: stream NAME ends at sequence
  L, before the N you resume after: ...``, or whose position the client's
  EPOCH says was lost: ``ROLLBACK: stream NAME: epoch E ends at sequence L,
  before the N you resume after: ...``.  The journal lost messages (a
  power loss in ``written`` mode, a cut corrupt tail): sequences above L
  will be given to new messages, so resuming there would silently drop them
  as duplicates.  The subscription is refused; subscribe again from L or
  earlier, knowing that L+1..N held other messages.

zactors extension for readers: **ATTACH-EXISTING** (id 22, C) = ATTACH's
fields; the broker attaches as for ATTACH, but only to a stream that exists
(open, or its journal on disk): else it answers INVALID ``NO-STREAM: stream
NAME does not exist`` and creates nothing.  Subscribers and the Spark
reader use it, so that reading never creates a stream.  It decodes as an
``Attach`` whose ``existing`` is True.

zactors extension for the credit budget: **PROBE** (id 24, S) = ``signature
%d24 token`` and **PROBE-OK** (id 25, C) = ``signature %d25 token`` (``token``
a number-8), for a peering that sent FEATURES ``tokens``.  The broker's PING
to such a peering (it PINGs a subscriber to learn what it drained, and to
see it alive) is a PROBE carrying a random token, and the client answers
PROBE-OK with that token; a bare PING-OK from it releases nothing.  The
token is only seen by reading everything sent before it on the one ordered
connection, so a subscriber that does not read cannot say it drained (a bare
PING-OK carries nothing that ties it to its PING: anyone can send one).  The
broker answers nothing to a PROBE-OK whose token is not the one of its
oldest PROBE unanswered (counted ``probes_forged``).

zactors datagrams for the real-time multicast output (UDP, see
:mod:`.multicast`), never on a ZEPS peering: **MC-DELIVER** (id 16) =
``signature %d16 stream sequence key body`` and **MC-HEAD** (id 17) =
``signature %d17 stream sequence``, the stream's last sequence, sent every
heartbeat so that a receiver notices a lost tail.
"""
import struct
from collections import namedtuple

from zactors.actors.purepython import optional_extension

_deliver_c = optional_extension(__package__ + "._deliver", "pure-Python PUBLISH parse")  # its parse_publish

__all__ = [
    "SIGNATURE", "VERSION", "PROTOCOL", "NEW", "MAX_STRING", "MAX_CHUNK",
    "ATTACH", "ATTACH_OK", "SUBSCRIBE", "SUBSCRIBE_OK", "CREDIT", "PUBLISH", "DELIVER",
    "PING", "PING_OK", "DETACH", "DETACH_OK", "INVALID", "SUBSCRIBE_SINCE", "QUERY", "QUERY_OK",
    "MC_DELIVER", "MC_HEAD", "FEATURES", "GAP", "PUBLISH_ID", "EPOCH", "ATTACH_EXISTING", "PROBE", "PROBE_OK",
    "NAMES",
    "Attach", "AttachOk", "Subscribe", "SubscribeOk", "Credit", "Publish", "Deliver",
    "Ping", "PingOk", "Detach", "DetachOk", "Invalid", "SubscribeSince", "Query", "QueryOk", "McDeliver",
    "McHead", "Features", "Gap", "PublishId", "Epoch", "Probe", "ProbeOk",
    "ProtocolError", "decode", "parse_publish", "encode", "deliver_cost",
    "attach", "subscribe", "subscribe_since", "credit", "publish", "deliver", "invalid", "query_ok", "mc_deliver",
    "mc_head", "stream_field", "features", "gap", "publish_id", "epoch", "probe", "probe_ok",
    "ATTACH_OK_FRAME", "SUBSCRIBE_OK_FRAME", "PING_FRAME", "PING_OK_FRAME", "DETACH_FRAME",
    "DETACH_OK_FRAME", "QUERY_FRAME",
]

SIGNATURE = b"\xaa\xa5"
PROTOCOL = b"ZEPS"
VERSION = 1
#: ``latest`` meaning "only messages published from now on"
NEW = 2 ** 64 - 1
MAX_STRING = 255
MAX_CHUNK = 2 ** 32 - 1

# Command ids (the ABNF's %dN), and SUBSCRIBE-SINCE, the zactors extension.
ATTACH, ATTACH_OK, SUBSCRIBE, SUBSCRIBE_OK, CREDIT, PUBLISH, DELIVER = 1, 2, 3, 4, 5, 6, 7
PING, PING_OK, DETACH, DETACH_OK, INVALID, SUBSCRIBE_SINCE, QUERY, QUERY_OK = 8, 9, 10, 11, 12, 13, 14, 15
MC_DELIVER, MC_HEAD = 16, 17
FEATURES, GAP, PUBLISH_ID, EPOCH = 18, 19, 20, 21
ATTACH_EXISTING = 22
PROBE, PROBE_OK = 24, 25  # (23: unused; tests use it as an unknown id)

NAMES = {ATTACH: "ATTACH", ATTACH_OK: "ATTACH-OK", SUBSCRIBE: "SUBSCRIBE", SUBSCRIBE_OK: "SUBSCRIBE-OK",
         CREDIT: "CREDIT", PUBLISH: "PUBLISH", DELIVER: "DELIVER", PING: "PING", PING_OK: "PING-OK",
         DETACH: "DETACH", DETACH_OK: "DETACH-OK", INVALID: "INVALID", SUBSCRIBE_SINCE: "SUBSCRIBE-SINCE",
         QUERY: "QUERY", QUERY_OK: "QUERY-OK", MC_DELIVER: "MC-DELIVER", MC_HEAD: "MC-HEAD",
         FEATURES: "FEATURES", GAP: "GAP", PUBLISH_ID: "PUBLISH-ID", EPOCH: "EPOCH",
         ATTACH_EXISTING: "ATTACH-EXISTING", PROBE: "PROBE", PROBE_OK: "PROBE-OK"}

Attach = namedtuple("Attach", "stream version existing", defaults=(False,))  # existing: ATTACH-EXISTING
AttachOk = namedtuple("AttachOk", "")
Subscribe = namedtuple("Subscribe", "pattern latest")
SubscribeOk = namedtuple("SubscribeOk", "")
Credit = namedtuple("Credit", "credit")
Publish = namedtuple("Publish", "key body")
Deliver = namedtuple("Deliver", "sequence key body")
Ping = namedtuple("Ping", "")
PingOk = namedtuple("PingOk", "")
Detach = namedtuple("Detach", "")
DetachOk = namedtuple("DetachOk", "")
Invalid = namedtuple("Invalid", "reason")
SubscribeSince = namedtuple("SubscribeSince", "pattern since")
Query = namedtuple("Query", "")
QueryOk = namedtuple("QueryOk", "report")
McDeliver = namedtuple("McDeliver", "stream sequence key body")
McHead = namedtuple("McHead", "stream sequence")
Features = namedtuple("Features", "features")
Gap = namedtuple("Gap", "first last")
PublishId = namedtuple("PublishId", "producer sequence key body")
Epoch = namedtuple("Epoch", "epoch seq")
Probe = namedtuple("Probe", "token")
ProbeOk = namedtuple("ProbeOk", "token")

for _cls, _id in ((Attach, ATTACH), (AttachOk, ATTACH_OK), (Subscribe, SUBSCRIBE), (SubscribeOk, SUBSCRIBE_OK),
                  (Credit, CREDIT), (Publish, PUBLISH), (Deliver, DELIVER), (Ping, PING), (PingOk, PING_OK),
                  (Detach, DETACH), (DetachOk, DETACH_OK), (Invalid, INVALID), (SubscribeSince, SUBSCRIBE_SINCE),
                  (Query, QUERY), (QueryOk, QUERY_OK), (McDeliver, MC_DELIVER), (McHead, MC_HEAD),
                  (Features, FEATURES), (Gap, GAP), (PublishId, PUBLISH_ID),
                  (Epoch, EPOCH), (Probe, PROBE), (ProbeOk, PROBE_OK)):
    _cls.id = _id
    _cls.__doc__ = "ZEPS %s (command %d)." % (NAMES[_id], _id)

# The commands without fields are singletons: decode returns these very objects.
_ATTACH_OK, _SUBSCRIBE_OK, _PING, _PING_OK, _DETACH, _DETACH_OK, _QUERY = (
    AttachOk(), SubscribeOk(), Ping(), PingOk(), Detach(), DetachOk(), Query())


class ProtocolError(ValueError):
    """A frame that is not a valid ZEPS command; ``str()`` is a readable reason."""


# -- encoders -------------------------------------------------------------------------
_u8 = struct.Struct(">B").pack
_u16 = struct.Struct(">H").pack
_u32 = struct.Struct(">I").pack
_u64 = struct.Struct(">Q").pack
_HEAD = struct.Struct(">2sB").pack
_DELIVER_HEAD = struct.Struct(">2sBQB").pack   # signature, 7, sequence, key length
_PUBLISH_HEAD = struct.Struct(">2sBB").pack    # signature, 6, key length

ATTACH_OK_FRAME = SIGNATURE + b"\x02"
SUBSCRIBE_OK_FRAME = SIGNATURE + b"\x04"
PING_FRAME = SIGNATURE + b"\x08"
PING_OK_FRAME = SIGNATURE + b"\x09"
DETACH_FRAME = SIGNATURE + b"\x0a"
DETACH_OK_FRAME = SIGNATURE + b"\x0b"
QUERY_FRAME = SIGNATURE + b"\x0e"


def _string(value, field):
    if isinstance(value, str):
        value = value.encode()
    if len(value) > MAX_STRING:
        raise ValueError("%s is %d bytes; a ZEPS string holds at most %d" % (field, len(value), MAX_STRING))
    return _u8(len(value)) + value


def _number(value, field, bits):
    if not 0 <= value < 1 << bits:
        raise ValueError("%s must fit in %d unsigned bits, got %r" % (field, bits, value))
    return value


def attach(stream, version=VERSION, existing=False):
    """C: ATTACH ``stream`` (protocol "ZEPS", ``version``); ATTACH-EXISTING with ``existing``."""
    return _HEAD(SIGNATURE, ATTACH_EXISTING if existing else ATTACH) + _string(PROTOCOL, "protocol") + _u16(_number(version, "version", 16)) + \
        _string(stream, "stream")


def subscribe(pattern, latest=0):
    """C: SUBSCRIBE ``pattern`` from ``latest + 1`` (0: from the start; :data:`NEW`: only new)."""
    return _HEAD(SIGNATURE, SUBSCRIBE) + _string(pattern, "pattern") + _u64(_number(latest, "latest", 64))


def subscribe_since(pattern, since):
    """C: SUBSCRIBE-SINCE (zactors extension) ``pattern`` from ``since`` (seconds since the epoch)."""
    micros = max(0, int(round(since * 1e6)))
    return _HEAD(SIGNATURE, SUBSCRIBE_SINCE) + _string(pattern, "pattern") + _u64(_number(micros, "since", 64))


def credit(amount):
    """C: CREDIT ``amount`` bytes."""
    return _HEAD(SIGNATURE, CREDIT) + _u64(_number(amount, "credit", 64))


def publish(key, body):
    """C: PUBLISH ``body`` (bytes) under routing ``key`` (bytes or str)."""
    if isinstance(key, str):
        key = key.encode()
    if len(key) > MAX_STRING:
        raise ValueError("key is %d bytes; a ZEPS string holds at most %d" % (len(key), MAX_STRING))
    if len(body) > MAX_CHUNK:
        raise ValueError("body is larger than a ZEPS chunk (4 GiB)")
    return b"".join((_PUBLISH_HEAD(SIGNATURE, PUBLISH, len(key)), key, _u32(len(body)), body))


def deliver(sequence, key, body):
    """S: DELIVER message ``sequence`` (hot path: key and body are bytes, no checks beyond struct's)."""
    return b"".join((_DELIVER_HEAD(SIGNATURE, DELIVER, sequence, len(key)), key, _u32(len(body)), body))


def deliver_cost(key, body):
    """Credit one DELIVER of ``key`` and ``body`` costs: its encoded size in bytes."""
    return 16 + len(key) + len(body)


def invalid(reason):
    """S: INVALID with a printable ``reason`` (cut to 255 bytes, unprintables replaced)."""
    if isinstance(reason, bytes):
        reason = reason.decode("ascii", "replace")
    text = "".join(c if " " <= c <= "~" else "?" for c in reason)[:MAX_STRING].encode("ascii")
    return _HEAD(SIGNATURE, INVALID) + _u8(len(text)) + text


def query_ok(report):
    """S: QUERY-OK with ``report`` (JSON bytes)."""
    return _HEAD(SIGNATURE, QUERY_OK) + _u32(len(report)) + report


def mc_deliver(stream_field, sequence, key, body):
    """MC-DELIVER datagram; ``stream_field`` is the encoded stream string (length byte + name), made once."""
    return b"".join((_HEAD(SIGNATURE, MC_DELIVER), stream_field, _u64(sequence), _u8(len(key)), key,
                     _u32(len(body)), body))


def mc_head(stream_field, sequence):
    """MC-HEAD datagram: the stream's last sequence."""
    return _HEAD(SIGNATURE, MC_HEAD) + stream_field + _u64(sequence)


def features(names):
    """C: FEATURES (zactors extension): ``names``, space-separated (bytes or str)."""
    return _HEAD(SIGNATURE, FEATURES) + _string(names, "features")


def publish_id(producer, sequence, key, body):
    """C: PUBLISH-ID (zactors extension): PUBLISH ``body`` under ``key`` as message ``sequence`` of ``producer``."""
    return _HEAD(SIGNATURE, PUBLISH_ID) + _u64(_number(producer, "producer", 64)) + \
        _u64(_number(sequence, "sequence", 64)) + publish(key, body)[3:]


def epoch(epoch, seq):
    """S/C: EPOCH (zactors extension): the stream's ``epoch`` and its first ``seq`` (S), or the ``epoch``
    of the client's position ``seq`` (C)."""
    return _HEAD(SIGNATURE, EPOCH) + _u64(_number(epoch, "epoch", 64)) + _u64(_number(seq, "seq", 64))


def gap(first, last):
    """S: GAP (zactors extension): sequences ``first..last`` will never be delivered (retention)."""
    return _HEAD(SIGNATURE, GAP) + _u64(_number(first, "first", 64)) + _u64(_number(last, "last", 64))


def probe(token):
    """S: PROBE (zactors extension, FEATURES ``tokens``): a PING carrying ``token`` for the PROBE-OK."""
    return _HEAD(SIGNATURE, PROBE) + _u64(_number(token, "token", 64))


def probe_ok(token):
    """C: PROBE-OK (zactors extension): the answer to the PROBE carrying ``token``."""
    return _HEAD(SIGNATURE, PROBE_OK) + _u64(_number(token, "token", 64))


def stream_field(stream):
    """The encoded ``stream`` string field (1-byte length + name), for :func:`mc_deliver`."""
    return _string(stream, "stream")


_CONSTANT = {AttachOk: ATTACH_OK_FRAME, SubscribeOk: SUBSCRIBE_OK_FRAME, Ping: PING_FRAME, PingOk: PING_OK_FRAME,
             Detach: DETACH_FRAME, DetachOk: DETACH_OK_FRAME, Query: QUERY_FRAME}


def encode(message):
    """The frame for any message object of this module."""
    kind = type(message)
    frame = _CONSTANT.get(kind)
    if frame is not None:
        return frame
    if kind is Attach:
        return attach(message.stream, message.version, message.existing)
    if kind is Subscribe:
        return subscribe(message.pattern, message.latest)
    if kind is SubscribeSince:
        return _HEAD(SIGNATURE, SUBSCRIBE_SINCE) + _string(message.pattern, "pattern") + \
            _u64(_number(message.since, "since", 64))
    if kind is Credit:
        return credit(message.credit)
    if kind is Publish:
        return publish(message.key, message.body)
    if kind is Deliver:
        _number(message.sequence, "sequence", 64)
        _string(message.key, "key")
        return deliver(message.sequence, message.key, message.body)
    if kind is Invalid:
        return invalid(message.reason)
    if kind is QueryOk:
        return query_ok(message.report)
    if kind is McDeliver:
        _number(message.sequence, "sequence", 64)
        return mc_deliver(_string(message.stream, "stream"), message.sequence, message.key, message.body)
    if kind is McHead:
        return mc_head(_string(message.stream, "stream"), _number(message.sequence, "sequence", 64))
    if kind is Features:
        return features(message.features)
    if kind is Gap:
        return gap(message.first, message.last)
    if kind is Epoch:
        return epoch(message.epoch, message.seq)
    if kind is PublishId:
        return publish_id(message.producer, message.sequence, message.key, message.body)
    if kind is Probe:
        return probe(message.token)
    if kind is ProbeOk:
        return probe_ok(message.token)
    raise TypeError("not a ZEPS message: %r" % (message,))


# -- decoder --------------------------------------------------------------------------
_unpack_u16 = struct.Struct(">H").unpack_from
_unpack_u32 = struct.Struct(">I").unpack_from
_unpack_u64 = struct.Struct(">Q").unpack_from


def _printable(value):
    return value.isascii() and value.isprintable()


def _read_string(frame, at, field):
    if at >= len(frame):
        raise ProtocolError("%s: missing (frame ends at byte %d)" % (field, at))
    end = at + 1 + frame[at]
    if end > len(frame):
        raise ProtocolError("%s: length %d runs past the end of the frame" % (field, frame[at]))
    return frame[at + 1:end], end


def _read_number(unpack, size, frame, at, field):
    if at + size > len(frame):
        raise ProtocolError("%s: needs %d bytes, the frame has %d left" % (field, size, max(0, len(frame) - at)))
    return unpack(frame, at)[0], at + size


def _end(frame, at, name):
    if at != len(frame):
        raise ProtocolError("%s: %d unexpected byte(s) after the last field" % (name, len(frame) - at))


def _text(value, field, allow_empty=True):
    if not _printable(value.decode("latin-1")):
        raise ProtocolError("%s must be printable ASCII" % field)
    if not allow_empty and not value:
        raise ProtocolError("%s must not be empty" % field)
    return value


def py_parse_publish(frame):
    """``(key, body)`` of a well-formed PUBLISH frame (bytes), else None: the one PUBLISH parser.

    The broker's hot path calls it (as :func:`parse_publish`: in C when
    built, this is its pure-Python twin) on every frame from an attached
    peer; :func:`decode` uses it too, and says what is wrong when it returns None.
    """
    if type(frame) is not bytes:
        raise TypeError("parse_publish() takes bytes")
    size = len(frame)
    if size > 7 and frame[2] == PUBLISH and frame[0] == 0xAA and frame[1] == 0xA5:
        end = 4 + frame[3]
        if size >= end + 4 and _unpack_u32(frame, end)[0] == size - end - 4:
            return frame[4:end], frame[end + 4:]
    return None


parse_publish = py_parse_publish if _deliver_c is None else _deliver_c.parse_publish


def decode(frame):
    """One frame -> a message object; :class:`ProtocolError` for anything else."""
    if type(frame) is not bytes:
        try:
            frame = bytes(frame)
        except TypeError:
            raise ProtocolError("a ZEPS command is a bytes frame, got %s" % type(frame).__name__) from None
    if len(frame) < 3:
        raise ProtocolError("a ZEPS command has at least 3 bytes, got %d" % len(frame))
    if frame[0] != 0xAA or frame[1] != 0xA5:
        raise ProtocolError("bad signature %s (expected aa a5)" % frame[:2].hex(" "))
    command = frame[2]
    if command == PUBLISH:  # the hot path first
        parsed = parse_publish(frame)
        if parsed is not None:
            return Publish(*parsed)
        key, at = _read_string(frame, 3, "PUBLISH key")  # not one: say what is wrong
        size, at = _read_number(_unpack_u32, 4, frame, at, "PUBLISH body length")
        raise ProtocolError("PUBLISH body: length %d but %d byte(s) follow" % (size, len(frame) - at))
    if command == DELIVER:
        sequence, at = _read_number(_unpack_u64, 8, frame, 3, "DELIVER sequence")
        key, at = _read_string(frame, at, "DELIVER key")
        size, at = _read_number(_unpack_u32, 4, frame, at, "DELIVER body length")
        if at + size != len(frame):
            raise ProtocolError("DELIVER body: length %d but %d byte(s) follow" % (size, len(frame) - at))
        return Deliver(sequence, key, frame[at:])
    if command == CREDIT:
        amount, at = _read_number(_unpack_u64, 8, frame, 3, "CREDIT credit")
        _end(frame, at, "CREDIT")
        return Credit(amount)
    if command in _SINGLETONS:
        _end(frame, 3, NAMES[command])
        return _SINGLETONS[command]
    if command == ATTACH or command == ATTACH_EXISTING:
        name = NAMES[command]
        protocol, at = _read_string(frame, 3, name + " protocol")
        if protocol != PROTOCOL:
            raise ProtocolError("%s protocol must be \"ZEPS\", got %r" % (name, protocol[:16]))
        version, at = _read_number(_unpack_u16, 2, frame, at, name + " version")
        stream, at = _read_string(frame, at, name + " stream")
        _end(frame, at, name)
        return Attach(_text(stream, name + " stream", allow_empty=False), version, command == ATTACH_EXISTING)
    if command == SUBSCRIBE or command == SUBSCRIBE_SINCE:
        name = NAMES[command]
        pattern, at = _read_string(frame, 3, name + " pattern")
        number, at = _read_number(_unpack_u64, 8, frame, at, name + (" latest" if command == SUBSCRIBE else " since"))
        _end(frame, at, name)
        return Subscribe(pattern, number) if command == SUBSCRIBE else SubscribeSince(pattern, number)
    if command == INVALID:
        reason, at = _read_string(frame, 3, "INVALID reason")
        _end(frame, at, "INVALID")
        return Invalid(_text(reason, "INVALID reason").decode("ascii"))
    if command == MC_DELIVER or command == MC_HEAD:
        name = NAMES[command]
        stream, at = _read_string(frame, 3, name + " stream")
        sequence, at = _read_number(_unpack_u64, 8, frame, at, name + " sequence")
        if command == MC_HEAD:
            _end(frame, at, name)
            return McHead(stream, sequence)
        key, at = _read_string(frame, at, name + " key")
        size, at = _read_number(_unpack_u32, 4, frame, at, name + " body length")
        if at + size != len(frame):
            raise ProtocolError("%s body: length %d but %d byte(s) follow" % (name, size, len(frame) - at))
        return McDeliver(stream, sequence, key, frame[at:])
    if command == FEATURES:
        names, at = _read_string(frame, 3, "FEATURES features")
        _end(frame, at, "FEATURES")
        return Features(_text(names, "FEATURES features"))
    if command == PUBLISH_ID:
        producer, at = _read_number(_unpack_u64, 8, frame, 3, "PUBLISH-ID producer")
        sequence, at = _read_number(_unpack_u64, 8, frame, at, "PUBLISH-ID sequence")
        key, at = _read_string(frame, at, "PUBLISH-ID key")
        size, at = _read_number(_unpack_u32, 4, frame, at, "PUBLISH-ID body length")
        if at + size != len(frame):
            raise ProtocolError("PUBLISH-ID body: length %d but %d byte(s) follow" % (size, len(frame) - at))
        return PublishId(producer, sequence, key, frame[at:])
    if command == EPOCH:
        number, at = _read_number(_unpack_u64, 8, frame, 3, "EPOCH epoch")
        seq, at = _read_number(_unpack_u64, 8, frame, at, "EPOCH seq")
        _end(frame, at, "EPOCH")
        return Epoch(number, seq)
    if command == PROBE or command == PROBE_OK:
        name = NAMES[command]
        token, at = _read_number(_unpack_u64, 8, frame, 3, name + " token")
        _end(frame, at, name)
        return Probe(token) if command == PROBE else ProbeOk(token)
    if command == GAP:
        first, at = _read_number(_unpack_u64, 8, frame, 3, "GAP first")
        last, at = _read_number(_unpack_u64, 8, frame, at, "GAP last")
        _end(frame, at, "GAP")
        if first > last:
            raise ProtocolError("GAP first %d is after last %d" % (first, last))
        return Gap(first, last)
    if command == QUERY_OK:
        size, at = _read_number(_unpack_u32, 4, frame, 3, "QUERY-OK report length")
        if at + size != len(frame):
            raise ProtocolError("QUERY-OK report: length %d but %d byte(s) follow" % (size, len(frame) - at))
        return QueryOk(frame[at:])
    raise ProtocolError("unknown command id %d" % command)


_SINGLETONS = {ATTACH_OK: _ATTACH_OK, SUBSCRIBE_OK: _SUBSCRIBE_OK, PING: _PING, PING_OK: _PING_OK,
               DETACH: _DETACH, DETACH_OK: _DETACH_OK, QUERY: _QUERY}
