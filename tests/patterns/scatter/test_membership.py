"""Gather peers joining and leaving a Scatter during a run."""
import struct

import gevent
import pytest

from zactors.patterns.scatter import Closed
from tests.conftest import wait_for

_pack = struct.Struct(">I").pack
_unpack = struct.Struct(">I").unpack
TOTAL = 20_000
LIMIT = 50


def _reader(gather, into):
    try:
        while True:
            into.append(_unpack(gather.recv(timeout=60))[0])
    except Closed:
        pass


@pytest.mark.timeout(90)
def test_peers_join_and_leave_during_a_run(make):
    small = dict(sndbuf=8192, rcvbuf=8192)
    scatter = make.scatter(queue_limit=LIMIT, **small)
    endpoint = scatter.bind("tcp://127.0.0.1:*")
    inbox = {}
    gathers = {}
    readers = {}

    def join(name):
        gather = gathers[name] = make.gather(queue_limit=LIMIT, **small)
        gather.connect(endpoint)
        inbox[name] = []
        readers[name] = gevent.spawn(_reader, gather, inbox[name])

    def sender():
        for i in range(TOTAL):
            scatter.send(_pack(i), timeout=30)
            if i % 50 == 0:
                gevent.sleep(0)  # let the test steer membership mid-run

    join("first")
    running = gevent.spawn(sender)
    wait_for(lambda: len(inbox["first"]) >= 2000, 30, "the first gather to get going")
    join("second")
    wait_for(lambda: len(inbox["second"]) >= 500, 30, "the joining gather to get its share")
    # The first one leaves: what sat in its queues goes with it (the spec says so).
    sent_at_leave = scatter.sent
    gathers["first"].close()
    readers["first"].join(5)
    join("third")
    wait_for(lambda: len(inbox["third"]) >= 500, 30, "the third gather to get its share")
    running.get(timeout=60)
    assert scatter.sent == TOTAL

    got = [n for name in inbox for n in inbox[name]]
    assert len(got) == len(set(got)), "a message arrived twice"
    # Everything the remaining peers were sent arrives; losses are only what
    # was queued for the peer that left, around the moment it left.
    wait_for(lambda: sum(map(len, inbox.values())) >= TOTAL - _capacity(), 30, "the remaining messages")
    _quiet(lambda: sum(map(len, inbox.values())))
    got = {n for name in inbox for n in inbox[name]}
    lost = set(range(TOTAL)) - got
    assert len(lost) <= _capacity(), len(lost)
    assert all(n < sent_at_leave + _capacity() for n in lost), sorted(lost)[-5:]
    assert inbox["second"] and inbox["third"]


def _quiet(count, window=0.5, timeout=30):
    """Wait until ``count()`` stops changing for ``window`` seconds (nothing more in flight)."""
    with gevent.Timeout(timeout):
        while True:
            before = count()
            with gevent.Timeout(window, False):
                while count() == before:
                    gevent.sleep(0.01)
                continue
            return


def _capacity():
    """Generous bound of what one peer's queues and socket buffers hold (4-byte messages)."""
    return 2 * LIMIT + 2 * 8192 // 8
