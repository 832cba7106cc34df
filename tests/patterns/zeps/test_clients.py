"""Publisher and Subscriber against a live broker: speeds, late joiners, reconnects, kill -9."""
import os
import signal
import sys

import gevent
import gevent.event
import gevent.subprocess
import pytest

from zactors.patterns.zeps import Publisher, Subscriber, ZepsError

from ...conftest import wait_for

pytestmark = pytest.mark.timeout(180)


def keys_for(i):
    return b"%s.%d" % ((b"eu", b"us", b"asia")[i % 3], i)


def test_ten_subscribers_at_different_speeds_get_everything_in_order(broker):
    n = 3000
    pub = Publisher(broker.endpoint, "ticks")
    plan = [  # (pattern, delay per message, pause after this many, window)
        (b"", 0, None, 1 << 20), (b"", 0, None, 4096), (b"eu.", 0, None, 1 << 16),
        (b"re:us\\.\\d*7$", 0, None, 1 << 16),
        (b"", 0.001, None, 2048),            # deliberately slow, tiny window: mostly replayed
        (b"", 0, 500, 1 << 16),              # stops for a while, then resumes
        (b"glob:asia.*", 0, None, 1 << 16), (b"", 0, None, 200), (b"us.", 0, None, 1 << 20), (b"", 0, None, 1 << 18),
    ]
    subs = [Subscriber(broker.endpoint, "ticks", pattern, window=window) for pattern, _, _, window in plan]
    results = [[] for _ in plan]

    def consume(i, sub, expected, delay, pause_after):
        while len(results[i]) < expected:
            message = sub.get(timeout=30)
            assert message is not None, "subscriber %d stalled at %d/%d" % (i, len(results[i]), expected)
            results[i].append(message)
            if delay:
                gevent.sleep(delay)
            if pause_after and len(results[i]) == pause_after:
                wait_for(lambda: publisher.dead, timeout=60, what="the publisher to finish")  # stopped meanwhile

    def produce():
        for i in range(n):
            pub.publish(keys_for(i), b"body-%d" % i)
            if i % 100 == 0:
                gevent.sleep(0)
        pub.flush()

    from zactors.patterns.zeps.matcher import Filter
    expected = []
    for pattern, *_ in plan:
        flt = Filter()
        flt.add(pattern)
        expected.append([(i + 1, keys_for(i), b"body-%d" % i) for i in range(n) if flt(keys_for(i))])
    publisher = gevent.spawn(produce)
    consumers = [gevent.spawn(consume, i, sub, len(expected[i]), plan[i][1], plan[i][2]) for i, sub in enumerate(subs)]
    try:
        gevent.joinall(consumers + [publisher], raise_error=True, timeout=150)
        for i in range(len(plan)):
            assert [tuple(m) for m in results[i]] == expected[i], "subscriber %d" % i
        stats = broker.call("$STATS")
        assert stats.get("to_replay", 0) > 0 and stats.get("replayed", 0) > 0  # the slow ones were replayed
        for sub in subs:
            assert sub.get(timeout=0.05) is None  # nothing more: no duplicates
    finally:
        for sub in subs:
            sub.destroy()
        pub.close()


def test_late_joiners_from_zero_middle_time_and_new(broker):
    import time
    pub = Publisher(broker.endpoint, "s")
    for i in range(1000):
        pub.publish(b"k", b"%d" % i)
    pub.flush()
    stamp = time.time()
    wait_for(lambda: time.time() > stamp, what="the clock to move")
    for i in range(1000, 1100):
        pub.publish(b"k", b"%d" % i)
    pub.flush()
    zero = Subscriber(broker.endpoint, "s", from_seq=0)
    middle = Subscriber(broker.endpoint, "s", from_seq=500)
    since = Subscriber(broker.endpoint, "s", since=stamp)
    new = Subscriber(broker.endpoint, "s", new=True)
    try:
        for i in range(1100, 1200):
            pub.publish(b"k", b"%d" % i)
        pub.flush()
        assert [zero.get(10).seq for _ in range(1200)] == list(range(1, 1201))
        assert [middle.get(10).seq for _ in range(701)] == list(range(500, 1201))
        assert [since.get(10).seq for _ in range(200)] == list(range(1001, 1201))
        assert [new.get(10).seq for _ in range(100)] == list(range(1101, 1201))
    finally:
        for sub in (zero, middle, since, new):
            sub.destroy()
        pub.close()


