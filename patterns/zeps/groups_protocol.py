"""ZEPS consumer-group extension commands: the codec (ids 40-49), beside :mod:`.protocol`.

The ABNF and the command table are in ``docs/zeps-extensions.md`` (section
"consumer groups").  Same framing as :mod:`.protocol`: ``AA A5``, a command
id, then fields (``string`` = 1-byte length + bytes, ``chunk`` = 4-byte
length + bytes, numbers unsigned big-endian).  Only a client that sends
JOIN ever gets GROUP-DELIVER, so a spec-only client never sees these.

:func:`decode` returns a namedtuple below for a group command, or raises
:class:`~.protocol.ProtocolError` (and nothing else); :func:`is_group_command`
says whether a frame's id belongs here (the broker routes on it before
:func:`.protocol.decode`).  Pure functions: no sockets, safe everywhere.
"""
import struct
from collections import namedtuple

from .protocol import SIGNATURE, ProtocolError

__all__ = [
    "JOIN", "JOIN_OK", "GROUP_DELIVER", "ACK", "NACK", "CLAIM", "GROUPS", "GROUPS_OK", "GROUP_DELETE",
    "GROUP_DELETED", "NAMES", "START_EARLIEST", "START_LATEST", "START_SEQ", "START_TIME", "MAX_RANGES",
    "Join", "JoinOk", "GroupDeliver", "Ack", "Nack", "Claim", "Groups", "GroupsOk", "GroupDelete", "GroupDeleted",
    "decode", "encode", "is_group_command", "join", "join_ok", "group_deliver", "ack", "nack", "claim", "groups",
    "groups_ok", "group_delete", "group_deleted", "group_deliver_cost",
]

JOIN, JOIN_OK, GROUP_DELIVER, ACK, NACK, CLAIM, GROUPS, GROUPS_OK, GROUP_DELETE, GROUP_DELETED = range(40, 50)
NAMES = {JOIN: "JOIN", JOIN_OK: "JOIN-OK", GROUP_DELIVER: "GROUP-DELIVER", ACK: "ACK", NACK: "NACK",
         CLAIM: "CLAIM", GROUPS: "GROUPS", GROUPS_OK: "GROUPS-OK", GROUP_DELETE: "GROUP-DELETE",
         GROUP_DELETED: "GROUP-DELETED"}
#: where a new group starts (JOIN ``start``): the first retained message, the next one published,
#: sequence ``value``, the first message journaled at or after ``value`` microseconds since the epoch
START_EARLIEST, START_LATEST, START_SEQ, START_TIME = 0, 1, 2, 3
#: ranges in one ACK at most
MAX_RANGES = 1024

Join = namedtuple("Join", "group pattern start value ack_wait max_deliver")
JoinOk = namedtuple("JoinOk", "cursor")
GroupDeliver = namedtuple("GroupDeliver", "sequence deliveries key body")
Ack = namedtuple("Ack", "ranges")          # a tuple of (first, last), inclusive
Nack = namedtuple("Nack", "sequence delay")  # delay in milliseconds
Claim = namedtuple("Claim", "min_idle count")  # min_idle in milliseconds
Groups = namedtuple("Groups", "group")     # b"": every group of the stream
GroupsOk = namedtuple("GroupsOk", "report")
GroupDelete = namedtuple("GroupDelete", "group")
GroupDeleted = namedtuple("GroupDeleted", "group")

for _cls, _id in ((Join, JOIN), (JoinOk, JOIN_OK), (GroupDeliver, GROUP_DELIVER), (Ack, ACK), (Nack, NACK),
                  (Claim, CLAIM), (Groups, GROUPS), (GroupsOk, GROUPS_OK), (GroupDelete, GROUP_DELETE),
                  (GroupDeleted, GROUP_DELETED)):
    _cls.id = _id
    _cls.__doc__ = "ZEPS group extension %s (command %d)." % (NAMES[_id], _id)

_u8, _u16, _u32, _u64 = (struct.Struct(f).pack for f in (">B", ">H", ">I", ">Q"))
_DELIVER_HEAD = struct.Struct(">2sBQHB").pack   # signature, 42, sequence, deliveries, key length
#: GROUP-DELIVER's head (as above) and a chunk's length, for a broker that frames it inline (its hot path)
deliver_head, u32 = _DELIVER_HEAD, _u32


def _head(command):
    return SIGNATURE + _u8(command)


