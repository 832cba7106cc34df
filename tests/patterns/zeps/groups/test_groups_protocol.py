"""The consumer-group codec against its ABNF table (exact bytes), the doc's command table, and hostile values."""
import re
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from zactors.patterns.zeps import groups_protocol as g
from zactors.patterns.zeps import protocol as p
from zactors.patterns.zeps.protocol import ProtocolError

pytestmark = pytest.mark.timeout(120)

SIG = b"\xaa\xa5"
DOC = Path(__file__).resolve().parents[4] / "docs" / "zeps-extensions.md"

TABLE = [
    (g.Join(b"workers", b"eu.", g.START_SEQ, 7, 30000, 5),
     SIG + b"\x28" + b"\x07workers" + b"\x03eu." + b"\x02" + struct.pack(">QIH", 7, 30000, 5)),
    (g.Join(b"w", b"", g.START_EARLIEST, 0, 0, 0), SIG + b"\x28" + b"\x01w" + b"\x00" + b"\x00" + bytes(14)),
    (g.JoinOk(2 ** 64 - 1), SIG + b"\x29" + b"\xff" * 8),
    (g.GroupDeliver(258, 3, b"ab", b"xyz"),
     SIG + b"\x2a" + struct.pack(">QH", 258, 3) + b"\x02ab" + b"\x00\x00\x00\x03xyz"),
    (g.Ack(((5, 5),)), SIG + b"\x2b" + b"\x00\x01" + struct.pack(">QQ", 5, 5)),
    (g.Ack(((1, 3), (9, 12))), SIG + b"\x2b" + b"\x00\x02" + struct.pack(">QQQQ", 1, 3, 9, 12)),
    (g.Nack(9, 250), SIG + b"\x2c" + struct.pack(">QI", 9, 250)),
    (g.Claim(1000, 16), SIG + b"\x2d" + struct.pack(">IH", 1000, 16)),
    (g.Groups(b""), SIG + b"\x2e" + b"\x00"),
    (g.GroupsOk(b'{"a":1}'), SIG + b"\x2f" + b"\x00\x00\x00\x07" + b'{"a":1}'),
    (g.GroupDelete(b"w"), SIG + b"\x30" + b"\x01w"),
    (g.GroupDeleted(b"w"), SIG + b"\x31" + b"\x01w"),
]


@pytest.mark.parametrize("message,frame", TABLE, ids=[type(m).__name__ for m, _ in TABLE])
def test_encode_decode_exact_bytes(message, frame):
    assert g.encode(message) == frame
    assert g.decode(frame) == message
    assert g.is_group_command(frame)


def test_every_command_is_in_the_doc_table_and_abnf():
    """The doc's command table names the codec's ids, and its ABNF each command's id."""
    text = DOC.read_text()
    section = text[text.index("## consumer groups"):]
    rows = dict((int(i), name) for i, name in re.findall(r"^\| (\d+) \| ([A-Z-]+) \|", section, re.M))
    assert rows == g.NAMES
    for command, name in g.NAMES.items():
        assert re.search(r"^%s\s+= signature %%d%d\b" % (name.lower().replace("-", "_"), command), section, re.M), name
    assert set(type(m).id for m, _ in TABLE) == set(g.NAMES)


def test_ids_do_not_collide_with_the_base_protocol():
    assert not set(g.NAMES) & set(p.NAMES)
    for _, frame in TABLE:  # the base decoder refuses them: a spec-only peer would see INVALID, never these
        with pytest.raises(ProtocolError):
            p.decode(frame)


