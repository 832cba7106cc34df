"""Defect 1 of issue 19: ``Publisher.flush()`` never says OK about messages a broker crash lost."""
import os
import signal
import sys

import gevent.subprocess
import pytest

from zactors.patterns.zeps import MessagesLost, Publisher

from ...conftest import wait_for

pytestmark = [pytest.mark.timeout(180)]

HERE = os.path.dirname(__file__)


@pytest.fixture
def broker_process(processes, journal_dir):
    """``start(endpoint)``: a broker process on ``journal_dir`` (kill -9 it at will); returns (proc, endpoint)."""
    def start(endpoint="tcp://127.0.0.1:*"):
        proc = processes([sys.executable, os.path.join(HERE, "_broker_process.py"), journal_dir, endpoint],
                         stdout=gevent.subprocess.PIPE)
        line = proc.stdout.readline().decode().strip()
        assert line.startswith("tcp://"), line
        return proc, line
    return start


def _journaled(journal_dir, stream="s"):
    from zactors.actors.journal import JournalReader
    with JournalReader(os.path.join(journal_dir, stream)) as reader:
        return reader.last_seq


@pytest.mark.parametrize("down", ["briefly", "past_expiry"])
def test_flush_after_a_broker_kill_says_how_many_may_be_lost(broker_process, journal_dir, down):
    """The issue's case: flush, publish many, kill -9, restart on the same journal and endpoint, flush.

    ``past_expiry``: the broker stays down until the publisher's keep-alive gives
    the peering up and attaches on a new socket (where flush used to say OK).
    """
    proc, endpoint = broker_process()
    pub = Publisher(endpoint, "s", heartbeat=0.2, expiry=1.0)
    try:
        pub.publish(b"k", b"first")
        pub.flush()
        n = 100000
        for i in range(n):
            pub.publish(b"k", b"%d" % i)
        proc.send_signal(signal.SIGKILL)  # with most of them in flight
        proc.wait()
        kept = _journaled(journal_dir)
        if down == "past_expiry":
            wait_for(lambda: pub.stats["reattached"] >= 1, timeout=30, what="the keep-alive to give up")
        proc, _ = broker_process(endpoint)  # same journal, same endpoint
        wait_for(lambda: pub.stats["reattached"] >= 1, timeout=30, what="the publisher to attach again")
        with pytest.raises(MessagesLost) as lost:
            pub.flush(timeout=30)
        # everything not confirmed is reported, which covers at least what the journal lacks
        assert n + 1 - kept <= lost.value.count <= n
        assert lost.value.ranges[-1][1] == n + 1
        assert "may be lost" in str(lost.value)
        # the publisher goes on: the next messages are confirmed, and flush is OK again
        for i in range(100):
            pub.publish(b"k", b"after %d" % i)
        pub.flush(timeout=30)
        assert _journaled(journal_dir) >= kept + 100
    finally:
        pub.close()


def test_flush_raises_when_the_loss_is_found_during_its_wait(broker_process, journal_dir):
    """The broker killed and back before the publisher notices: flush's own PING finds the new broker."""
    proc, endpoint = broker_process()
    pub = Publisher(endpoint, "s", heartbeat=30.0, expiry=60.0)  # no keep-alive help
    try:
        for i in range(50000):
            pub.publish(b"k", b"%d" % i)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kept = _journaled(journal_dir)
        broker_process(endpoint)
        with pytest.raises(MessagesLost) as lost:
            pub.flush(timeout=30)
        assert 50000 - kept <= lost.value.count <= 50000
        pub.publish(b"k", b"after")
        pub.flush(timeout=30)
    finally:
        pub.close()


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_flush_waiting_on_a_broker_that_dies_notices_within_expiry(broker_process, journal_dir, idempotent):
    """The broker dies with flush's PING (the Spark writers' case): nobody will answer it, and the restarted
    broker hears nothing from us to DETACH.  flush holds the publisher's lock, so the keep-alive cannot
    notice: flush itself gives the silent peering up after ``expiry``, attaches again, and then confirms
    everything (idempotent: resent, deduplicated) or says what may be lost, long before its timeout."""
    proc, endpoint = broker_process()
    pub = Publisher(endpoint, "s", heartbeat=0.2, expiry=1.0, idempotent=idempotent)
    try:
        for i in range(20000):
            pub.publish(b"k", b"%d" % i)
        proc.send_signal(signal.SIGSTOP)      # it hears our PING but cannot answer it...
        waiting = gevent.spawn(pub.flush, 60)
        wait_for(lambda: pub._pings > pub._answers, timeout=10, what="flush's PING to be sent")
        proc.send_signal(signal.SIGKILL)      # ...and dies with it
        proc.wait()
        proc, _ = broker_process(endpoint)
        started = gevent.get_hub().loop.now()
        if idempotent:
            waiting.get(timeout=60)
            assert _journaled(journal_dir) == 20000
        else:
            with pytest.raises(MessagesLost):
                waiting.get(timeout=60)
        assert gevent.get_hub().loop.now() - started < 15, "flush waited for its timeout"
    finally:
        pub.close()

