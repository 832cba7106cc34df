"""The CHP codec against the spec's frame tables, the Guide's dialect, and hostile input."""
import pytest
from hypothesis import given, settings, strategies as st

from zactors.patterns.clone.protocol import (
    GUIDE, HUGZ, ICANHAZ, KTHXBAI, SPEC, BadCommand, BadFrames, BadKey, BadProperties, BadSequence, BadSubtree,
    BadUUID, KVMsg, ProtocolError, check_subtree, decode_icanhaz, decode_kvmsg, decode_kvset, decode_properties,
    dialect, encode_icanhaz, encode_kthxbai, encode_kvmsg, encode_properties, parse_ttl,
)

pytestmark = pytest.mark.timeout(120)

UUID = bytes(range(16))


# -- the frame tables ---------------------------------------------------------------
def test_icanhaz_frames():
    assert encode_icanhaz(b"/client/") == [b"ICANHAZ?", b"/client/"]
    assert encode_icanhaz() == [b"ICANHAZ?", b""]
    assert decode_icanhaz([b"ICANHAZ?", b"/a/b/"]) == b"/a/b/"


def test_kvsync_frames_spec():
    assert encode_kvmsg(b"k", 7, b"v") == [b"k", b"\x00" * 7 + b"\x07", b"", b"", b"v"]


def test_kthxbai_frames():
    assert encode_kthxbai(0x0102, b"/x/") == [b"KTHXBAI", b"\x00" * 6 + b"\x01\x02", b"", b"", b"/x/"]


def test_kvpub_and_kvset_frames():
    frames = encode_kvmsg(b"key", 2 ** 64 - 1, b"value", UUID, b"ttl=5\n")
    assert frames == [b"key", b"\xff" * 8, UUID, b"ttl=5\n", b"value"]
    msg = decode_kvmsg(frames)
    assert (msg.key, msg.sequence, msg.uuid, msg.props, msg.value) == (b"key", 2 ** 64 - 1, UUID, {"ttl": "5"}, b"value")


def test_hugz_frames():
    assert SPEC.hugz(99) == [b"HUGZ", b"\x00" * 8, b"", b"", b""]
    assert GUIDE.hugz(99, UUID) == [b"HUGZ", b"\x00" * 7 + b"\x63", UUID, b"", b""]


def test_empty_value_is_a_delete_on_the_wire():
    msg, ttl = decode_kvset([b"k", b"\x00" * 8, UUID, b"", b""])
    assert msg.value == b"" and ttl is None


def test_dialect_names():
    assert dialect("spec") is SPEC and dialect("guide") is GUIDE
    with pytest.raises(ValueError):
        dialect("other")


# -- properties and ttl -------------------------------------------------------------
def test_properties_round_trip_and_guide_format():
    frame = encode_properties({"ttl": "2.5", "owner": b"me"})
    assert frame == b"ttl=2.5\nowner=me\n"  # the Guide's kvmsg writes name=value\n
    assert decode_properties(frame) == {"ttl": "2.5", "owner": "me"}
    assert decode_properties(b"a=1") == {"a": "1"}  # no trailing newline
    assert decode_properties(b"") == {}


@pytest.mark.parametrize("frame", [b"novalue\n", b"=x\n", b"a b=1\n", b"a=\x01\n", b"a=1\n\n", b"x" * 5000,
                                   b"".join(b"p%d=1\n" % i for i in range(40))])
def test_bad_properties(frame):
    with pytest.raises(BadProperties):
        decode_properties(frame)


def test_encode_rejects_bad_properties():
    for props in ({"a b": "1"}, {"a": "x\ny"}, {"p%d" % i: "1" for i in range(40)}):
        with pytest.raises(BadProperties):
            encode_properties(props)


def test_ttl():
    assert parse_ttl({"ttl": "30"}) == 30.0
    assert parse_ttl({"ttl": "0.25"}) == 0.25
    assert parse_ttl({"ttl": "0"}) is None  # the Guide's "no ttl"
    assert parse_ttl({}) is None
    for bad in ("x", "-1", "nan", "inf", "1e99"):
        with pytest.raises(BadProperties):
            parse_ttl({"ttl": bad})
    assert decode_kvset([b"k", b"\x00" * 8, UUID, b"ttl=1.5\n", b"v"])[1] == 1.5