@pytest.mark.parametrize("frame,words", [
    (SIG + b"\x28" + b"\x00" + b"\x00\x00" + bytes(14), "group"),                         # empty group
    (SIG + b"\x28" + b"\x01\x07" + b"\x00\x00" + bytes(14), "printable"),                 # unprintable group
    (SIG + b"\x28" + b"\x01w" + b"\x00\x09" + bytes(14), "start"),                        # start 9
    (SIG + b"\x28" + b"\x01w" + b"\x00\x00" + bytes(13), "needs"),                        # short
    (SIG + b"\x2b" + b"\x00\x00", "ranges"),                                              # 0 ranges
    (SIG + b"\x2b" + b"\x04\x01" + bytes(16), "ranges"),                                  # 1025 ranges
    (SIG + b"\x2b" + b"\x00\x02" + struct.pack(">QQ", 1, 1), "need"),                     # one range short
    (SIG + b"\x2b" + b"\x00\x01" + struct.pack(">QQ", 5, 4), "first"),                    # first > last
    (SIG + b"\x2b" + b"\x00\x01" + struct.pack(">QQ", 0, 4), "start at 1"),               # sequence 0
    (SIG + b"\x2c" + struct.pack(">QI", 1, 1) + b"x", "unexpected"),                      # trailing byte
    (SIG + b"\x2a" + struct.pack(">QH", 1, 1) + b"\x00" + b"\x00\x00\x00\x05ab", "length 5"),
    (SIG + b"\x29", "needs"),
    (SIG + b"\x32", "not a ZEPS group"),                                                  # id 50
    (b"\xaa\xa4\x28", "not a ZEPS group"),
])
def test_malformed_frames_say_what_is_wrong(frame, words):
    with pytest.raises(ProtocolError, match=words):
        g.decode(frame)


def test_encoders_refuse_values_that_do_not_fit():
    with pytest.raises(ValueError):
        g.join(b"", b"")
    with pytest.raises(ValueError):
        g.join(b"w", b"x" * 256)
    with pytest.raises(ValueError):
        g.join(b"w", start=4)
    with pytest.raises(ValueError):
        g.ack([])
    with pytest.raises(ValueError):
        g.ack(range(1, g.MAX_RANGES + 2))
    with pytest.raises(ValueError):
        g.ack([(3, 2)])
    with pytest.raises(ValueError):
        g.nack(1, delay=2 ** 32)
    with pytest.raises(ValueError):
        g.claim(-1, 1)


_u64 = st.integers(0, 2 ** 64 - 1)
_name = st.binary(min_size=1, max_size=255).filter(lambda b: b.isascii() and b.decode().isprintable())
_messages = st.one_of(
    st.builds(g.Join, _name, st.binary(max_size=255), st.integers(0, 3), _u64, st.integers(0, 2 ** 32 - 1),
              st.integers(0, 2 ** 16 - 1)),
    st.builds(g.JoinOk, _u64),
    st.builds(g.GroupDeliver, _u64, st.integers(0, 2 ** 16 - 1), st.binary(max_size=255), st.binary(max_size=4096)),
    st.builds(lambda pairs: g.Ack(tuple((min(a, b), max(a, b)) for a, b in pairs)),
              st.lists(st.tuples(st.integers(1, 2 ** 64 - 1), st.integers(1, 2 ** 64 - 1)), min_size=1, max_size=64)),
    st.builds(g.Nack, _u64, st.integers(0, 2 ** 32 - 1)),
    st.builds(g.Claim, st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 16 - 1)),
    st.builds(g.Groups, st.binary(max_size=255)),
    st.builds(g.GroupsOk, st.binary(max_size=4096)),
    st.builds(g.GroupDelete, _name),
    st.builds(g.GroupDeleted, _name),
)


@settings(max_examples=400, deadline=None)
@given(_messages)
def test_round_trip_of_hostile_well_formed_values(message):
    """Extreme but well-formed values (2**64-1 sequences, 255-byte names, 1024-range acks) round-trip."""
    frame = g.encode(message)
    assert g.decode(frame) == message


@settings(max_examples=400, deadline=None)
@given(st.integers(40, 49), st.binary(max_size=64))
def test_byte_soup_raises_protocol_error_only(command, tail):
    try:
        g.decode(SIG + bytes([command]) + tail)
    except ProtocolError:
        pass
