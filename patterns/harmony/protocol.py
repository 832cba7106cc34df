"""ZRE v2 codec: the UDP beacon and the seven peer messages, as Zyre and pyre speak them.

Beacon (one UDP datagram, 22 bytes)::

    'Z' 'R' 'E' 0x01 | UUID (16 bytes) | mailbox port (2 bytes, big-endian; 0 = leaving)

Peer message (frames sent by a DEALER whose identity is 0x01 + sender UUID)::

    frame 0: 0xAA 0xA1 | id (1 byte) | version 0x02 | sequence (2 bytes BE) | fields...
    frames 1..: content (WHISPER and SHOUT only)

Field encodings: string = 1-byte length + UTF-8; longstr = 4-byte length +
UTF-8; strings = 4-byte count + longstrs; dictionary = 4-byte count +
(string key, longstr value); number1 = 1 byte.  All lengths big-endian.

=======  ==========  ===========================================================
id       message     fields after the sequence
=======  ==========  ===========================================================
1        HELLO       endpoint string, groups strings, status number1,
                     name string, headers dictionary
2        WHISPER     (content frames)
3        SHOUT       group string (content frames)
4        JOIN        group string, status number1
5        LEAVE       group string, status number1
6        PING        -
7        PING-OK     -
=======  ==========  ===========================================================

:func:`decode` raises :class:`ProtocolError` (never anything else) for any
frames that are not exactly one of these; :class:`UnknownMessage` is the
subclass for a well-formed header with an id outside 1..7.  Pure functions:
safe from any thread.
"""
import struct
from collections import namedtuple

__all__ = [
    "HELLO", "WHISPER", "SHOUT", "JOIN", "LEAVE", "PING", "PING_OK", "NAMES",
    "Hello", "Whisper", "Shout", "Join", "Leave", "Ping", "PingOk",
    "ProtocolError", "UnknownMessage", "encode", "decode", "identity_of", "uuid_of",
    "whisper_frames", "shout_head", "shout_frames",
    "encode_beacon", "decode_beacon", "BEACON_PREFIX", "BEACON_SIZE", "SIGNATURE", "VERSION",
]

SIGNATURE = b"\xaa\xa1"
VERSION = 2
BEACON_PREFIX = b"ZRE\x01"
BEACON_SIZE = 22

HELLO, WHISPER, SHOUT, JOIN, LEAVE, PING, PING_OK = range(1, 8)
NAMES = {HELLO: "HELLO", WHISPER: "WHISPER", SHOUT: "SHOUT", JOIN: "JOIN", LEAVE: "LEAVE",
         PING: "PING", PING_OK: "PING-OK"}

Hello = namedtuple("Hello", "sequence endpoint groups status name headers")
Whisper = namedtuple("Whisper", "sequence content")
Shout = namedtuple("Shout", "sequence group content")
Join = namedtuple("Join", "sequence group status")
Leave = namedtuple("Leave", "sequence group status")
Ping = namedtuple("Ping", "sequence")
PingOk = namedtuple("PingOk", "sequence")

_ID_OF = {Hello: HELLO, Whisper: WHISPER, Shout: SHOUT, Join: JOIN, Leave: LEAVE, Ping: PING, PingOk: PING_OK}

_HEADER = struct.Struct(">2sBBH")
_U32 = struct.Struct(">I")
_BEACON = struct.Struct(">4s16sH")


class ProtocolError(ValueError):
    """Frames that are not a ZRE v2 message (or a beacon that is not one)."""


class UnknownMessage(ProtocolError):
    """A ZRE header with a message id this codec does not know."""

    def __init__(self, message_id):
        super().__init__("unknown ZRE message id %d" % message_id)
        self.message_id = message_id


# -- identities ----------------------------------------------------------
def identity_of(uuid):
    """The DEALER identity a node with 16-byte ``uuid`` uses: 0x01 + uuid."""
    return b"\x01" + uuid


def uuid_of(identity):
    """The 16-byte UUID in a ROUTER identity frame; ProtocolError if not 0x01 + 16 bytes."""
    if len(identity) != 17 or identity[0] != 1:
        raise ProtocolError("peer identity must be 0x01 + 16-byte UUID, got %d bytes" % len(identity))
    return identity[1:]


# -- beacons -------------------------------------------------------------
def encode_beacon(uuid, port):
    """The 22-byte beacon announcing ``uuid`` at mailbox ``port`` (0: leaving)."""
    if len(uuid) != 16 or not 0 <= port < 65536:
        raise ValueError("beacon needs a 16-byte uuid and a port 0..65535")
    return _BEACON.pack(BEACON_PREFIX, uuid, port)


def decode_beacon(payload):
    """``(uuid, port)`` of a beacon; ProtocolError if it is not a ZRE v1 beacon."""
    if len(payload) != BEACON_SIZE or payload[:4] != BEACON_PREFIX:
        raise ProtocolError("not a ZRE beacon (%d bytes)" % len(payload))
    _, uuid, port = _BEACON.unpack(payload)
    return uuid, port


