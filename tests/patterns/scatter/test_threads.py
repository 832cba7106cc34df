"""One Scatter and the Gathers used at once from several OS threads and greenlets."""
import gc
import os
import struct
import threading
import time
import uuid

import gevent
import pytest

from zactors.actors import speedups
from zactors.patterns.scatter import Closed, NoMessage, NoPeerAvailable
from tests.conftest import wait_for

TOTAL = 100_000
THREADS = 4
GREENLETS = 8
_pack = struct.Struct(">I").pack
_unpack = struct.Struct(">I").unpack


def _send_range(scatter, start, stop):
    for i in range(start, stop):
        scatter.send(_pack(i), timeout=60)


def _in_own_hub(function):
    """Run ``function`` in a greenlet of this thread's own gevent hub (cross-hub wake-ups)."""
    def run(*args):
        try:
            gevent.spawn(function, *args).get()
        finally:  # and its monitor thread (tests/conftest.py) with it
            gevent.get_hub().destroy(destroy_loop=True)
    return run


def _receive(gather, into, stop):
    """Read until ``stop`` is set and nothing more comes."""
    while True:
        try:
            into.append(gather.recv(timeout=0.2))
        except NoMessage:
            if stop.is_set():
                return
        except Closed:
            return


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_threads_and_greenlets_deliver_every_message_exactly_once(make):
    # Small queues so that senders really block and wake each other.
    gathers = [make.gather(queue_limit=20) for _ in range(3)]
    scatter = make.scatter(queue_limit=20)
    for gather in gathers:
        scatter.connect(gather.bind("tcp://127.0.0.1:*"))

    # Receivers: per gather, one OS thread (a plain one, or one running its
    # own gevent hub) and one greenlet of this thread.
    stop = threading.Event()
    inboxes = []
    readers, reader_greenlets = [], []
    for gather in gathers:
        for kind in ("thread", "greenlet"):
            inbox = []
            inboxes.append(inbox)
            if kind == "thread":
                target = _in_own_hub(_receive) if len(readers) % 2 else _receive
                readers.append(threading.Thread(target=target, args=(gather, inbox, stop), daemon=True))
            else:
                reader_greenlets.append(gevent.spawn(_receive, gather, inbox, stop))
    for reader in readers:
        reader.start()

    # Senders: 4 OS threads (2 plain, 2 with their own hub) and 8 greenlets of
    # this thread, on disjoint ranges of message numbers.
    workers = THREADS + GREENLETS
    bounds = [TOTAL * k // workers for k in range(workers + 1)]
    ranges = list(zip(bounds, bounds[1:]))
    errors = []

    def guarded(start, stop_at):
        try:
            _send_range(scatter, start, stop_at)
        except Exception as exc:  # reported below; a thread cannot fail the test itself
            errors.append(exc)

    senders = [threading.Thread(target=_in_own_hub(guarded) if i % 2 else guarded, args=r, daemon=True)
               for i, r in enumerate(ranges[:THREADS])]
    for sender in senders:
        sender.start()
    sender_greenlets = [gevent.spawn(guarded, *r) for r in ranges[THREADS:]]

    # wait_for keeps this thread's hub, and so its greenlets, running meanwhile.
    wait_for(lambda: all(g.ready() for g in sender_greenlets) and not any(s.is_alive() for s in senders),
             90, "the senders")
    assert not errors, errors
    assert scatter.sent == TOTAL
    assert scatter.waited > 0, scatter.waited  # senders did block and were woken
    wait_for(lambda: sum(len(inbox) for inbox in inboxes) >= TOTAL, 60, "every message")
    stop.set()
    wait_for(lambda: all(g.ready() for g in reader_greenlets) and not any(r.is_alive() for r in readers),
             20, "the readers")

    numbers = [_unpack(m)[0] for inbox in inboxes for m in inbox]
    assert len(numbers) == TOTAL
    assert sorted(numbers) == list(range(TOTAL))  # each exactly once
    per_gather = [len(inboxes[2 * g]) + len(inboxes[2 * g + 1]) for g in range(3)]
    assert min(per_gather) > TOTAL // 10, per_gather  # the load was spread
    assert all(inboxes), [len(i) for i in inboxes]  # every reader took part


@pytest.mark.timeout(60)
def test_plain_threads_that_block_leave_no_descriptors_behind(make):
    gather = make.gather()
    gather.bind("tcp://127.0.0.1:*")

    def block_once():
        with pytest.raises(NoMessage):
            gather.recv(timeout=0.001)

    def open_fds():
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    for _ in range(50):
        thread = threading.Thread(target=block_once)
        thread.start()
        thread.join(10)
    gc.collect()
    assert open_fds() <= before + 2


def _in_thread(function, *args):
    """Run ``function`` in a plain OS thread; returns (thread, outcome dict)."""
    outcome = {}

    def run():
        started = time.monotonic()
        try:
            outcome["value"] = function(*args)
        except Exception as exc:
            outcome["error"] = exc
        outcome["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.timeout(60)
def test_plain_thread_blocks_then_times_out_or_is_woken(make):
    scatter = make.scatter()
    endpoint = scatter.bind("tcp://127.0.0.1:*")
    thread, outcome = _in_thread(lambda: scatter.send(b"x", timeout=0.3))
    wait_for(lambda: not thread.is_alive(), 20, "the timed-out send")
    assert isinstance(outcome["error"], NoPeerAvailable) and outcome["elapsed"] >= 0.25

    # A thread blocked on an empty Gather is woken by a message sent here...
    gather = make.gather()
    gather.connect(endpoint)
    thread, outcome = _in_thread(lambda: gather.recv(timeout=30))
    scatter.send(b"wake up", timeout=20)
    wait_for(lambda: not thread.is_alive(), 20, "the woken receiver")
    assert outcome["value"] == b"wake up"
    # ...and one blocked on a full Scatter by a receiver in this thread.
    full = make.scatter(queue_limit=1)
    inproc = "inproc://threads-%s" % uuid.uuid4().hex
    sink = make.gather(queue_limit=1)
    sink.bind(inproc)
    full.connect(inproc)
    while True:
        try:
            full.send(b"fill", block=False)
        except NoPeerAvailable:
            break
    thread, outcome = _in_thread(lambda: full.send(b"last", timeout=30))
    received = []

    def drain_and_check():
        try:
            received.append(sink.recv(block=False))
        except NoMessage:
            pass
        return not thread.is_alive()

    wait_for(drain_and_check, 20, "the unblocked sender")
    assert "error" not in outcome, outcome
    while len(received) < 3:  # the two that filled the queues, then the one that waited
        received.append(sink.recv(timeout=10))
    assert received == [b"fill", b"fill", b"last"]


@pytest.mark.timeout(90)
def test_a_second_thread_arriving_mid_stream_loses_and_duplicates_nothing(make):
    for _round in range(20):
        endpoint = "inproc://handover-%s" % uuid.uuid4().hex
        gather = make.gather(queue_limit=100)
        gather.bind(endpoint)
        scatter = make.scatter(queue_limit=100)
        scatter.connect(endpoint)
        per_sender = 2000
        got = []
        reader = gevent.spawn(lambda: got.extend(gather.recv(timeout=20) for _ in range(2 * per_sender)))
        scatter.send(_pack(0))
        other = threading.Thread(target=_send_range, args=(scatter, per_sender, 2 * per_sender), daemon=True)
        other.start()
        _send_range(scatter, 1, per_sender)  # keeps going while the other thread comes in
        wait_for(lambda: not other.is_alive(), 30, "the second sender")
        reader.get(timeout=30)
        assert sorted(_unpack(m)[0] for m in got) == list(range(2 * per_sender))
        assert scatter.sent == 2 * per_sender
        scatter.close()
        gather.close()


@pytest.mark.timeout(60)
def test_threads_sharing_a_scatter_send_without_waiting_for_its_lock(make, monkeypatch):
    """Four threads sending at once take the one-call locked send, not the ``with lock:`` path.

    A thread preempted inside ``with lock:`` (the GIL switches threads every
    5 ms) made every other sender queue up on the lock, then hand it over one
    message at a time, a thread switch each: four threads sent at about half
    the rate of one.  Here the slow path may run only when a queue is full
    or the lock was held by a slower call; with ample room that is rare.
    """
    from zactors.patterns.scatter import scatter as scatter_module

    slow = []
    locked_send = scatter_module.send_message

    def counted(*args):
        slow.append(1)
        return locked_send(*args)

    monkeypatch.setattr(scatter_module, "send_message", counted)
    endpoint = "inproc://threads-%s" % uuid.uuid4().hex
    total = 40_000
    gather = make.gather(queue_limit=total)
    gather.bind(endpoint)
    scatter = make.scatter(queue_limit=total)
    scatter.connect(endpoint)
    senders = [threading.Thread(target=_send_range, args=(scatter, total * k // 4, total * (k + 1) // 4),
                                daemon=True) for k in range(4)]
    for sender in senders:
        sender.start()
    wait_for(lambda: not any(sender.is_alive() for sender in senders), 60, "the four senders")
    got = [gather.recv(timeout=20) for _ in range(total)]
    assert sorted(_unpack(m)[0] for m in got) == list(range(total))
    assert scatter.sent == total
    if speedups.SPEEDUPS:  # the pure-Python twin can be preempted holding the lock: others then wait on it
        assert len(slow) < total // 20, "%d of %d sends took the with-lock path" % (len(slow), total)
