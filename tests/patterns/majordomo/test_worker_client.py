"""Worker actors and clients against a live broker and against raw peers."""
import time

import gevent
import gevent.event
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.majordomo import Broker, Client, RequestTimeout, ServiceError, Worker
from tests.conftest import wait_for
from tests.patterns.majordomo.conftest import Count, Echo, recv_skipping

pytestmark = pytest.mark.timeout(60)


class FakeBroker:
    """A raw ROUTER playing the broker."""

    def __init__(self):
        self.sock = context().socket(zmq.ROUTER, socket_class=Socket)
        self.sock.linger = 0
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.last_endpoint.decode()

    def recv(self, timeout=5.0, skip_heartbeats=True):
        return recv_skipping(self.sock, timeout, skip_heartbeats and _heartbeat_from_worker)


def _heartbeat_from_worker(frames):
    return frames[1:] == [b"MDPW02", b"\x05"]


@pytest.fixture
def fake():
    f = FakeBroker()
    yield f
    f.sock.close(0)


def test_worker_ready_heartbeat_and_clean_disconnect(fake, workers):
    worker = workers(Echo, fake.endpoint, heartbeat=0.1)
    identity, *ready = fake.recv()
    assert ready == [b"MDPW02", b"\x01", b"echo"]
    assert fake.recv(skip_heartbeats=False)[1:] == [b"MDPW02", b"\x05"]
    fake.sock.send_multipart([identity, b"MDPW02", b"\x02", b"C9", b"", b"ping"])
    assert fake.recv() == [identity, b"MDPW02", b"\x04", b"C9", b"", b"ping"]
    worker.destroy()
    assert fake.recv() == [identity, b"MDPW02", b"\x06"]


def test_worker_reconnects_on_disconnect(fake, workers):
    worker = workers(Echo, fake.endpoint, reconnect=0.05)
    first, *_ = fake.recv()
    fake.sock.send_multipart([first, b"MDPW02", b"\x06"])
    second, *ready = fake.recv()
    assert ready == [b"MDPW02", b"\x01", b"echo"] and second != first  # a new socket
    assert worker.call("$STATS")["reconnects"] == 1


def test_worker_reconnects_after_broker_loss(workers):
    broker = Broker("tcp://127.0.0.1:*", heartbeat=0.1, liveness=3)
    endpoint = broker.endpoint
    worker = workers(Echo, endpoint, heartbeat=0.1, liveness=3, reconnect=0.05, reconnect_max=0.2)
    wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "registered")
    broker.destroy()
    gone = time.monotonic()
    event = worker.recv_event(timeout=5)
    while event is not None and event.name != "DISCONNECTED":
        event = worker.recv_event(timeout=5)
    assert event is not None and "silent" in event.args[0]
    assert time.monotonic() - gone <= 0.1 * 3 + 0.4       # within liveness x heartbeat of the last word (+ slack)
    with Broker(endpoint, heartbeat=0.1, liveness=3) as again:   # a restarted broker, same address
        wait_for(lambda: again.call("INFO")["workers"] == 1, 10, "re-registered")
        with Client(endpoint) as client:
            assert client.request("echo", "back") == [[b"back"]]


class Slow(Worker):
    """Streams without partials for ``request[0]`` seconds: heartbeats must still flow."""
    service = b"slow"

    def handle(self, request):
        deadline = time.monotonic() + float(request[0])
        while time.monotonic() < deadline:
            gevent.sleep(0.01)
            yield None
        return [b"slept"]


def test_heartbeats_flow_while_a_generator_works(workers):
    with Broker(heartbeat=0.1, liveness=3) as broker:
        workers(Slow, broker.endpoint, heartbeat=0.1, liveness=3)
        with Client(broker.endpoint, timeout=5) as client:
            assert client.request("slow", "1.0") == [[b"slept"]]      # over 3x the 0.3 s liveness
        c = broker.call("INFO")["counters"]
        assert "workers_expired" not in c and "redispatched" not in c


class Failing(Worker):
    service = b"fail"

    def handle(self, request):
        raise RuntimeError("boom")

    def on_error(self, request, exc):
        return [b"error", str(exc)]


def test_handler_error_reply(broker, workers):
    workers(Failing, broker.endpoint)
    with Client(broker.endpoint) as client:
        assert client.request("fail", "x") == [[b"error", b"boom"]]


def test_stream_yields_partials_as_they_arrive(broker, workers):
    go = gevent.event.Event()

    class Gate(Worker):
        service = b"gate"

        def handle(self, request):
            yield [b"first"]
            while not go.is_set():
                gevent.sleep(0.01)
                yield None
            return [b"last"]

    workers(Gate, broker.endpoint)
    with Client(broker.endpoint) as client:
        replies = client.stream("gate", "x")
        assert next(replies) == [b"first"]      # before the worker may finish
        go.set()
        assert list(replies) == [[b"last"]]


def test_partials_from_a_worker_actor(broker, workers):
    workers(Count, broker.endpoint)
    with Client(broker.endpoint) as client:
        assert client.request("count", "3") == [[b"0"], [b"1"], [b"2"], [b"done"]]


