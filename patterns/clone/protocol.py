"""12/CHP codec: the five-frame kvmsg and every Clustered Hashmap command.

Every CHP message but ``ICANHAZ?`` is a kvmsg of five frames::

    key | sequence (8 bytes, network order) | UUID (0 or 16 bytes) | properties | value

``ICANHAZ?`` is two frames (the command, a subtree specification).

``KVERR`` (a zactors extension) is how a server refuses a client's KVSET
(its journal could not hold it: a full disk), on the publisher socket::

    "KVERR" | sequence 0 | the refused KVSET's UUID | empty | reason (UTF-8, at most MAX_REASON bytes)

A zactors server's ``KTHXBAI`` carries its other endpoints in the properties
frame (the spec leaves it empty; spec-only clients ignore it), so a client
needs only the snapshot endpoint (:func:`advertised`)::

    "KTHXBAI" | sequence | empty | "publisher=ENDPOINT\ncollector=ENDPOINT\n" | subtree

A client asks for them with ``ICANHAZ? | DISCOVERY`` (:data:`DISCOVERY`): a
zactors server answers it in every Binary Star state, passive included, with
that KTHXBAI alone (no entries), and counts it as no vote, so a client learns
a backup's collector (and sends it every update) before any failover.

A server of a Binary Star pair re-syncs from its peer with a third frame,
``ICANHAZ? | "" | "peer"`` (:func:`encode_peer_icanhaz`): the snapshot then
carries each entry's sequence, UUID and properties, with ttl as the seconds
left.  It is asked from a socket whose routing id libzmq assigns (no peer can
claim it) and casts no Binary Star vote.

Its sequence is 0, so a client that does not know it discards it as an old
KVPUB (the spec's rule); zactors clients subscribe to it and fail the
update that carries that UUID.  Encoders
return lists of frames (without a ROUTER identity); decoders take them and
raise a :class:`ProtocolError` subclass, and nothing else, for any other input.
Pure functions: no sockets, safe everywhere.

Properties are ``name=value`` lines (``\\n`` after each, as the Guide's
kvmsg writes them); names are ``[A-Za-z0-9_.-]``, values printable, both
bounded.  ``ttl`` is a relative number of seconds.  An empty value deletes.

Dialects (where the Guide's Clone examples differ from the spec):

========== =============================== ===========================================
command    :data:`SPEC` (zactors default)   :data:`GUIDE` (clonesrv6 / clonecli6)
========== =============================== ===========================================
KVSYNC     seq = snapshot's sequence,       seq = the entry's own sequence, its UUID,
           frames 2, 3 empty (the table)    properties with ttl as *absolute* epoch time
KTHXBAI    seq = highest KVSYNC seq =       the server's counter (the same number here)
           the snapshot's sequence
HUGZ       seq 00000000 (the table)         the server's current sequence, a UUID
========== =============================== ===========================================

Why zactors follows the spec: absolute ttls make two servers' clocks (and
units: seconds in Python, milliseconds in C) part of the protocol, which is
how the Guide's backups expire keys they should keep.  zactors sends ttl only
as relative seconds and keeps the deadline on the active server's monotonic
clock.  Every KVSYNC of one snapshot carries the sequence the snapshot was
cut at, so KTHXBAI's "highest KVSYNC sequence" *is* that cut: a client then
discards exactly the updates the snapshot already holds (taking the highest
*entry* sequence instead would replay deletes of keys it never saw).
Decoders accept both dialects, so zactors clients work against the Guide's
servers, and the Guide's clients against a zactors server.
"""
import re
import struct

