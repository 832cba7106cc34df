"""The pipe codec: one msgpack frame [verb, request_id, args...]."""
import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from zactors.actors.errors import PipeError
from zactors.actors.pipe import decode, encode

values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=10)


@given(st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12),
       st.integers(0, 2**32), st.lists(values, max_size=5))
def test_round_trip(verb, request_id, args):
    assert decode(encode(verb, request_id, args)) == (verb, request_id, args)


def test_wire_layout_is_a_msgpack_array():
    frame = encode("ADD", 7, [1, b"\x00raw", "text"])
    assert msgpack.unpackb(frame, raw=False) == ["ADD", 7, 1, b"\x00raw", "text"]


@pytest.mark.parametrize("frame", [
    b"", b"\xc1", msgpack.packb(5), msgpack.packb(["ADD"]), msgpack.packb([b"ADD", 1]),
    msgpack.packb(["", 1]), msgpack.packb(["ADD", "1"]), msgpack.packb({"verb": "ADD"}),
])
def test_malformed_frames_raise_pipe_error(frame):
    with pytest.raises(PipeError):
        decode(frame)


@settings(max_examples=500)
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_pipe_error(data):
    try:
        verb, request_id, args = decode(data)
    except PipeError:
        return
    assert isinstance(verb, str) and verb and isinstance(request_id, int) and isinstance(args, list)
