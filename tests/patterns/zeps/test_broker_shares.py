"""Live delivery's split of a round's records among subscribers (``broker_hot_path._shares``):
matched once per distinct key, the same spans as matching every record."""
import pytest
from hypothesis import given, settings, strategies as st

from zactors.patterns.zeps.broker_hot_path import _shares
from zactors.patterns.zeps.matcher import Filter, Matcher

pytestmark = pytest.mark.timeout(120)


def _per_record(match, fresh):
    """The model (the broker's code before): every record matched; consecutive records with the
    same owners are one span."""
    shares = {}
    owners = None
    start = 0
    for i, record in enumerate(fresh):
        now = match(record[2])
        if now != owners:
            for sub in owners or ():
                shares.setdefault(sub, []).append((start, i))
            owners, start = now, i
    for sub in owners or ():
        shares.setdefault(sub, []).append((start, len(fresh)))
    return shares


class _Counting:
    def __init__(self, matcher):
        self.matcher = matcher
        self.calls = []

    def match(self, key):
        self.calls.append(key)
        return self.matcher.match(key)


def _matcher(prefix_sets):
    matcher = Matcher()
    for owner, prefixes in enumerate(prefix_sets):
        flt = Filter(owner)
        for prefix in prefixes:
            flt.add(prefix)
        matcher.add(flt)
    return matcher


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sets(st.sampled_from([b"", b"a", b"a.1", b"b", b"c."])), max_size=5),
       st.lists(st.sampled_from([b"a.1", b"a.2", b"b", b"b.x", b"c.", b"d"]), min_size=1, max_size=60))
def test_shares_are_the_spans_of_matching_every_record(prefix_sets, keys):
    matcher = _matcher(prefix_sets)
    fresh = [(seq, 0.0, key, b"body") for seq, key in enumerate(keys, 1)]
    counting = _Counting(matcher)
    assert _shares(counting.match, fresh) == _per_record(matcher.match, fresh)
    assert sorted(counting.calls) == sorted(set(keys))         # once per distinct key


def test_one_filter_for_everything_gives_each_subscriber_one_span():
    matcher = _matcher([{b""}, {b""}])
    fresh = [(seq, 0.0, b"k.%d" % (seq % 8), b"") for seq in range(1, 1001)]
    assert _shares(matcher.match, fresh) == {0: [(0, 1000)], 1: [(0, 1000)]}
    assert _shares(_matcher([]).match, fresh) == {}
