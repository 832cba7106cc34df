"""The journal's record codec: the C extension and its pure-Python twin behave identically."""
import struct

import crc32c
import pytest
from hypothesis import given, settings, strategies as st

from zactors.actors import journal_codec as codec
from zactors.actors.journal import Record
from zactors.actors.purepython import pure_python_requested

from tests import ctoolchain

pytestmark = pytest.mark.timeout(120)

try:  # imported directly: both twins are tested whatever ZACTORS_PURE_PYTHON says
    from zactors.actors import _journal
    _journal.bind(Record)
except ImportError:
    _journal = None

IMPLEMENTATIONS = [pytest.param((codec.py_frame, codec.py_decode, codec.py_crc), id="python")]
if _journal is not None:
    IMPLEMENTATIONS.append(pytest.param((_journal.frame, _journal.decode, _journal.crc), id="c"))
DECODERS = [codec.py_decode] + ([_journal.decode] if _journal is not None else [])


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request):
    return request.param


@pytest.mark.skipif(pure_python_requested(), reason="pure Python asked for")
@pytest.mark.skipif(bool(ctoolchain.missing()), reason="pure Python: %s" % ctoolchain.missing())
def test_the_c_codec_is_built_and_used():
    # the wheel and the editable install both build it; a missing compiler would silently cost 2x
    assert _journal is not None and codec.SPEEDUPS and codec.frame is _journal.frame


def test_frame_is_the_file_format(impl):
    frame, _, _ = impl
    buf = bytearray(b"head")
    record = frame(buf, 7, 1.5, b"key", b"body!")
    assert type(record) is Record and record == (7, 1.5, b"key", b"body!")
    payload = struct.pack("<QdI", 7, 1.5, 3) + b"key" + struct.pack("<I", 5) + b"body!"
    assert bytes(buf) == b"head" + struct.pack("<II", len(payload), crc32c.crc32c(payload)) + payload


def test_frame_refuses_what_is_not_bytes(impl):
    frame, _, _ = impl
    with pytest.raises(TypeError):
        frame(bytearray(), 1, 0.0, "key", b"")
    with pytest.raises(TypeError):
        frame(b"", 1, 0.0, b"key", b"")


def test_crc_is_crc32c(impl):
    _, _, crc = impl
    data = bytes(range(256)) * 5
    for n in (0, 1, 7, 8, 9, 63, 1280):
        assert crc(data[:n]) == crc32c.crc32c(data[:n])
        assert crc(memoryview(data)[3:n + 3]) == crc32c.crc32c(data[3:n + 3])
    assert crc(data[100:], crc(data[:100])) == crc32c.crc32c(data)


def _records(draw_list):
    buf = bytearray()
    recs = []
    for i, (key, body) in enumerate(draw_list):
        codec.py_frame(buf, 10 + i, 1000.0 + i, key, body)
        recs.append(Record(10 + i, 1000.0 + i, key, body))
    return bytes(buf), recs


records_st = st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=300)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(items=records_st, lo=st.integers(0, 35), hi=st.integers(0, 35), max_out=st.integers(1, 25),
       budget=st.integers(0, 4000), verify=st.integers(-1, 3000), cut=st.integers(0, 6000))
def test_decode_twins_agree(items, lo, hi, max_out, budget, verify, cut):
    data, recs = _records(items)
    data = data[:cut]
    results = []
    for decode in DECODERS:
        out = []
        res = decode(data, 0, out, lo, hi, max_out, budget, verify)
        results.append((res, out))
        for rec in out:
            assert type(rec) is Record
    assert all(r == results[0] for r in results)
    (at, total, status), out = results[0]
    expected = [r for r in recs if lo <= r.seq <= hi]
    assert out == expected[:len(out)]
    assert total == sum(len(r.key) + len(r.body) for r in out)
    assert status in (0, 1)


@settings(max_examples=200, deadline=None)
@given(items=records_st.filter(bool), flip=st.integers(0, 1 << 20), bit=st.integers(0, 7))
def test_decode_finds_any_corruption(items, flip, bit):
    data, recs = _records(items)
    bad = bytearray(data)
    i = flip % len(bad)
    bad[i] ^= 1 << bit
    bad = bytes(bad)
    results = []
    for decode in DECODERS:
        out = []
        res = decode(bad, 0, out, 0, 1 << 63, 1000, 1 << 40, 0)
        results.append((res, out))
    assert all(r == results[0] for r in results)
    (at, total, status), out = results[0]
    # every record returned is intact (a flip is caught by the length, key length or CRC checks)
    assert out == recs[:len(out)]
    assert len(out) < len(recs)


def test_decode_skips_earlier_records_and_stops_past_to_seq(impl):
    frame, decode, _ = impl
    buf = bytearray()
    for i in range(1, 11):
        frame(buf, i, float(i), b"k%d" % i, b"v" * i)
    out = []
    at, total, status = decode(bytes(buf), 0, out, 4, 6, 100, 1 << 30, 0)
    assert [r.seq for r in out] == [4, 5, 6] and status == 1 and total == sum(2 + i for i in (4, 5, 6))
    out = []
    at, total, status = decode(bytes(buf), 0, out, 1, 100, 3, 1 << 30, 0)
    assert [r.seq for r in out] == [1, 2, 3] and status == 1
    rest = []
    assert decode(bytes(buf), at, rest, 1, 100, 100, 1 << 30, 0)[2] == 0 and [r.seq for r in rest] == list(range(4, 11))


@pytest.mark.parametrize("decode", DECODERS)
def test_decode_refuses_a_body_length_that_disagrees_with_the_record_length(decode):
    """The walker recovery scans with: a record whose CRC is right but whose
    body length field is not (a writer bug) is corrupt, not read short."""
    buf = bytearray()
    codec.py_frame(buf, 1, 1.0, b"key", b"body")
    good = len(buf)
    payload = struct.pack("<QdI", 2, 1.0, 3) + b"key" + struct.pack("<I", 3) + b"body"   # says 3, holds 4
    buf += struct.pack("<II", len(payload), crc32c.crc32c(payload)) + payload
    out = []
    assert decode(bytes(buf), 0, out, 0, 10, 10, 1 << 20, 0) == (good, len(b"keybody"), 2)
    assert [r.seq for r in out] == [1]


def test_recovery_cuts_that_record_and_names_it(tmp_path):
    from zactors.actors.journal import Journal
    with Journal(tmp_path) as j:
        j.append(b"k", b"v")
    seg = next(p for p in tmp_path.iterdir() if p.suffix == ".seg")
    payload = struct.pack("<QdI", 2, 2.0 ** 40, 1) + b"k" + struct.pack("<I", 9) + b"v"
    with open(seg, "ab") as f:
        f.write(struct.pack("<II", len(payload), crc32c.crc32c(payload)) + payload)
    with Journal(tmp_path) as j:
        assert j.last_seq == 1 and j.stats()["crc_errors"] == 1 and j.epoch == 2
