"""Issue 20: a peer without CURVE floods new stream names; its connection is held to its quota, and what it
leaves empty does not keep the ``max_streams`` budget from anyone else."""
import gevent
import pytest

from zactors.patterns.zeps import protocol as p
from zactors.patterns.zeps.client import Publisher, Subscriber

from .conftest import Raw
from .test_budgets import junk_streams, poll, spawn  # noqa: F401 - spawn: the fixture

pytestmark = pytest.mark.timeout(120)
pytest.importorskip("zactors.actors.journal")


def attach_within(endpoint, name, timeout):
    """ATTACH ``name`` until it is accepted (``timeout`` s at most); the refusals met on the way."""
    peer = Raw(endpoint)
    refused = []
    try:
        with gevent.Timeout(timeout, False):
            while True:
                peer.send(p.attach(name))
                answer = peer.recv(timeout=10)
                if type(answer) is p.AttachOk:
                    peer.send(p.encode(p.Detach()))
                    peer.expect(p.DetachOk)
                    return refused
                refused.append(answer.reason)
                gevent.sleep(0.2)   # (a retry's pace)
        raise AssertionError("never attached %r within %gs: %s" % (name, timeout, refused[-3:]))
    finally:
        peer.close()


def test_a_flooding_connection_is_held_to_its_quota_and_its_empty_streams_free_the_budget(spawn):
    # stream_idle stays at its default (60 s): the flood's empty streams used to keep the budget that long
    broker = spawn(max_streams=24, max_streams_per_peer=8)
    refused = []
    for c in range(3):                                   # three connections, each past its quota of 8
        refused += junk_streams(broker.endpoint, [b"junk-%d-%d" % (c, i) for i in range(10)], publish=False)
    quota = [r for r in refused if r.startswith("stream quota: this peer created 8 streams (at most 8)")]
    assert len(refused) == 6 and len(quota) >= 4, refused   # (the third meets the full budget first)
    assert all(r.startswith(("stream quota", "too many streams (24)")) for r in refused), refused
    counters = broker.counters()
    assert counters["streams_refused"] == 6
    # the 24 junk streams filled max_streams; left empty, they are gone within seconds, not stream_idle
    attach_within(broker.endpoint, b"good", timeout=15)
    with Publisher(broker.endpoint, "good") as pub:
        pub.publish(b"k", b"kept")
        pub.flush()
    with Subscriber(broker.endpoint, "good", from_seq=0) as sub:
        assert sub.get(timeout=10).body == b"kept"
    assert broker.info()["stream_budget"]["max_streams"] == 24



def test_idle_open_streams_arm_no_timers(journal_dir):
    """Issue 20 (the hostile soak's profile): every open stream's group commit ticked every 0.1 s, written or
    not: at the ~500 streams a flood keeps open, 5,000 timer calls a second on the hub for nothing.  A write
    arms the next fsync now, and an idle stream arms nothing."""
    from zactors.patterns.zeps.broker import Broker
    broker = Broker(journal_dir, max_streams_per_peer=64)
    try:
        reactor = broker._reactor                   # (the test's greenlet and the broker's share the thread)

        def armed():
            return len(reactor._timers) - reactor._cancelled
        before = armed()
        names = [b"s-%d" % i for i in range(30)]
        assert junk_streams(broker.endpoint, names, publish=True) == []   # 30 open streams, a message each
        assert poll(lambda: all(s["synced_seq"] == 1 for s in broker.call("INFO")["streams"].values()), timeout=30)
        assert poll(lambda: armed() < before + 10, timeout=10), (before, armed())    # was 30 more: one per stream
        assert broker.call("INFO")["stream_budget"]["open"] == 30
    finally:
        broker.destroy()
