"""Hostile patterns at the wire (issue 20, defect 1): a backtracking expression cannot hold the broker."""
import time

import pytest

from zactors.patterns.zeps import protocol as p

from .test_broker import attached

pytestmark = pytest.mark.timeout(60)

EVIL_KEY = b"a" * 30 + b"!"   # 31 bytes: Python's re held the hub for minutes on re:(a|a)*$


def test_a_redos_pattern_does_not_stop_the_broker(broker, raw):
    evil = attached(raw, broker)
    evil.send(p.subscribe(b"re:(a|a)*$", 0))
    evil.expect(p.SubscribeOk)
    evil.send(p.credit(1 << 20))
    pub = attached(raw, broker)
    other = attached(raw, broker, b"elsewhere")
    started = time.monotonic()
    pub.send(p.publish(EVIL_KEY, b"x"))
    pub.send(p.publish(b"aaaa", b"y"))
    other.send(p.PING_FRAME)          # another peer, another stream: answered at once
    other.expect(p.PingOk, timeout=5)
    pub.send(p.PING_FRAME)
    pub.expect(p.PingOk, timeout=5)
    assert evil.recv(timeout=5) == p.Deliver(2, b"aaaa", b"y")  # the evil key matched nothing, quickly
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("pattern, words", [(rb"re:(a)\1", "invalid escape"), (b"re:a(?=b)", "perl operator"),
                                            (b"re:(", "missing )")])
def test_patterns_re2_refuses_get_invalid_with_the_reason(broker, raw, pattern, words):
    sub = attached(raw, broker)
    sub.send(p.subscribe(pattern, 0))
    reason = sub.expect(p.Invalid).reason
    assert "bad regular expression" in reason and words in reason and "RE2 syntax" in reason
    sub.send(p.subscribe(b"re:ok", 0))   # the peering goes on
    sub.expect(p.SubscribeOk)

