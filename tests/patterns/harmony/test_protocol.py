"""ZRE v2 codec: byte-exact frames from the spec's tables, pyre cross-checks, fuzzing."""
import struct

import pytest
from hypothesis import given, settings, strategies as st

from zactors.patterns.harmony import protocol as p

UUID = bytes(range(16))


def test_beacon_is_22_bytes_big_endian_port():
    data = p.encode_beacon(UUID, 0xC123)
    assert data == b"ZRE\x01" + UUID + b"\xc1\x23"
    assert len(data) == 22
    assert p.decode_beacon(data) == (UUID, 0xC123)
    assert p.decode_beacon(p.encode_beacon(UUID, 0)) == (UUID, 0)


@pytest.mark.parametrize("payload", [b"", b"ZRE\x01" + UUID, b"ZRE\x02" + UUID + b"\0\1", b"XRE\x01" + UUID + b"\0\1",
                                     b"ZRE\x01" + UUID + b"\0\1\2"])
def test_bad_beacons(payload):
    with pytest.raises(p.ProtocolError):
        p.decode_beacon(payload)


def test_beacon_matches_pyre():
    # pyre packs 'cccb16sH' with htons(port): the same 22 bytes.
    import socket
    pyre = struct.pack("cccb16sH", b"Z", b"R", b"E", 1, UUID, socket.htons(5000))
    assert pyre == p.encode_beacon(UUID, 5000)


def test_identity():
    assert p.identity_of(UUID) == b"\x01" + UUID
    assert p.uuid_of(b"\x01" + UUID) == UUID
    for bad in (UUID, b"\x02" + UUID, b"\x01" + UUID + b"x", b""):
        with pytest.raises(p.ProtocolError):
            p.uuid_of(bad)


# Frame tables, byte by byte.
TABLE = [
    (p.Hello(1, "tcp://192.0.2.1:49152", ["g1", "g2"], 3, "node", {"k": "v"}),
     [b"\xaa\xa1\x01\x02\x00\x01"
      + b"\x15tcp://192.0.2.1:49152"
      + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x02g1" + b"\x00\x00\x00\x02g2"
      + b"\x03"
      + b"\x04node"
      + b"\x00\x00\x00\x01" + b"\x01k" + b"\x00\x00\x00\x01v"]),
    (p.Whisper(0x1234, [b"a", b"bc"]), [b"\xaa\xa1\x02\x02\x12\x34", b"a", b"bc"]),
    (p.Shout(65535, "chat", [b"hi"]), [b"\xaa\xa1\x03\x02\xff\xff\x04chat", b"hi"]),
    (p.Join(7, "chat", 255), [b"\xaa\xa1\x04\x02\x00\x07\x04chat\xff"]),
    (p.Leave(8, "chat", 0), [b"\xaa\xa1\x05\x02\x00\x08\x04chat\x00"]),
    (p.Ping(9), [b"\xaa\xa1\x06\x02\x00\x09"]),
    (p.PingOk(10), [b"\xaa\xa1\x07\x02\x00\x0a"]),
    (p.Whisper(0, []), [b"\xaa\xa1\x02\x02\x00\x00"]),
]


@pytest.mark.parametrize("message,frames", TABLE)
def test_frame_table(message, frames):
    assert p.encode(message) == frames
    assert p.decode(frames) == message


def test_hot_path_helpers_match_encode():
    assert p.whisper_frames(5, [b"x"]) == p.encode(p.Whisper(5, [b"x"]))
    assert p.shout_frames(6, p.shout_head("g"), [b"y"]) == p.encode(p.Shout(6, "g", [b"y"]))


def test_decodes_what_pyre_encodes_and_back():
    from pyre.zre_msg import ZreMsg

    class Capture:
        type = 5  # zmq.DEALER

        def __init__(self):
            self.frames = []

        def send(self, data, flags=0):
            self.frames.append(data)

        def send_multipart(self, frames):
            self.frames.extend(frames)

    msg = ZreMsg(ZreMsg.HELLO)
    msg.sequence, msg.endpoint, msg.groups, msg.status, msg.name = 1, "tcp://192.0.2.9:5", ["a", "b"], 4, "py"
    msg.headers = {"X-K": "v"}
    out = Capture()
    msg.send(out)
    assert p.decode(out.frames) == p.Hello(1, "tcp://192.0.2.9:5", ["a", "b"], 4, "py", {"X-K": "v"})

    back = ZreMsg(data=p.encode(p.Hello(1, "tcp://x:1", ["g"], 2, "zactors", {"a": "b"}))[0])
    back._needle = 6 - 2  # pyre's unpack_hello starts at the sequence
    back.unpack_hello()
    assert (back.sequence, back.endpoint, back.groups, back.status, back.name, back.headers) == (
        1, "tcp://x:1", ["g"], 2, "zactors", {"a": "b"})

    shout = ZreMsg(ZreMsg.SHOUT)
    shout.sequence, shout.group, shout.content = 3, "room", [b"m1", b"m2"]
    out = Capture()
    shout.send(out)
    assert p.decode(out.frames) == p.Shout(3, "room", [b"m1", b"m2"])


@pytest.mark.parametrize("frames,error", [
    ([], p.ProtocolError),
    ([b"\xaa\xa1\x01"], p.ProtocolError),
    ([b"\xaa\xa0\x06\x02\x00\x01"], p.ProtocolError),  # signature
    ([b"\xaa\xa1\x06\x03\x00\x01"], p.ProtocolError),  # version
    ([b"\xaa\xa1\x09\x02\x00\x01"], p.UnknownMessage),
    ([b"\xaa\xa1\x06\x02\x00\x01\x00"], p.ProtocolError),  # stray byte
    ([b"\xaa\xa1\x06\x02\x00\x01", b"x"], p.ProtocolError),  # content on PING
    ([b"\xaa\xa1\x04\x02\x00\x01\x05ab"], p.ProtocolError),  # truncated string
    ([b"\xaa\xa1\x01\x02\x00\x01\x00\xff\xff\xff\xff"], p.ProtocolError),  # absurd count
    ([b"\xaa\xa1\x03\x02\x00\x01\x01\xff"], p.ProtocolError),  # group not UTF-8
])
def test_malformed(frames, error):
    with pytest.raises(error):
        p.decode(frames)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=4))
def test_fuzz_any_bytes_give_a_message_or_protocol_error(frames):
    try:
        p.decode(frames)
    except p.ProtocolError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 7), st.integers(0, 65535), st.binary(max_size=80), st.lists(st.binary(max_size=8), max_size=3))
def test_fuzz_valid_header_random_body(mid, seq, body, rest):
    frames = [b"\xaa\xa1" + bytes((mid, 2)) + seq.to_bytes(2, "big") + body] + rest
    try:
        message = p.decode(frames)
    except p.ProtocolError:
        return
    assert message.sequence == seq
    assert p.decode(p.encode(message)) == message


names = st.text(max_size=20).filter(lambda s: len(s.encode()) <= 255)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 65535), names, st.lists(st.text(max_size=10)), st.integers(0, 255), names,
       st.dictionaries(names, st.text(max_size=10), max_size=4))
def test_hello_round_trip(seq, endpoint, groups, status, name, headers):
    message = p.Hello(seq, endpoint, groups, status, name, headers)
    assert p.decode(p.encode(message)) == message
