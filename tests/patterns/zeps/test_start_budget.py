"""Issue 20: a ZEPS broker starts with more journals on disk than its descriptors allow open at once.

It used to open every journal on disk at start whatever ``max_open_streams`` said (EMFILE past the open-file
limit), and not to start at all if one of them could not be opened.
"""
import os
import shutil

import gevent
import pytest

from zactors.patterns.zeps import protocol as p

from .conftest import Raw
from .test_budgets import BrokerProcess, nofile, open_fds

pytestmark = pytest.mark.timeout(120)
journal = pytest.importorskip("zactors.actors.journal")

STREAMS = 60       # 3 descriptors each when open: 180, over the 128 the broker may have
LIMIT = 128


def make_streams(journal_dir, count):
    """``count`` streams on disk, ``s-<i>`` holding the one message ``v<i>`` (copies of one journal: no fsyncs)."""
    from zactors.patterns.zeps.names import stream_directory
    os.makedirs(journal_dir, mode=0o700)
    first = os.path.join(journal_dir, stream_directory(b"s-0"))
    made = journal.Journal(first)
    made.append(b"k", b"v")
    made.write()
    made.close()
    for i in range(1, count):
        shutil.copytree(first, os.path.join(journal_dir, stream_directory(b"s-%d" % i)))


def read_first(peer, name, timeout=30.0):
    """ATTACH ``name`` (again while the broker has no idle stream to close for it), and its first message."""
    with gevent.Timeout(timeout):
        while True:
            peer.send(p.attach(name))
            answer = peer.recv(timeout=10)
            if type(answer) is p.AttachOk:
                break
            assert answer.reason.startswith("too many open streams"), answer
            gevent.sleep(0.1)  # (a retry's pace: a stream closes for a new one once idle 1 s)
    peer.send(p.subscribe(b"", 0))
    peer.expect(p.SubscribeOk)
    peer.send(p.credit(1 << 20))
    body = peer.expect(p.Deliver, timeout=10).body
    peer.send(p.encode(p.Detach()))
    peer.expect(p.DetachOk)
    return body


def test_a_node_with_more_journals_than_descriptors_starts_and_serves_every_stream(journal_dir, processes):
    make_streams(journal_dir, STREAMS)
    damaged = os.path.join(journal_dir, "damaged")
    os.makedirs(damaged, mode=0o700)
    with open(os.path.join(damaged, "00000000000000000001.seg"), "wb") as segment:
        segment.write(b"not a journal segment at all" * 4)
    # asked for more open streams than the descriptors allow: the broker keeps what they allow
    broker = BrokerProcess(processes, journal_dir, preexec_fn=nofile(LIMIT), max_open_streams=1000)
    info = broker.info()
    budget = info["stream_budget"]
    assert budget["max_open"] == LIMIT // 2 // 4
    assert budget["open"] <= budget["max_open"] and budget["open"] + budget["closed"] == STREAMS + 1
    assert info["counters"]["journal_open_errors"] >= 1            # the damaged one: listed, counted
    assert info["streams"]["s-59"]["last_seq"] == 1
    peer = Raw(broker.endpoint)
    try:
        for i in range(STREAMS):
            assert read_first(peer, b"s-%d" % i) == b"v"
            assert open_fds(broker.pid) < LIMIT - 16
        assert broker.info()["stream_budget"]["open"] <= LIMIT // 2 // 4
        peer.send(p.attach(b"damaged"))                           # refused with the reason, the node serves on
        assert peer.expect(p.Invalid, timeout=20).reason.startswith("cannot open stream damaged")
        assert read_first(peer, b"s-0") == b"v"
    finally:
        peer.close()
    assert broker.proc.poll() is None


def test_a_second_broker_on_the_same_journal_directory_is_refused(journal_dir):
    """Streams are opened on demand: a closed one must not be opened by another broker behind our back."""
    from zactors.patterns.zeps.broker import Broker
    first = Broker(journal_dir)
    try:
        with pytest.raises(RuntimeError, match="in use by another broker"):
            Broker(journal_dir)
    finally:
        first.destroy()
    Broker(journal_dir).destroy()  # free again once the first is gone