def test_callbacks_and_iteration(broker):
    got = []
    pub = Publisher(broker.endpoint, "s")
    cb = Subscriber(broker.endpoint, "s", b"a", callback=got.append, window=300)
    it = Subscriber(broker.endpoint, "s", b"b")
    try:
        for i in range(50):
            pub.publish(b"a" if i % 2 else b"b", b"%d" % i)
        pub.flush()
        wait_for(lambda: len(got) == 25, what="25 callbacks")
        assert [m.body for m in got] == [b"%d" % i for i in range(1, 50, 2)]
        seen = []
        for message in it:
            seen.append(message.body)
            if len(seen) == 25:
                break
        assert seen == [b"%d" % i for i in range(0, 50, 2)]
    finally:
        cb.destroy()
        it.destroy()
        pub.close()


def test_refused_subscription_raises(broker):
    with pytest.raises(ZepsError, match="bad regular expression"):
        Subscriber(broker.endpoint, "s", b"re:(", wait=True)
    with pytest.raises(ZepsError, match="reserved"):
        Publisher(broker.endpoint, "$x")


def test_many_greenlets_share_one_publisher(broker):
    pub = Publisher(broker.endpoint, "s")
    sub = Subscriber(broker.endpoint, "s")
    try:
        def worker(w):
            for i in range(200):
                pub.publish(b"w%d" % w, b"%d" % i)
                if i % 17 == 0:
                    gevent.sleep(0)
            pub.flush()

        gevent.joinall([gevent.spawn(worker, w) for w in range(20)], raise_error=True, timeout=60)
        got = [sub.get(10) for _ in range(4000)]
        assert [m.seq for m in got] == list(range(1, 4001))
        for w in range(20):  # each greenlet's messages in its order
            assert [m.body for m in got if m.key == b"w%d" % w] == [b"%d" % i for i in range(200)]
    finally:
        sub.destroy()
        pub.close()


def test_subscriber_resumes_without_gap_after_the_broker_restarts(journal_dir):
    from zactors.patterns.zeps.broker import Broker
    broker = Broker(journal_dir, heartbeat=0.2, expiry=1.0)
    endpoint = broker.endpoint
    pub = Publisher(endpoint, "s", heartbeat=0.2, expiry=1.0)
    sub = Subscriber(endpoint, "s", heartbeat=0.2, expiry=1.0)
    try:
        for i in range(300):
            pub.publish(b"k", b"%d" % i)
        pub.flush()
        first = [sub.get(10) for _ in range(150)]  # the rest waits in its queue or the broker
        broker.destroy()
        broker = _rebind(lambda: Broker(journal_dir, endpoint, heartbeat=0.2, expiry=1.0))
        wait_for(lambda: pub.stats["reattached"] >= 1 or _flushed(pub), timeout=10, what="the publisher back")
        for i in range(300, 400):
            pub.publish(b"k", b"%d" % i)
        pub.flush()
        rest = [sub.get(20) for _ in range(250)]
        got = first + rest
        assert [m.seq for m in got] == list(range(1, 401))
        assert [m.body for m in got] == [b"%d" % i for i in range(400)]
        assert sub.get(timeout=0.2) is None
    finally:
        sub.destroy()
        pub.close()
        broker.destroy()


def _rebind(make):
    """A broker on the endpoint just released: libzmq closes the old listener in its own thread, a moment later."""
    import zmq
    made = []

    def attempt():
        try:
            made.append(make())
            return True
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EADDRINUSE:
                raise
            return False

    wait_for(attempt, timeout=10, what="the old broker's port to be released")
    return made[0]


def _flushed(pub):
    try:
        pub.flush(timeout=0.5)
        return True
    except ZepsError:
        return False