__all__ = [
    "ICANHAZ", "KTHXBAI", "HUGZ", "KVERR", "MAX_REASON", "RESERVED_KEYS", "MAX_KEY", "MAX_PROPERTIES", "MAX_PROPERTY",
    "KVMsg", "Dialect", "SPEC", "GUIDE", "dialect",
    "ProtocolError", "BadFrames", "BadKey", "BadSequence", "BadUUID", "BadProperties", "BadSubtree", "BadCommand",
    "DISCOVERY", "MAX_REQUEST", "MAX_VALUE", "frame_limit", "advertised",
    "PEER_SYNC", "encode_peer_icanhaz", "is_peer_icanhaz",
    "encode_icanhaz", "encode_kvmsg", "encode_kthxbai", "encode_kverr", "encode_properties",
    "decode_icanhaz", "decode_kvmsg", "decode_kvset", "parse_kvset", "decode_properties", "check_subtree", "parse_ttl",
]

ICANHAZ = b"ICANHAZ?"
KTHXBAI = b"KTHXBAI"
HUGZ = b"HUGZ"
KVERR = b"KVERR"
#: the subtree of the request that asks a server for its endpoints only (see the module docstring)
DISCOVERY = b"/zactors.endpoints/"
#: keys a client may not set: they are command names on the same sockets
RESERVED_KEYS = frozenset((ICANHAZ, KTHXBAI, HUGZ, KVERR))
#: third frame of a server's ICANHAZ? to its Binary Star peer
PEER_SYNC = b"peer"
#: longest reason a KVERR carries (bytes)
MAX_REASON = 512

#: longest key accepted (bytes)
MAX_KEY = 1024
#: most properties on one message, and the longest properties frame (bytes)
MAX_PROPERTIES = 32
MAX_PROPERTY = 4096
#: longest subtree specification (bytes)
MAX_SUBTREE = 1024
#: largest frame a socket that takes only requests, subscriptions or state messages accepts (bytes)
MAX_REQUEST = 4096
#: default largest value (bytes): a frame over it closes the sender's connection unread
MAX_VALUE = 16 << 20


def frame_limit(max_value):
    """The largest frame a socket carrying kvmsgs with values of ``max_value`` bytes accepts."""
    return max(max_value, MAX_KEY, MAX_PROPERTY, MAX_REQUEST)

_seq = struct.Struct("!Q")
pack_sequence = _seq.pack
_unpack = _seq.unpack
_name = re.compile(rb"[A-Za-z0-9_.\-]{1,64}\Z").match
_value = re.compile(rb"[\x20-\x7e]*\Z").match
_segment = re.compile(rb"[\x21-\x2e\x30-\x7e]+\Z").match  # printable, no '/' or space


class ProtocolError(ValueError):
    """A message that is not a valid CHP command for its receiver."""


class BadFrames(ProtocolError):
    """Wrong number or shape of frames."""


class BadCommand(ProtocolError):
    """A command name that is not expected here."""


class BadKey(ProtocolError):
    """Empty, too long or reserved key."""


class BadSequence(ProtocolError):
    """A sequence frame that is not 8 bytes."""


class BadUUID(ProtocolError):
    """A UUID frame that is neither empty nor 16 bytes."""


class BadProperties(ProtocolError):
    """Properties that are not ``name=value`` lines, too many, too long, or a bad ttl."""


class BadSubtree(ProtocolError):
    """A subtree specification that is neither empty nor ``/segment/.../``."""


class KVMsg:
    """One decoded kvmsg.  ``properties`` is the raw frame; :attr:`props` parses it."""

    __slots__ = ("key", "sequence", "uuid", "properties", "value")

    def __init__(self, key, sequence=0, uuid=b"", properties=b"", value=b""):
        self.key = key
        self.sequence = sequence
        self.uuid = uuid
        self.properties = properties
        self.value = value

    @property
    def props(self):
        return decode_properties(self.properties)

    def frames(self):
        return [self.key, pack_sequence(self.sequence), self.uuid, self.properties, self.value]

    def __eq__(self, other):
        return isinstance(other, KVMsg) and self.frames() == other.frames()

    def __repr__(self):
        return "KVMsg(%r, %d, uuid=%s, properties=%r, value=%r)" % (
            self.key, self.sequence, self.uuid.hex() or "-", self.properties, self.value[:40])