def test_client_retries_on_new_sockets_then_fails(fake):
    client = Client(fake.endpoint, timeout=0.2, retries=3)
    job = gevent.spawn(client.request, "echo", "q")
    identities = []
    for _ in range(3):
        frames = fake.recv()
        assert frames[1:] == [b"MDPC02", b"\x01", b"echo", b"q"]
        identities.append(frames[0])
    job.join(5)
    assert isinstance(job.exception, RequestTimeout) and "3 attempt" in str(job.exception)
    assert len(set(identities)) == 3            # closed and reopened each time
    assert client.stats["retries"] == 2 and client.stats["failed"] == 1
    client.close()


def test_client_ignores_invalid_replies(fake):
    client = Client(fake.endpoint, timeout=2)
    job = gevent.spawn(client.request, "echo", "q")
    identity = fake.recv()[0]
    fake.sock.send_multipart([identity, b"garbage"])
    fake.sock.send_multipart([identity, b"MDPC02", b"\x03", b"other", b"x"])   # another service's reply
    fake.sock.send_multipart([identity, b"MDPC02", b"\x03", b"echo", b"ok"])
    assert job.get(timeout=5) == [[b"ok"]]
    assert client.stats["invalid"] == 1 and client.stats["stale"] == 1
    client.close()


def test_client_from_gevent_wsgi_handlers(broker, workers):
    from gevent.pywsgi import WSGIServer
    for _ in range(2):
        workers(Echo, broker.endpoint)
    client = Client(broker.endpoint)

    def app(environ, start_response):
        reply = client.request("echo", environ["PATH_INFO"][1:])
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [reply[-1][0]]

    server = WSGIServer(("127.0.0.1", 0), app, log=None)
    server.start()
    try:
        def get(i):
            conn = gevent.socket.create_connection(("127.0.0.1", server.server_port), timeout=10)
            conn.sendall(b"GET /hello%d HTTP/1.0\r\nHost: x\r\n\r\n" % i)
            data = b""
            while True:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            conn.close()
            return data
        import gevent.socket  # noqa: F401  (cooperative sockets without patching)
        jobs = [gevent.spawn(get, i) for i in range(20)]
        gevent.joinall(jobs, timeout=20, raise_error=True)
        for i, job in enumerate(jobs):
            assert job.value.startswith(b"HTTP/1.1 200") and job.value.endswith(b"hello%d" % i)
    finally:
        server.stop()
        client.close()


def test_reconnect_backs_off_while_the_broker_stays_silent(fake, workers):
    workers(Echo, fake.endpoint, heartbeat=0.05, liveness=2, reconnect=0.05, reconnect_max=2.0)
    arrivals = []
    while len(arrivals) < 5:
        frames = fake.recv(timeout=5)
        assert frames is not None, "no READY"
        if frames[1:] == [b"MDPW02", b"\x01", b"echo"]:
            arrivals.append(time.monotonic())
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]   # 0.1 s of silence + 0.05, 0.1, 0.2, 0.4 s of delay
    assert gaps[3] > gaps[0] + 0.15 and gaps[3] > gaps[1], gaps


class Crashing(Worker):
    service = b"flaky"
    runs = 0

    def handle(self, request):
        Crashing.runs += 1
        raise RuntimeError("crash on %s" % request[0].decode())


def test_a_handler_error_travels_back_at_once_and_the_request_runs_once(broker, workers):
    Crashing.runs = 0
    workers(Crashing, broker.endpoint)
    wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "crashing worker")
    with Client(broker.endpoint, timeout=5, retries=3) as client:
        started = time.monotonic()
        with pytest.raises(ServiceError) as raised:
            client.request("flaky", "x")
        assert time.monotonic() - started < 2.5                  # at once, not after timeout x retries
        assert client.stats["retries"] == 0 and client.stats["errors"] == 1
    error = raised.value
    assert (error.service, error.kind, error.message) == (b"flaky", "RuntimeError", "crash on x")
    assert str(error) == "service 'flaky' failed: RuntimeError: crash on x"
    assert Crashing.runs == 1
    c = broker.call("INFO")["counters"]
    assert c["replies"] == 1 and "redispatched" not in c and "poisoned" not in c


class GivesBack(Crashing):
    idempotent = True

    def on_error(self, request, exc):
        return None                                              # give the request back


def test_an_idempotent_worker_that_gives_a_request_back_has_it_served_by_another(broker, workers):
    workers(GivesBack, broker.endpoint)
    wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "crashing worker")

    class Steady(Worker):
        service = b"flaky"

        def handle(self, request):
            return [b"steady"]
    workers(Steady, broker.endpoint)
    wait_for(lambda: broker.call("INFO")["workers"] == 2, 5, "both workers")
    with Client(broker.endpoint, timeout=5) as client:
        for _ in range(4):
            assert client.request("flaky", "x") == [[b"steady"]]
    assert broker.call("INFO")["counters"].get("redispatched", 0) >= 1


def test_more_callers_than_pool_sockets(broker, workers):
    workers(Echo, broker.endpoint)
    with Client(broker.endpoint, pool_size=2) as client:
        jobs = [gevent.spawn(client.request, "echo", b"%d" % i) for i in range(20)]
        gevent.joinall(jobs, timeout=20, raise_error=True)
        assert [job.value for job in jobs] == [[[b"%d" % i]] for i in range(20)]
        assert len(client._idle) <= 2