def _string(value, field, printable=False):
    if isinstance(value, str):
        value = value.encode()
    if len(value) > 255:
        raise ValueError("%s is %d bytes; a ZEPS string holds at most 255" % (field, len(value)))
    if printable and not (value and value.isascii() and value.decode("ascii").isprintable()):
        raise ValueError("%s must be non-empty printable ASCII, got %r" % (field, value[:32]))
    return _u8(len(value)) + value


def _number(value, field, bits):
    if not isinstance(value, int) or not 0 <= value < 1 << bits:
        raise ValueError("%s must fit in %d unsigned bits, got %r" % (field, bits, value))
    return value


def join(group, pattern=b"", start=START_EARLIEST, value=0, ack_wait=0, max_deliver=0):
    """C: JOIN ``group`` of the attached stream with ``pattern``; a new group starts at ``start``/``value``.
    ``ack_wait`` (ms) and ``max_deliver`` set a new group's limits (0: the broker's defaults)."""
    if start not in (START_EARLIEST, START_LATEST, START_SEQ, START_TIME):
        raise ValueError("start must be 0 (earliest), 1 (latest), 2 (sequence) or 3 (time), got %r" % (start,))
    return (_head(JOIN) + _string(group, "group", True) + _string(pattern, "pattern") + _u8(start)
            + _u64(_number(value, "value", 64)) + _u32(_number(ack_wait, "ack_wait", 32))
            + _u16(_number(max_deliver, "max_deliver", 16)))


def join_ok(cursor):
    """S: JOIN-OK: the group's ``cursor`` (the last sequence it has handed out, or before its start)."""
    return _head(JOIN_OK) + _u64(_number(cursor, "cursor", 64))


def group_deliver(sequence, deliveries, key, body):
    """S: GROUP-DELIVER message ``sequence``, its ``deliveries``-th delivery (hot path: few checks)."""
    return b"".join((_DELIVER_HEAD(SIGNATURE, GROUP_DELIVER, sequence, min(deliveries, 0xFFFF), len(key)), key,
                     _u32(len(body)), body))


def group_deliver_cost(key, body):
    """Credit one GROUP-DELIVER costs: its frame size in bytes."""
    return 18 + len(key) + len(body)


def ack(ranges):
    """C: ACK ``ranges``: sequences, or (first, last) pairs (inclusive), at most :data:`MAX_RANGES`."""
    pairs = [(r, r) if isinstance(r, int) else tuple(r) for r in ranges]
    if not 1 <= len(pairs) <= MAX_RANGES:
        raise ValueError("an ACK holds 1 to %d ranges, got %d" % (MAX_RANGES, len(pairs)))
    out = [_head(ACK), _u16(len(pairs))]
    for first, last in pairs:
        if _number(first, "first", 64) > _number(last, "last", 64):
            raise ValueError("ACK range %d..%d: first after last" % (first, last))
        out.append(_u64(first) + _u64(last))
    return b"".join(out)


def nack(sequence, delay=0):
    """C: NACK ``sequence``: deliver it again after ``delay`` milliseconds."""
    return _head(NACK) + _u64(_number(sequence, "sequence", 64)) + _u32(_number(delay, "delay", 32))


def claim(min_idle, count):
    """C: CLAIM up to ``count`` entries other members have held for over ``min_idle`` ms."""
    return _head(CLAIM) + _u32(_number(min_idle, "min_idle", 32)) + _u16(_number(count, "count", 16))


def groups(group=b""):
    """C: GROUPS: the report of ``group`` (empty: every group of the attached stream)."""
    return _head(GROUPS) + _string(group, "group")


def groups_ok(report):
    """S: GROUPS-OK with ``report`` (JSON bytes)."""
    return _head(GROUPS_OK) + _u32(len(report)) + report


def group_delete(group):
    """C: GROUP-DELETE ``group`` (permission ``consume``)."""
    return _head(GROUP_DELETE) + _string(group, "group", True)


def group_deleted(group):
    """S: GROUP-DELETED ``group``: the answer to GROUP-DELETE."""
    return _head(GROUP_DELETED) + _string(group, "group", True)


