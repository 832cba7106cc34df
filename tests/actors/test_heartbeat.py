"""Liveness tickets and the Heartbeat actor."""
import time

import pytest

from zactors.actors.heartbeat import Heartbeat, Liveness

pytestmark = pytest.mark.timeout(30)


def test_evasive_once_then_expired_and_forgotten():
    live = Liveness(evasive=1, expired=3)
    live.touch("a", now=0)
    live.touch("b", now=0.5)
    assert live.next_deadline() == 1
    assert live.check(now=0.9) == ([], [])
    assert live.check(now=1.2) == (["a"], [])
    assert live.check(now=1.3) == ([], []), "evasive is reported once per silence"
    assert live.next_deadline() == 1.5  # b turns evasive before a expires
    assert live.check(now=1.6) == (["b"], [])
    assert live.next_deadline() == 3
    assert live.check(now=3.0) == ([], ["a"])
    assert "a" not in live and "b" in live
    assert live.check(now=3.5) == ([], ["b"])
    assert len(live) == 0 and live.next_deadline() is None


def test_touch_resets_and_reorders():
    live = Liveness(evasive=1, expired=2)
    live.touch("a", now=0)
    live.touch("b", now=0.1)
    live.touch("a", now=0.9)  # a spoke again: now b is the oldest
    assert list(live) == ["b", "a"]
    assert live.check(now=1.5) == (["b"], [])
    assert live.check(now=2.0) == (["a"], [])
    live.touch("b", now=2.05)
    assert live.check(now=2.2) == ([], [])
    assert live.last_seen("b") == 2.05
    assert live.forget("b") and not live.forget("b")


def test_many_peers_check_touches_only_the_late_ones():
    live = Liveness(evasive=10, expired=20)
    for i in range(100000):
        live.touch(i, now=i * 0.0001)
    started = time.perf_counter()
    assert live.check(now=10.00005) == ([0], [])
    assert time.perf_counter() - started < 0.05


def test_bad_timeouts_refused():
    with pytest.raises(ValueError):
        Liveness(evasive=2, expired=1)
    with pytest.raises(ValueError):
        Liveness(evasive=0, expired=1)


def test_heartbeat_actor_reports_evasive_then_expired():
    hb = Heartbeat(evasive=0.05, expired=0.15)
    try:
        hb.send("TOUCH", "peer-1")
        started = time.monotonic()
        evasive = hb.recv_event(timeout=5)
        assert evasive.name == "EVASIVE" and evasive.args == ("peer-1",)
        expired = hb.recv_event(timeout=5)
        assert expired.name == "EXPIRED" and expired.args == ("peer-1",)
        assert time.monotonic() - started >= 0.14
        assert hb.call("PEERS") == []
    finally:
        hb.destroy()


def test_heartbeat_actor_touch_keeps_peer_alive():
    hb = Heartbeat(evasive=1.0, expired=2.0)
    try:
        for _ in range(10):
            hb.send("TOUCH", b"peer")
            assert hb.recv_event(timeout=0.15) is None
        assert hb.call("PEERS") == [b"peer"]
        hb.send("FORGET", b"peer")
        assert hb.call("PEERS") == []
    finally:
        hb.destroy()
