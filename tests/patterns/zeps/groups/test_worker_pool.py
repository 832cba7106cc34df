"""WorkerPool: a handler per message, ack on success, nack with backoff on failure, dead letters at the end."""
import threading

import gevent
import pytest

from zactors.patterns.zeps.worker_pool import WorkerPool

from .conftest import make_broker, publish, wait_for

pytestmark = pytest.mark.timeout(120)


class Recorder(WorkerPool):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.done = []
        self.threads_seen = set()
        self.running = self.most = 0

    def handle(self, message):
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            self.threads_seen.add(threading.get_ident())
            if message.body == b"bad":
                raise ValueError("cannot handle this one")
            gevent.sleep(0.001) if not self.threads else None
            self.done.append(message.seq)
        finally:
            self.running -= 1


def test_handles_each_message_once_concurrently_and_acks(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", [(b"k", b"%d" % i) for i in range(500)])
        pool = Recorder(broker.endpoint, "s", "work", concurrency=8)
        wait_for(lambda: len(pool.done) == 500)
        wait_for(lambda: broker.info()["groups"][0]["acked"] == 500)
        assert sorted(pool.done) == list(range(1, 501))
        assert 1 < pool.most <= 8
        assert pool.call("INFO")["handled"] == 500
        pool.destroy()
    finally:
        broker.destroy()


def test_failures_are_nacked_with_backoff_then_dead_lettered(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", [(b"k", b"bad"), (b"k", b"good")])
        pool = Recorder(broker.endpoint, "s", "work", backoff=(0.05, 0.2), max_deliver=3)
        wait_for(lambda: broker.info()["groups"][0]["dead_letters"] == 1, what="the bad one dead-lettered")
        assert pool.done == [2]
        assert pool.call("INFO")["failed"] == 3
        assert [pool.delay(type("M", (), {"deliveries": d})) for d in (1, 2, 3, 4)] == [0.05, 0.1, 0.2, 0.2]
        pool.destroy()
    finally:
        broker.destroy()


def test_threads_run_handlers_off_the_hub(journal_dir):
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s", [(b"k", b"%d" % i) for i in range(50)])
        pool = Recorder(broker.endpoint, "s", "work", threads=True, concurrency=4)
        wait_for(lambda: len(pool.done) == 50)
        assert threading.get_ident() not in pool.threads_seen
        pool.destroy()
    finally:
        broker.destroy()