def encode(message):
    """The frame for any message object of this module."""
    kind = type(message)
    if kind is Join:
        return join(*message)
    if kind is JoinOk:
        return join_ok(message.cursor)
    if kind is GroupDeliver:
        _number(message.sequence, "sequence", 64)
        _number(message.deliveries, "deliveries", 16)
        _string(message.key, "key")
        return group_deliver(*message)
    if kind is Ack:
        return ack(message.ranges)
    if kind is Nack:
        return nack(message.sequence, message.delay)
    if kind is Claim:
        return claim(message.min_idle, message.count)
    if kind is Groups:
        return groups(message.group)
    if kind is GroupsOk:
        return groups_ok(message.report)
    if kind is GroupDelete:
        return group_delete(message.group)
    if kind is GroupDeleted:
        return group_deleted(message.group)
    raise TypeError("not a ZEPS group message: %r" % (message,))


def is_group_command(frame):
    """True if ``frame`` (bytes) carries the signature and a command id of this module."""
    return len(frame) >= 3 and frame[0] == 0xAA and frame[1] == 0xA5 and JOIN <= frame[2] <= GROUP_DELETED


class _Reader:
    __slots__ = ("frame", "at", "name")

    def __init__(self, frame, name):
        self.frame, self.at, self.name = frame, 3, name

    def number(self, size, field):
        frame, at = self.frame, self.at
        if at + size > len(frame):
            raise ProtocolError("%s %s: needs %d bytes, the frame has %d left"
                                % (self.name, field, size, max(0, len(frame) - at)))
        self.at = at + size
        return int.from_bytes(frame[at:at + size], "big")

    def string(self, field, printable=False):
        size = self.number(1, field + " length")
        value = self.frame[self.at:self.at + size]
        if len(value) != size:
            raise ProtocolError("%s %s: length %d runs past the end of the frame" % (self.name, field, size))
        self.at += size
        if printable and not (value and value.isascii() and value.decode("ascii").isprintable()):
            raise ProtocolError("%s %s must be non-empty printable ASCII" % (self.name, field))
        return value

    def chunk(self, field):
        size = self.number(4, field + " length")
        if self.at + size != len(self.frame):
            raise ProtocolError("%s %s: length %d but %d byte(s) follow"
                                % (self.name, field, size, len(self.frame) - self.at))
        value, self.at = self.frame[self.at:], len(self.frame)
        return value

    def end(self):
        if self.at != len(self.frame):
            raise ProtocolError("%s: %d unexpected byte(s) after the last field" % (self.name, len(self.frame) - self.at))


def decode(frame):
    """One group-command frame -> a message object; :class:`~.protocol.ProtocolError` for anything else."""
    frame = bytes(frame)
    if not is_group_command(frame):
        raise ProtocolError("not a ZEPS group command")
    command = frame[2]
    r = _Reader(frame, NAMES[command])
    if command == GROUP_DELIVER:
        sequence, deliveries = r.number(8, "sequence"), r.number(2, "deliveries")
        key = r.string("key")
        return GroupDeliver(sequence, deliveries, key, r.chunk("body"))
    if command == ACK:
        count = r.number(2, "count")
        if not 1 <= count <= MAX_RANGES:
            raise ProtocolError("ACK: %d ranges (1 to %d)" % (count, MAX_RANGES))
        if len(frame) != 5 + 16 * count:
            raise ProtocolError("ACK: %d ranges need %d bytes, the frame has %d" % (count, 5 + 16 * count, len(frame)))
        ranges = tuple(struct.iter_unpack(">QQ", frame[5:]))
        for first, last in ranges:
            if first > last or first == 0:
                raise ProtocolError("ACK range %d..%d: sequences start at 1, first <= last" % (first, last))
        return Ack(ranges)
    if command == JOIN:
        group, pattern = r.string("group", True), r.string("pattern")
        start = r.number(1, "start")
        if start > START_TIME:
            raise ProtocolError("JOIN start %d: 0 earliest, 1 latest, 2 sequence, 3 time" % start)
        message = Join(group, pattern, start, r.number(8, "value"), r.number(4, "ack_wait"), r.number(2, "max_deliver"))
    elif command == JOIN_OK:
        message = JoinOk(r.number(8, "cursor"))
    elif command == NACK:
        message = Nack(r.number(8, "sequence"), r.number(4, "delay"))
    elif command == CLAIM:
        message = Claim(r.number(4, "min_idle"), r.number(2, "count"))
    elif command == GROUPS:
        message = Groups(r.string("group"))
    elif command == GROUPS_OK:
        return GroupsOk(r.chunk("report"))
    elif command == GROUP_DELETE:
        message = GroupDelete(r.string("group", True))
    else:
        message = GroupDeleted(r.string("group", True))
    r.end()
    return message