# -- properties -------------------------------------------------------------
def encode_properties(props):
    """``{name: value}`` (str or bytes) -> the properties frame."""
    if not props:
        return b""
    out = []
    for name, value in props.items():
        name = name.encode() if isinstance(name, str) else name
        value = value.encode() if isinstance(value, str) else value
        if not _name(name) or not _value(value) or len(value) > MAX_PROPERTY:
            raise BadProperties("bad property %r=%r" % (name, value[:40]))
        out.append(b"%s=%s\n" % (name, value))
    if len(out) > MAX_PROPERTIES:
        raise BadProperties("more than %d properties" % MAX_PROPERTIES)
    frame = b"".join(out)
    if len(frame) > MAX_PROPERTY:
        raise BadProperties("properties longer than %d bytes" % MAX_PROPERTY)
    return frame


def decode_properties(frame):
    """The properties frame -> ``{name: value}`` (str); a trailing newline is optional."""
    if not frame:
        return {}
    if len(frame) > MAX_PROPERTY:
        raise BadProperties("properties longer than %d bytes" % MAX_PROPERTY)
    lines = frame.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if len(lines) > MAX_PROPERTIES:
        raise BadProperties("more than %d properties" % MAX_PROPERTIES)
    props = {}
    for line in lines:
        name, sep, value = line.partition(b"=")
        if not sep or not _name(name) or not _value(value):
            raise BadProperties("bad property line %r" % line[:40])
        props[name.decode()] = value.decode()
    return props


def parse_ttl(props):
    """The ``ttl`` property in seconds (float > 0), or None; BadProperties if not a number."""
    text = props.get("ttl")
    if text is None:
        return None
    try:
        ttl = float(text)
    except ValueError:
        raise BadProperties("ttl is not a number: %r" % text[:40]) from None
    if not 0 <= ttl < 1e9:  # also rejects nan and inf
        raise BadProperties("ttl out of range: %r" % text[:40])
    return ttl or None  # the Guide sends ttl=0 for "none"


# -- subtrees ---------------------------------------------------------------
def check_subtree(subtree):
    """Return ``subtree`` (bytes) if empty or ``/`` + segments + ``/``; else BadSubtree."""
    if isinstance(subtree, str):
        subtree = subtree.encode()
    if type(subtree) is not bytes:
        raise BadSubtree("subtree must be bytes")
    if not subtree:
        return subtree
    if len(subtree) > MAX_SUBTREE or len(subtree) < 3 or subtree[:1] != b"/" or subtree[-1:] != b"/":
        raise BadSubtree("subtree must be empty or /segment/.../, got %r" % subtree[:40])
    for segment in subtree[1:-1].split(b"/"):
        if not _segment(segment):
            raise BadSubtree("bad subtree segment %r in %r" % (segment, subtree[:40]))
    return subtree


# -- encoders ---------------------------------------------------------------
def encode_icanhaz(subtree=b""):
    return [ICANHAZ, check_subtree(subtree)]


def encode_peer_icanhaz():
    """A server's re-sync request to its peer (the whole map, with each entry's details)."""
    return [ICANHAZ, b"", PEER_SYNC]


def is_peer_icanhaz(frames):
    return len(frames) == 3 and frames[0] == ICANHAZ and not frames[1] and frames[2] == PEER_SYNC


def encode_kvmsg(key, sequence, value=b"", uuid=b"", properties=b""):
    """KVSYNC, KVPUB or KVSET: five frames (``properties`` is the raw frame)."""
    return [key, pack_sequence(sequence), uuid, properties, value]


def encode_kthxbai(sequence, subtree=b"", properties=b""):
    """KTHXBAI; ``properties``: a zactors server's advertised endpoints (see :func:`advertised`)."""
    return [KTHXBAI, pack_sequence(sequence), b"", properties, subtree]