@pytest.mark.slow
def test_kill_9_of_the_broker_process_mid_stream(journal_dir, processes):
    """The journal recovers, the sequence continues, subscribers resume with no gap."""
    from zactors.actors.journal import JournalReader
    here = os.path.dirname(__file__)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH")])))

    def start(endpoint):
        proc = processes([sys.executable, os.path.join(here, "_broker_process.py"), journal_dir, endpoint],
                         stdout=gevent.subprocess.PIPE, env=env)
        line = proc.stdout.readline().decode().strip()
        assert line.startswith("tcp://"), line
        return proc, line

    proc, endpoint = start("tcp://127.0.0.1:*")
    pub = Publisher(endpoint, "s", heartbeat=0.2, expiry=1.0)
    sub = Subscriber(endpoint, "s", heartbeat=0.2, expiry=1.0, window=1 << 16)
    got = []
    confirmed = 0
    try:
        stop = gevent.event.Event()

        def publish():
            nonlocal confirmed
            i = 0
            while not stop.is_set():
                pub.publish(b"k", b"%d" % i)
                i += 1
                if i % 200 == 0:
                    try:
                        pub.flush(timeout=5)
                        confirmed = i
                    except ZepsError:
                        pass  # the broker died: messages since the last flush may be gone
                    gevent.sleep(0)

        def consume():
            while True:
                message = sub.get(timeout=30)
                if message is None:
                    return
                got.append(message)

        publisher = gevent.spawn(publish)
        consumer = gevent.spawn(consume)
        wait_for(lambda: len(got) > 2000, timeout=30, what="traffic before the kill")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_at = len(got)
        with JournalReader(os.path.join(journal_dir, "s")) as reader:
            recovered = reader.last_seq
        assert recovered >= confirmed
        proc, _ = start(endpoint)
        wait_for(lambda: len(got) > max(killed_at, recovered) + 2000, timeout=60, what="traffic after the restart")
        stop.set()
        publisher.join(10)
        wait_for(lambda: got and got[-1].seq >= _last(journal_dir) - 0, timeout=30, what="the subscriber to catch up")
        seqs = [m.seq for m in got]
        assert seqs == list(range(1, len(seqs) + 1))  # no gap, no duplicate, across the kill
        assert sub.stats["reattached"] >= 1
        consumer.kill()
    finally:
        sub.destroy()
        pub.close()


def _last(journal_dir):
    from zactors.actors.journal import JournalReader
    with JournalReader(os.path.join(journal_dir, "s")) as reader:
        return reader.last_seq


def test_flush_waits_for_its_own_ping_not_an_earlier_heartbeat(broker):
    """A heartbeat PING sent during a long burst must not let flush() return before the burst is written."""
    pub = Publisher(broker.endpoint, "s", heartbeat=0.01, expiry=5.0)
    try:
        for i in range(30000):
            pub.publish(b"k", b"%d" % i)
            if i % 3000 == 0:
                gevent.sleep(0.02)  # the keepalive greenlet runs and sends its PING mid-burst
        pub.flush()
        assert broker.call("INFO")["streams"]["s"]["written_seq"] == 30000
    finally:
        pub.close()


def test_get_many_takes_batches_in_order_and_gives_the_credit_back(broker):
    n = 5000
    with Publisher(broker.endpoint, "batches") as pub:
        for i in range(n):
            pub.publish(b"k", b"%d" % i)
        pub.flush()
    # a window of ~40 messages: everything arrives only if get_many returns the credit it frees
    sub = Subscriber(broker.endpoint, "batches", window=40 * 20)
    try:
        got = []
        while len(got) < n:
            batch = sub.get_many(16, timeout=30)
            assert batch, "stalled at %d/%d" % (len(got), n)
            assert len(batch) <= 16
            got.extend(batch)
        assert [m.seq for m in got] == list(range(1, n + 1))
        assert [m.body for m in got] == [b"%d" % i for i in range(n)]
        assert sub.get_many(16, timeout=0.05) == []
    finally:
        sub.destroy()


def test_the_brokers_reasons_are_said_once_each():
    """Issue 21: a full disk's ENOSPC sentence came five times on one line."""
    from zactors.patterns.zeps.client import _reasons
    assert _reasons(["a", "b", "b", "b", "a"]) == "a (2 times); b (3 times)"
    assert _reasons(["x"]) == "x"
    assert _reasons(["1", "2", "3", "4", "5"]) == "1; 2; 3 (and 2 other reasons)"
    # one full disk: its sentence once, not again in every reason it caused (issue 21)
    cause = "journal write /j/s/1.seg failed: ENOSPC (No space left on device)"
    assert _reasons(["stream s cannot write its journal: " + cause]
                    + ["stream s refused the message: journal /j/s refuses appends: " + cause] * 100) == (
        "stream s cannot write its journal: " + cause + "; stream s refused the message: journal /j/s refuses "
        "appends: the same failure (100 times)")
