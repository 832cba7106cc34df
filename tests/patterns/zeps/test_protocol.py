"""The ZEPS codec against the ABNF (exact bytes per command), and against byte soup."""
import struct

import pytest
from hypothesis import given, settings, strategies as st

from zactors.patterns.zeps import protocol as p
from zactors.patterns.zeps.protocol import ProtocolError, decode, encode

pytestmark = pytest.mark.timeout(120)

SIG = b"\xaa\xa5"

# (message, exact frame), from the ABNF's fields
TABLE = [
    (p.Attach(b"orders", 1), SIG + b"\x01" + b"\x04ZEPS" + b"\x00\x01" + b"\x06orders"),
    (p.AttachOk(), SIG + b"\x02"),
    (p.Subscribe(b"eu.", 0), SIG + b"\x03" + b"\x03eu." + b"\x00" * 8),
    (p.Subscribe(b"", p.NEW), SIG + b"\x03" + b"\x00" + b"\xff" * 8),
    (p.SubscribeOk(), SIG + b"\x04"),
    (p.Credit(0x0102030405060708), SIG + b"\x05" + bytes(range(1, 9))),
    (p.Publish(b"k", b"body"), SIG + b"\x06" + b"\x01k" + b"\x00\x00\x00\x04body"),
    (p.Publish(b"", b""), SIG + b"\x06" + b"\x00" + b"\x00\x00\x00\x00"),
    (p.Deliver(258, b"ab", b"xyz"), SIG + b"\x07" + b"\x00" * 6 + b"\x01\x02" + b"\x02ab" + b"\x00\x00\x00\x03xyz"),
    (p.Ping(), SIG + b"\x08"),
    (p.PingOk(), SIG + b"\x09"),
    (p.Detach(), SIG + b"\x0a"),
    (p.DetachOk(), SIG + b"\x0b"),
    (p.Invalid("no such thing"), SIG + b"\x0c" + b"\x0dno such thing"),
    (p.SubscribeSince(b"x", 1_700_000_000_000_000),
     SIG + b"\x0d" + b"\x01x" + struct.pack(">Q", 1_700_000_000_000_000)),
    (p.Query(), SIG + b"\x0e"),
    (p.QueryOk(b'{"a":1}'), SIG + b"\x0f" + b"\x00\x00\x00\x07" + b'{"a":1}'),
    (p.McDeliver(b"s", 5, b"k", b"v"),
     SIG + b"\x10" + b"\x01s" + b"\x00" * 7 + b"\x05" + b"\x01k" + b"\x00\x00\x00\x01v"),
    (p.McHead(b"s", 5), SIG + b"\x11" + b"\x01s" + b"\x00" * 7 + b"\x05"),
    (p.Features(b"gaps"), SIG + b"\x12" + b"\x04gaps"),
    (p.Gap(1, 4428), SIG + b"\x13" + b"\x00" * 7 + b"\x01" + struct.pack(">Q", 4428)),
    (p.Epoch(2 ** 64 - 1, 7), SIG + b"\x15" + b"\xff" * 8 + struct.pack(">Q", 7)),
    (p.PublishId(7, 2, b"k", b"body"), SIG + b"\x14" + struct.pack(">QQ", 7, 2) + b"\x01k" + b"\x00\x00\x00\x04body"),
]


@pytest.mark.parametrize("message, frame", TABLE, ids=[type(m).__name__ for m, _ in TABLE])
def test_exact_bytes_both_ways(message, frame):
    assert encode(message) == frame
    assert decode(frame) == message
    assert type(decode(frame)) is type(message)


def test_helper_encoders_match_the_table():
    assert p.attach("orders") == TABLE[0][1]
    assert p.subscribe(b"eu.", 0) == TABLE[2][1]
    assert p.credit(0x0102030405060708) == TABLE[5][1]
    assert p.publish("k", b"body") == TABLE[6][1]
    assert p.deliver(258, b"ab", b"xyz") == TABLE[8][1]
    assert p.subscribe_since(b"x", 1_700_000_000.0) == TABLE[14][1]
    assert p.PING_FRAME == SIG + b"\x08" and p.DETACH_OK_FRAME == SIG + b"\x0b"


def test_deliver_cost_is_the_encoded_size():
    for key, body in ((b"", b""), (b"a.b", b"x" * 100), (b"k" * 255, b"y" * 70000)):
        assert p.deliver_cost(key, body) == len(p.deliver(1, key, body))


def test_command_ids_are_the_specs():
    assert [p.ATTACH, p.ATTACH_OK, p.SUBSCRIBE, p.SUBSCRIBE_OK, p.CREDIT, p.PUBLISH, p.DELIVER, p.PING,
            p.PING_OK, p.DETACH, p.DETACH_OK, p.INVALID] == list(range(1, 13))