# -- subtrees --------------------------------------------------------------------------
@pytest.mark.parametrize("subtree", [b"", b"/a/", b"/client/", b"/a/b/c/", "/str/"])
def test_good_subtrees(subtree):
    assert check_subtree(subtree) == (subtree.encode() if isinstance(subtree, str) else subtree)


@pytest.mark.parametrize("subtree", [b"/", b"//", b"a/", b"/a", b"/a//b/", b"/a b/", b"/\x00/", b"/" + b"a" * 2000 + b"/", 5])
def test_bad_subtrees(subtree):
    with pytest.raises(BadSubtree):
        check_subtree(subtree)


# -- typed errors -------------------------------------------------------------------
@pytest.mark.parametrize("frames, error", [
    ([b"ICANHAZ?"], BadFrames),
    ([b"ICANHAZ?", b"", b""], BadFrames),
    ([b"GIMME", b""], BadCommand),
    ([b"ICANHAZ?", b"/bad"], BadSubtree),
])
def test_icanhaz_errors(frames, error):
    with pytest.raises(error):
        decode_icanhaz(frames)


@pytest.mark.parametrize("frames, error", [
    ([b"k", b"\x00" * 8, b"", b""], BadFrames),
    ([b"", b"\x00" * 8, b"", b"", b"v"], BadKey),
    ([b"k" * 2000, b"\x00" * 8, b"", b"", b"v"], BadKey),
    ([b"HUGZ", b"\x00" * 8, b"", b"", b"v"], BadKey),
    ([b"KTHXBAI", b"\x00" * 8, b"", b"", b"v"], BadKey),
    ([b"k", b"\x00" * 4, b"", b"", b"v"], BadSequence),
    ([b"k", b"\x00" * 8, b"\x01" * 15, b"", b"v"], BadUUID),
    ([b"k", b"\x00" * 8, b"", b"ttl=abc\n", b"v"], BadProperties),
    ([b"k", b"\x00" * 8, b"", b"junk", b"v"], BadProperties),
])
def test_kvset_errors(frames, error):
    with pytest.raises(error):
        decode_kvset(frames)


def test_errors_are_value_errors():
    assert issubclass(ProtocolError, ValueError)
    for error in (BadFrames, BadCommand, BadKey, BadSequence, BadUUID, BadProperties, BadSubtree):
        assert issubclass(error, ProtocolError)


# -- hypothesis ---------------------------------------------------------------------
keys = st.binary(min_size=1, max_size=64).filter(lambda k: k not in (ICANHAZ, KTHXBAI, HUGZ))
names = st.from_regex(r"[A-Za-z0-9_.\-]{1,16}", fullmatch=True)
values = st.from_regex(r"[\x20-\x7e]{0,20}", fullmatch=True)
props = st.dictionaries(names, values, max_size=8)


@settings(max_examples=300, deadline=None)
@given(keys, st.integers(0, 2 ** 64 - 1), st.sampled_from([b"", UUID]), props, st.binary(max_size=200))
def test_kvmsg_round_trip(key, seq, uuid, properties, value):
    frame = encode_properties(properties)
    msg = decode_kvmsg(encode_kvmsg(key, seq, value, uuid, frame))
    assert (msg.key, msg.sequence, msg.uuid, msg.value) == (key, seq, uuid, value)
    assert msg.props == properties
    assert msg == KVMsg(key, seq, uuid, frame, value)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.from_regex(r"[a-z0-9_\-]{1,8}", fullmatch=True), min_size=1, max_size=5))
def test_subtree_round_trip(segments):
    subtree = ("/" + "/".join(segments) + "/").encode()
    assert decode_icanhaz(encode_icanhaz(subtree)) == subtree


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=7))
def test_byte_soup_only_raises_protocol_errors(frames):
    for decode in (decode_kvmsg, decode_kvset, decode_icanhaz):
        try:
            decode(frames)
        except ProtocolError:
            pass


@settings(max_examples=300, deadline=None)
@given(keys, st.binary(max_size=8), st.binary(max_size=20), st.binary(max_size=80), st.binary(max_size=20))
def test_hostile_five_frames_only_raise_protocol_errors(key, seq, uuid, properties, value):
    try:
        msg, ttl = decode_kvset([key, seq, uuid, properties, value])
    except ProtocolError:
        return
    assert len(msg.uuid) in (0, 16) and (ttl is None or ttl > 0)