def advertised(properties):
    """``(publisher, collector)`` endpoints from a KTHXBAI's properties frame, or None (a server that
    advertises nothing: a spec-only one)."""
    try:
        props = decode_properties(properties)
    except ProtocolError:
        return None
    publisher, collector = props.get("publisher"), props.get("collector")
    if not publisher or not collector or "://" not in publisher or "://" not in collector:
        return None
    return publisher, collector


def encode_kverr(uuid, reason):
    """KVERR: the server refuses the KVSET with ``uuid``; ``reason`` (bytes) says why."""
    return [KVERR, pack_sequence(0), uuid, b"", reason[:MAX_REASON]]


# -- decoders ---------------------------------------------------------------
def decode_icanhaz(frames):
    """``[ICANHAZ?, subtree]`` -> the subtree (bytes)."""
    if len(frames) != 2:
        raise BadFrames("ICANHAZ? has 2 frames, got %d" % len(frames))
    if frames[0] != ICANHAZ:
        raise BadCommand("expected ICANHAZ?, got %r" % frames[0][:40])
    return check_subtree(frames[1])


def _kvmsg_frames(frames):
    """The five frames of a kvmsg, with its framing, key, sequence and UUID checked."""
    if len(frames) != 5:
        raise BadFrames("a kvmsg has 5 frames, got %d" % len(frames))
    key, seq, uuid, properties, value = frames
    if not key or len(key) > MAX_KEY:
        raise BadKey("key must be 1-%d bytes, got %d" % (MAX_KEY, len(key)))
    if len(seq) != 8:
        raise BadSequence("sequence must be 8 bytes, got %d" % len(seq))
    if len(uuid) not in (0, 16):
        raise BadUUID("UUID must be empty or 16 bytes, got %d" % len(uuid))
    return key, seq, uuid, properties, value


def decode_kvmsg(frames):
    """Any five-frame kvmsg -> :class:`KVMsg` (checks framing, sequence, UUID; not properties)."""
    key, seq, uuid, properties, value = _kvmsg_frames(frames)
    if len(properties) > MAX_PROPERTY:
        raise BadProperties("properties longer than %d bytes" % MAX_PROPERTY)
    return KVMsg(key, _unpack(seq)[0], uuid, properties, value)


def parse_kvset(frames):
    """A client's KVSET -> ``(key, uuid, properties, value, ttl seconds or None)``: the server's one
    parser, no object made; reserved keys and bad properties rejected."""
    key, _seq, uuid, properties, value = _kvmsg_frames(frames)
    if key in RESERVED_KEYS:
        raise BadKey("key %r is a command name" % key)
    return key, uuid, properties, value, parse_ttl(decode_properties(properties)) if properties else None


def decode_kvset(frames):
    """A client's KVSET -> ``(KVMsg, ttl seconds or None)`` (see :func:`parse_kvset`)."""
    key, uuid, properties, value, ttl = parse_kvset(frames)
    return KVMsg(key, _unpack(frames[1])[0], uuid, properties, value), ttl


# -- dialects ---------------------------------------------------------------
class Dialect:
    """How a server fills the frames the spec leaves open (see the module docstring)."""

    def __init__(self, name, sync_details, hugz_sequence):
        self.name = name
        self.sync_details = sync_details
        self.hugz_sequence = hugz_sequence

    def hugz(self, sequence, uuid=b""):
        return [HUGZ, pack_sequence(sequence if self.hugz_sequence else 0), uuid if self.hugz_sequence else b"",
                b"", b""]

    def __repr__(self):
        return "<Dialect %s>" % self.name


SPEC = Dialect("spec", sync_details=False, hugz_sequence=False)
GUIDE = Dialect("guide", sync_details=True, hugz_sequence=True)


def dialect(name):
    """``"spec"`` or ``"guide"`` -> the Dialect (ValueError otherwise)."""
    for d in (SPEC, GUIDE):
        if d.name == name:
            return d
    raise ValueError("dialect must be 'spec' or 'guide', got %r" % (name,))