@pytest.mark.parametrize("frame, reason", [
    (b"", "at least 3 bytes"),
    (b"\xaa\xa5", "at least 3 bytes"),
    (b"\xaa\xa6\x08", "bad signature"),
    (SIG + b"\x00", "unknown command id 0"),
    (SIG + b"\x17", "unknown command id 23"),
    (SIG + b"\x15" + b"\x00" * 8, "EPOCH seq: needs 8 bytes"),
    (SIG + b"\x14" + struct.pack(">QQ", 1, 1) + b"\x01k\x00\x00\x00\x05abc", "PUBLISH-ID body: length 5"),
    (SIG + b"\x12", "FEATURES features: missing"),
    (SIG + b"\x13" + struct.pack(">QQ", 5, 4), "GAP first 5 is after last 4"),
    (SIG + b"\x08x", "unexpected byte"),
    (SIG + b"\x01\x04ZEPX\x00\x01\x01s", "protocol must be"),
    (SIG + b"\x01\x04ZEPS\x00\x01\x00", "must not be empty"),
    (SIG + b"\x01\x04ZEPS\x00\x01\x02a\x01", "printable"),
    (SIG + b"\x01\x04ZEPS\x00", "version"),
    (SIG + b"\x03\x05ab", "runs past the end"),
    (SIG + b"\x03\x01a\x00\x00", "latest: needs 8 bytes"),
    (SIG + b"\x05\x00", "credit: needs 8 bytes"),
    (SIG + b"\x06\x01k\x00\x00\x00\x05abc", "length 5 but 3"),
    (SIG + b"\x06\x01k\x00\x00\x00\x01abc", "length 1 but 3"),
    (SIG + b"\x06", "key: missing"),
    (SIG + b"\x0c\x01\x07", "printable"),
])
def test_malformed_frames_have_readable_reasons(frame, reason):
    with pytest.raises(ProtocolError, match=reason):
        decode(frame)


def test_encoders_refuse_out_of_range_values():
    with pytest.raises(ValueError):
        p.attach("s" * 256)
    with pytest.raises(ValueError):
        p.publish(b"k" * 256, b"")
    with pytest.raises(ValueError):
        p.credit(-1)
    with pytest.raises(ValueError):
        p.subscribe(b"", 2 ** 64)
    assert len(decode(p.invalid("\x00" + "é" * 300)).reason) == 255


# -- hypothesis ------------------------------------------------------------------------
u64 = st.integers(0, 2 ** 64 - 1)
short = st.binary(max_size=255)
text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=255)
messages = st.one_of(
    st.builds(p.Attach, text.filter(bool).map(str.encode), st.integers(0, 65535), st.booleans()),
    st.builds(p.Subscribe, short, u64),
    st.builds(p.SubscribeSince, short, u64),
    st.builds(p.Credit, u64),
    st.builds(p.Publish, short, st.binary(max_size=2000)),
    st.builds(p.Deliver, u64, short, st.binary(max_size=2000)),
    st.builds(p.Invalid, text),
    st.builds(p.QueryOk, st.binary(max_size=200)),
    st.builds(p.McDeliver, short, u64, short, st.binary(max_size=500)),
    st.builds(p.McHead, short, u64),
    st.sampled_from([p.AttachOk(), p.SubscribeOk(), p.Ping(), p.PingOk(), p.Detach(), p.DetachOk(), p.Query()]),
)


@settings(max_examples=500, deadline=None)
@given(messages)
def test_round_trip(message):
    assert decode(encode(message)) == message


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=64))
def test_byte_soup_decodes_or_raises_protocol_error(frame):
    try:
        decode(frame)
    except ProtocolError as exc:
        assert str(exc)


@settings(max_examples=1000, deadline=None)
@given(messages, st.data())
def test_mutated_valid_frames_decode_or_raise_protocol_error(message, data):
    frame = bytearray(encode(message))
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "cut", "grow"]))
        if action == "flip" and frame:
            i = data.draw(st.integers(0, len(frame) - 1))
            frame[i] ^= data.draw(st.integers(1, 255))
        elif action == "cut" and frame:
            del frame[data.draw(st.integers(0, len(frame) - 1)):]
        else:
            frame += data.draw(st.binary(min_size=1, max_size=8))
    try:
        decode(bytes(frame))
    except ProtocolError:
        pass


@settings(max_examples=1000, deadline=None)
@given(messages, st.data())
def test_parse_publish_is_decodes_publish(message, data):
    """One PUBLISH parser: the broker's hot path takes a frame exactly when decode makes it a Publish."""
    frame = bytearray(encode(message))
    if data.draw(st.booleans()) and frame:
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] ^= data.draw(st.integers(1, 255))
    frame = bytes(frame)
    try:
        decoded = decode(frame)
    except ProtocolError:
        decoded = None
    parsed = p.parse_publish(frame)
    if type(decoded) is p.Publish:
        assert parsed == tuple(decoded)
    else:
        assert parsed is None
