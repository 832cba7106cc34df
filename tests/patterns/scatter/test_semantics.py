"""Every SHALL/MUST of 49/SCATTERGATHER that the emulation can be held to, over real sockets."""
import threading
import time
import uuid

import gevent
import pytest
import zmq

from zactors.actors.sockets import context
from zactors.patterns.scatter import Closed, Gather, MultipartError, NoMessage, NoPeerAvailable, Scatter
from zactors.patterns.scatter import native
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


def _inproc():
    return "inproc://scatter-test-%s" % uuid.uuid4().hex


def _drain(gather, count, timeout=10):
    return [gather.recv(timeout=timeout) for _ in range(count)]


def test_round_robin_across_three_gathers(make):
    gathers = [make.gather() for _ in range(3)]
    scatter = make.scatter()
    for gather in gathers:
        scatter.connect(gather.bind("tcp://127.0.0.1:*"))
    for i in range(30):
        scatter.send(b"%d" % i, timeout=10)
    heads = []
    for gather in gathers:
        got = [int(m) for m in _drain(gather, 10)]
        step = {b - a for a, b in zip(got, got[1:])}
        assert step == {3}, got  # every third message, in order
        heads.append(got[0])
    assert sorted(heads) == [0, 1, 2]


def test_slow_gathers_full_queue_is_skipped_and_nothing_is_lost(make):
    small = dict(sndbuf=4096, rcvbuf=4096)
    slow, fast = make.gather(queue_limit=10, **small), make.gather(queue_limit=10, **small)
    scatter = make.scatter(queue_limit=10, **small)
    scatter.connect(slow.bind("tcp://127.0.0.1:*"))
    scatter.connect(fast.bind("tcp://127.0.0.1:*"))
    total = 3000
    fast_got = []

    def read_fast():
        while True:
            fast_got.append(fast.recv(timeout=60))

    reader = gevent.spawn(read_fast)
    payload = b"x" * 1000
    for i in range(total):
        # Would block for good if the full slow queue were not skipped.
        scatter.send(b"%06d" % i + payload, timeout=20)
    slow_got = []
    with pytest.raises(NoMessage):
        while True:
            slow_got.append(slow.recv(timeout=1.0))
    wait_for(lambda: len(fast_got) + len(slow_got) >= total, 20, "every message")
    reader.kill()
    everything = fast_got + slow_got
    assert len(everything) == total == len(set(everything))
    assert 10 <= len(slow_got) < 200 < len(fast_got)


def test_no_peer_send_blocks_then_raises_on_timeout(make):
    scatter = make.scatter()
    scatter.bind("tcp://127.0.0.1:*")
    with pytest.raises(NoPeerAvailable):
        scatter.send(b"now", block=False)
    started = time.monotonic()
    with pytest.raises(NoPeerAvailable, match="no gather peer available within 0.5s"):
        scatter.send(b"later", timeout=0.5)
    assert time.monotonic() - started >= 0.45
    assert scatter.sent == 0  # nothing was accepted, so nothing can be lost


def test_blocked_send_completes_when_a_peer_arrives(make):
    scatter = make.scatter()
    endpoint = scatter.bind("tcp://127.0.0.1:*")
    sender = gevent.spawn(scatter.send, b"waited", timeout=20)
    gevent.sleep(0)
    assert not sender.ready()
    gather = make.gather()
    gather.connect(endpoint)
    assert gather.recv(timeout=20) == b"waited"
    sender.get(timeout=5)


def test_queue_exists_before_the_connection(make, tmp_path):
    endpoint = "ipc://%s/later.ipc" % tmp_path
    scatter = make.scatter(queue_limit=5)
    scatter.connect(endpoint)  # nobody there yet: the queue still takes messages
    for i in range(5):
        scatter.send(b"%d" % i, block=False)
    with pytest.raises(NoPeerAvailable):
        scatter.send(b"full", block=False)
    gather = make.gather()
    gather.bind(endpoint)
    assert _drain(gather, 5) == [b"%d" % i for i in range(5)]


