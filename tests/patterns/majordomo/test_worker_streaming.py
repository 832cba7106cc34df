"""The Worker streams as a cooperative task and survives bad handlers (defects 3 and 7)."""
import logging
import time

import gevent
import pytest

from zactors.patterns.majordomo import Broker, Client, ServiceError, Worker
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


class Endless(Worker):
    """Streams forever: a PARTIAL every 200 steps, ``yield None`` between them."""
    service = b"endless"

    def handle(self, request):
        step = 0
        while True:
            step += 1
            yield [b"%d" % step] if step % 200 == 0 else None


@pytest.fixture
def broker():
    b = Broker("tcp://127.0.0.1:*", heartbeat=0.2, liveness=5, request_expiry=30.0)
    yield b
    b.destroy()


def _streaming(broker, workers):
    worker = workers(Endless, broker.endpoint)
    wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "the worker registered")
    client = Client(broker.endpoint, timeout=30, retries=1)
    received = []

    def consume():
        for part in client.stream("endless", "go"):
            received.append(part)

    consumer = gevent.spawn(consume)
    wait_for(lambda: len(received) >= 3, 10, "partials arriving")
    return worker, client, consumer, received


def test_stats_are_answered_during_a_stream(broker, workers):
    worker, client, consumer, received = _streaming(broker, workers)
    try:
        partials = []
        for _ in range(10):
            started = time.monotonic()
            stats = worker.call("$STATS", timeout=5)
            assert time.monotonic() - started < 0.5
            partials.append(stats["partials"])
        assert partials == sorted(partials) and partials[-1] > partials[0], "the stream stalled"
    finally:
        consumer.kill()
        client.close()


def test_term_during_a_stream_returns_at_once(broker, workers):
    worker, client, consumer, received = _streaming(broker, workers)
    try:
        started = time.monotonic()
        worker.destroy()
        elapsed = time.monotonic() - started
        assert elapsed < 0.1, "destroy() took %.3fs" % elapsed
        assert not worker.alive
    finally:
        consumer.kill()
        client.close()


class Sloppy(Worker):
    """Good replies, except for the requests that ask for a bad one."""
    service = b"sloppy"

    def handle(self, request):
        kind = request[0]
        if kind == b"int":
            return 42
        if kind == b"raise":
            raise RuntimeError("handler bug")
        if kind == b"yield-int":
            return self._yields_int()
        if kind == b"stream-raise":
            return self._raises_midway()
        if kind == b"int-frame":
            return [b"ok", 42]
        return [b"ok"] + request

    def _yields_int(self):
        yield [b"partial"]
        yield 42

    def _raises_midway(self):
        yield [b"partial"]
        raise RuntimeError("stream bug")


@pytest.mark.parametrize("kind", [b"int", b"raise", b"yield-int", b"stream-raise", b"int-frame"])
def test_a_bad_handler_result_is_counted_and_the_worker_serves_on(broker, workers, caplog, kind):
    worker = workers(Sloppy, broker.endpoint, reconnect=0.01)
    wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "the worker registered")
    with Client(broker.endpoint, timeout=5.0, retries=1) as client:
        with caplog.at_level(logging.ERROR):
            with pytest.raises(ServiceError) as raised:
                client.request("sloppy", kind)  # an error reply, rather than a dead worker
        assert raised.value.kind == ("RuntimeError" if b"raise" in kind else "TypeError")
        assert worker.alive
        stats = worker.call("$STATS", timeout=5)
        assert stats["failed"] >= 1
        assert any(r.levelno >= logging.ERROR and "handler failed" in r.getMessage() for r in caplog.records)
        wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "the worker back")
        assert client.request("sloppy", "fine", timeout=5) == [[b"ok", b"fine"]]


class Recovering(Sloppy):
    def on_error(self, request, exc):
        return [b"error", type(exc).__name__]


def test_on_error_may_answer_a_non_reply_result(broker, workers):
    workers(Recovering, broker.endpoint)
    with Client(broker.endpoint, timeout=5, retries=1) as client:
        assert client.request("sloppy", "int") == [[b"error", b"TypeError"]]
        assert client.request("sloppy", "yield-int") == [[b"partial"], [b"error", b"TypeError"]]


class BrokenOnError(Sloppy):
    def on_error(self, request, exc):
        if request[0] == b"raise":
            raise ValueError("on_error bug")
        return 42  # not a reply either


@pytest.mark.parametrize("kind", [b"int", b"raise"])
def test_a_failing_on_error_does_not_kill_the_worker(broker, workers, kind):
    worker = workers(BrokenOnError, broker.endpoint, reconnect=0.01)
    wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "the worker registered")
    with Client(broker.endpoint, timeout=5.0, retries=1) as client:
        with pytest.raises(ServiceError) as raised:
            client.request("sloppy", kind)      # given back, and not run again: the broker says so
        assert raised.value.kind == "WorkerLost"
        assert worker.alive
        wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "the worker back")
        assert client.request("sloppy", "fine", timeout=5) == [[b"ok", b"fine"]]
