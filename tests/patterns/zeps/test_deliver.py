"""DELIVER batches: the C extension and its pure-Python twin agree, and both speak the spec's wire."""

import pytest
from hypothesis import given, settings, strategies as st

from zactors.actors.journal import Record
from zactors.patterns.zeps import deliver, protocol as p
from zactors.patterns.zeps.client import Message
from zactors.patterns.zeps.matcher import Filter
from zactors.actors.purepython import pure_python_requested

from tests import ctoolchain

pytestmark = pytest.mark.timeout(120)

try:  # imported directly: both twins are tested whatever ZACTORS_PURE_PYTHON says
    from zactors.patterns.zeps import _deliver
    _deliver.bind(Message)
except ImportError:
    _deliver = None

TWINS = [deliver.py_frames] + ([_deliver.frames] if _deliver is not None else [])


@pytest.mark.skipif(pure_python_requested(), reason="pure Python asked for")
@pytest.mark.skipif(bool(ctoolchain.missing()), reason="pure Python: %s" % ctoolchain.missing())
def test_the_c_version_is_built_and_used():
    assert _deliver is not None and deliver.SPEEDUPS and deliver.frames is _deliver.frames


@pytest.mark.parametrize("frames", TWINS)
def test_frames_are_deliver_frames(frames):
    records = [Record(5, 1.0, b"a.1", b"x"), Record(6, 2.0, b"b.1", b""), Record(7, 3.0, b"a.2", b"yz")]
    out, credit, consumed, short = frames(records, 0, 100, 1000, (b"a.",))
    assert out == [p.deliver(5, b"a.1", b"x"), p.deliver(7, b"a.2", b"yz")]
    assert p.decode(out[1]) == p.Deliver(7, b"a.2", b"yz")
    assert credit == 1000 - sum(map(len, out)) and consumed == 3 and not short


@pytest.mark.parametrize("frames", TWINS)
def test_frames_stop_at_the_limit_and_the_credit(frames):
    records = [Record(i, 0.0, b"k", b"v" * 10) for i in range(1, 11)]
    out, credit, consumed, short = frames(records, 2, 5, 10 ** 6, None)
    assert [p.decode(f).sequence for f in out] == [3, 4, 5] and consumed == 5 and not short
    cost = p.deliver_cost(b"k", b"v" * 10)
    out, credit, consumed, short = frames(records, 0, 100, 2 * cost + cost - 1, None)
    assert len(out) == 2 and credit == cost - 1 and consumed == 2 and short


def test_matcher_of():
    flt = Filter()
    flt.add(b"a.")
    assert deliver.matcher_of(flt) == (b"a.",)
    flt.add(b"")
    assert deliver.matcher_of(flt) is None
    flt.add(b"re:b")
    assert deliver.matcher_of(flt) is flt


@settings(max_examples=200, deadline=None)
@given(items=st.lists(st.tuples(st.binary(max_size=12), st.binary(max_size=64)), max_size=30),
       start=st.integers(-2, 32), limit=st.integers(0, 40), credit=st.integers(0, 3000),
       kind=st.sampled_from(["all", "prefixes", "regex"]), prefixes=st.lists(st.binary(max_size=3), max_size=3))
def test_twins_agree_on_hostile_keys(items, start, limit, credit, kind, prefixes):
    records = [Record(i + 1, 0.0, k, b) for i, (k, b) in enumerate(items)]
    flt = Filter()
    for x in prefixes:
        flt.add(x)
    if kind == "regex":
        flt.add(b"re:\\x00")
    match = None if kind == "all" else deliver.matcher_of(flt) if kind == "prefixes" and prefixes else flt
    results = [f(records, start, limit, credit, match) for f in TWINS]
    results = [(a, b, c, bool(d)) for a, b, c, d in results]
    assert all(r == results[0] for r in results)
    out, left, consumed, short = results[0]
    chosen = [r for r in records[max(start, 0):consumed] if match is None or flt(r.key)]
    assert [p.decode(f) for f in out] == [p.Deliver(r.seq, r.key, r.body) for r in chosen]
    assert left == credit - sum(map(len, out)) >= 0


PARSERS = [deliver.py_parse] + ([_deliver.parse] if _deliver is not None else [])


@pytest.mark.parametrize("parse", PARSERS)
def test_parse_stops_at_a_command_and_drops_duplicates(parse):
    frames = [p.deliver(3, b"k", b"a"), p.deliver(3, b"k", b"dup"), p.deliver(5, b"", b""), p.PING_FRAME,
              p.deliver(4, b"k", b"old"), p.deliver(6, b"k2", b"b")]
    messages, last, size, i, dups = parse(frames, 0, -1)
    assert messages == [(3, b"k", b"a"), (5, b"", b"")] and type(messages[0]) is Message
    assert last == 5 and i == 3 and dups == 1 and size == len(frames[0]) + len(frames[2])
    messages, last, size, i, dups = parse(frames, 4, last)
    assert messages == [(6, b"k2", b"b")] and last == 6 and i == 6 and dups == 1
    assert parse(frames, 0, 2 ** 64 - 2)[1] == 2 ** 64 - 2  # a huge last survives the round trip


frames_st = st.lists(st.one_of(
    st.builds(p.deliver, st.integers(0, 2 ** 64 - 1), st.binary(max_size=255), st.binary(max_size=50)),
    st.builds(p.deliver, st.integers(0, 20), st.binary(max_size=5), st.binary(max_size=5)),
    st.sampled_from([p.PING_FRAME, p.DETACH_FRAME, b"", b"\xaa\xa5\x07"]),
    st.binary(max_size=40).map(lambda b: b"\xaa\xa5\x07" + b)), max_size=20)


@settings(max_examples=300, deadline=None)
@given(frames=frames_st, start=st.integers(-1, 22), last=st.integers(-1, 2 ** 64 - 1))
def test_parse_twins_agree_on_hostile_frames(frames, start, last):
    results = [parse(frames, start, last) for parse in PARSERS]
    assert all(r == results[0] for r in results)
    messages, new_last, size, i, dups = results[0]
    for m in messages:
        assert p.decode(p.deliver(*m)) == p.Deliver(*m)
    if i < len(frames):  # stopped at a frame that is not a well-formed DELIVER
        try:
            assert type(p.decode(frames[i])) is not p.Deliver
        except p.ProtocolError:
            pass