# -- encoding ------------------------------------------------------------
def _string(value):
    data = value.encode() if isinstance(value, str) else bytes(value)
    if len(data) > 255:
        raise ValueError("ZRE string longer than 255 bytes: %r..." % data[:20])
    return bytes((len(data),)) + data


def _longstr(value):
    data = value.encode() if isinstance(value, str) else bytes(value)
    return _U32.pack(len(data)) + data


def _strings(values):
    return _U32.pack(len(values)) + b"".join(_longstr(v) for v in values)


def _dictionary(mapping):
    return _U32.pack(len(mapping)) + b"".join(_string(k) + _longstr(v) for k, v in mapping.items())


def encode(message):
    """The frames of ``message`` (one of the message tuples)."""
    kind = type(message)
    mid = _ID_OF[kind]
    head = _HEADER.pack(SIGNATURE, mid, VERSION, message.sequence & 0xFFFF)
    if mid == WHISPER:
        return [head, *message.content]
    if mid == SHOUT:
        return [head + _string(message.group), *message.content]
    if mid == HELLO:
        body = (_string(message.endpoint) + _strings(message.groups) + bytes((message.status & 0xFF,))
                + _string(message.name) + _dictionary(message.headers))
    elif mid == JOIN or mid == LEAVE:
        body = _string(message.group) + bytes((message.status & 0xFF,))
    else:
        body = b""
    return [head + body]


def whisper_frames(sequence, content):
    """WHISPER frames without building a tuple (the hot path)."""
    return [_HEADER.pack(SIGNATURE, WHISPER, VERSION, sequence), *content]


def shout_head(group):
    """The part of a SHOUT's first frame after the header, for :func:`shout_frames`."""
    return _string(group)


def shout_frames(sequence, group_field, content):
    """SHOUT frames from a precomputed :func:`shout_head` (the hot path)."""
    return [_HEADER.pack(SIGNATURE, SHOUT, VERSION, sequence) + group_field, *content]


# -- decoding ------------------------------------------------------------
class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data, pos):
        self.data = data
        self.pos = pos

    def take(self, n, what):
        end = self.pos + n
        if end > len(self.data):
            raise ProtocolError("truncated %s at byte %d" % (what, self.pos))
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def number1(self, what):
        return self.take(1, what)[0]

    def number4(self, what):
        return _U32.unpack(self.take(4, what))[0]

    def text(self, raw, what):
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("%s is not UTF-8" % what) from None

    def string(self, what):
        return self.text(self.take(self.number1(what), what), what)

    def longstr(self, what):
        return self.text(self.take(self.number4(what), what), what)

    def strings(self, what):
        count = self.number4(what)
        if count * 4 > len(self.data) - self.pos:
            raise ProtocolError("%s count %d exceeds the frame" % (what, count))
        return [self.longstr(what) for _ in range(count)]

    def dictionary(self, what):
        count = self.number4(what)
        if count * 5 > len(self.data) - self.pos:
            raise ProtocolError("%s count %d exceeds the frame" % (what, count))
        result = {}
        for _ in range(count):
            key = self.string(what)
            result[key] = self.longstr(what)
        return result

    def end(self, name):
        if self.pos != len(self.data):
            raise ProtocolError("%d stray bytes after %s" % (len(self.data) - self.pos, name))


def decode(frames):
    """The message tuple in ``frames`` (without the ROUTER identity frame)."""
    if not frames:
        raise ProtocolError("empty message")
    first = frames[0]
    if len(first) < 6:
        raise ProtocolError("first frame of %d bytes is too short for a ZRE header" % len(first))
    signature, mid, version, sequence = _HEADER.unpack_from(first)
    if signature != SIGNATURE:
        raise ProtocolError("bad signature %r" % bytes(signature))
    if version != VERSION:
        raise ProtocolError("ZRE version %d, not %d" % (version, VERSION))
    if mid == WHISPER:
        if len(first) != 6:
            raise ProtocolError("%d stray bytes after WHISPER" % (len(first) - 6))
        return Whisper(sequence, frames[1:])
    reader = _Reader(first, 6)
    if mid == SHOUT:
        group = reader.string("group")
        reader.end("SHOUT")
        return Shout(sequence, group, frames[1:])
    if mid not in NAMES:
        raise UnknownMessage(mid)
    if len(frames) != 1:
        raise ProtocolError("%s with %d content frames" % (NAMES[mid], len(frames) - 1))
    if mid == HELLO:
        message = Hello(sequence, reader.string("endpoint"), reader.strings("groups"), reader.number1("status"),
                        reader.string("name"), reader.dictionary("headers"))
    elif mid == JOIN:
        message = Join(sequence, reader.string("group"), reader.number1("status"))
    elif mid == LEAVE:
        message = Leave(sequence, reader.string("group"), reader.number1("status"))
    elif mid == PING:
        message = Ping(sequence)
    else:
        message = PingOk(sequence)
    reader.end(NAMES[mid])
    return message