def test_queue_limits_are_configurable(make):
    endpoint = _inproc()
    gather = make.gather(queue_limit=7)
    gather.bind(endpoint)
    scatter = make.scatter(queue_limit=3)
    scatter.connect(endpoint)
    sent = 0
    while True:
        try:
            scatter.send(b"m", block=False)
        except NoPeerAvailable:
            break
        sent += 1
    assert sent == 3 + 7  # inproc: the sender's queue, then the receiver's
    assert len(_drain(gather, sent)) == sent


def test_gather_fair_queues_between_scatters(make):
    endpoint = _inproc()
    gather = make.gather()
    gather.bind(endpoint)
    a, b = make.scatter(), make.scatter()
    a.connect(endpoint)
    b.connect(endpoint)
    for i in range(20):
        a.send(b"a%d" % i, timeout=10)
    for i in range(20):
        b.send(b"b%d" % i, timeout=10)
    first = [m[:1] for m in _drain(gather, 20)]
    assert first.count(b"a") == first.count(b"b") == 10


def test_multipart_refused_on_send(make):
    scatter = make.scatter()
    gather = make.gather()
    scatter.connect(gather.bind("tcp://127.0.0.1:*"))
    for frames in ([b"a", b"b"], (b"a", b"b", b"c"), []):
        with pytest.raises(MultipartError, match="single-part"):
            scatter.send(frames)
        with pytest.raises(MultipartError):
            scatter.send_multipart(frames)
    with pytest.raises(TypeError):
        scatter.send("text")
    scatter.send_multipart([b"one"], timeout=10)
    scatter.send([b"two"], timeout=10)
    scatter.send(bytearray(b"three"), timeout=10)
    assert _drain(gather, 3) == [b"one", b"two", b"three"]
    assert scatter.sent == 3


def test_multipart_received_is_discarded_whole_and_counted(make):
    make.emulated_only("a PUSH peer cannot reach a native GATHER (see test_wire)")
    gather = make.gather()
    endpoint = gather.bind("tcp://127.0.0.1:*")
    push = context().socket(zmq.PUSH)
    push.linger = 0
    push.sndtimeo = 10000  # every blocking call has a deadline
    try:
        push.connect(endpoint)
        push.send_multipart([b"bad", b"multi", b"part"])
        push.send(b"good")
        push.send_multipart([b"bad", b"again"])
        push.send(b"fine")
        assert gather.recv(timeout=10) == b"good"
        assert gather.recv(timeout=10) == b"fine"
        assert gather.discarded == 2
        with pytest.raises(NoMessage):
            gather.recv(block=False)
    finally:
        push.close(0)


def test_close_from_another_thread_wakes_blocked_callers(make):
    scatter = make.scatter()
    scatter.bind("tcp://127.0.0.1:*")
    gather = make.gather()
    gather.bind("tcp://127.0.0.1:*")
    sender = gevent.spawn(scatter.send, b"never", timeout=30)
    receiver = gevent.spawn(gather.recv, timeout=30)
    gevent.sleep(0)
    closer = threading.Thread(target=lambda: (scatter.close(), gather.close()))
    closer.start()
    with pytest.raises(Closed):
        sender.get(timeout=10)
    with pytest.raises(Closed):
        receiver.get(timeout=10)
    closer.join(10)
    with pytest.raises(Closed):
        scatter.send(b"after")
    with pytest.raises(Closed):
        gather.recv(block=False)


def test_the_wire_is_the_callers_choice_never_the_builds():
    """The emulation by default on every build; native only when asked, and only with drafts."""
    assert native.available() == bool(zmq.has("draft"))
    scatter, gather = Scatter(), Gather()
    try:
        assert not scatter.native and not gather.native
        assert scatter._sock.type == zmq.PUSH and gather._sock.type == zmq.PULL
        assert (scatter.wire, gather.wire) == ("PUSH", "PULL")
    finally:
        scatter.close()
        gather.close()
    with pytest.raises(TypeError, match="native is True"):
        Scatter(native=None)
    if not zmq.has("draft"):
        with pytest.raises(RuntimeError, match="draft"):
            Scatter(native=True)
        with pytest.raises(RuntimeError, match="draft"):
            Gather(native=True)
    else:
        scatter, gather = Scatter(native=True), Gather(native=True)
        try:
            assert scatter.native and gather.native
            assert (scatter.wire, gather.wire) == ("SCATTER", "GATHER")
        finally:
            scatter.close()
            gather.close()
