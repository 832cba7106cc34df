"""The broker over real sockets, driven by raw MDP peers (spec framing)."""
import time

import gevent
import pytest

from zactors.patterns.majordomo import Broker, Client, HandshakeFailed
from tests.conftest import wait_for
from tests.patterns.majordomo.conftest import Count, Echo

pytestmark = pytest.mark.timeout(60)


def counters(broker):
    return broker.call("INFO", timeout=5)["counters"]


def ready(peers, broker, service=b"echo", identity=None, idempotent=False):
    worker = peers(broker.worker_endpoint, identity)
    worker.send(b"MDPW02", b"\x01", service, *([b"idempotent"] if idempotent else []))
    wait_for(lambda: broker.call("INFO")["workers"] >= 1, 5, "worker registered")
    return worker


def test_spec_round_trip_with_partials(broker, peers):
    worker = ready(peers, broker)
    client = peers(broker.endpoint)
    client.send(b"MDPC02", b"\x01", b"echo", b"hello", b"world")
    request = worker.recv()
    assert request[:2] == [b"MDPW02", b"\x02"] and request[3:] == [b"", b"hello", b"world"]
    address = request[2]
    worker.send(b"MDPW02", b"\x03", address, b"", b"part")
    worker.send(b"MDPW02", b"\x04", address, b"", b"end", b"x")
    assert client.recv() == [b"MDPC02", b"\x02", b"echo", b"part"]
    assert client.recv() == [b"MDPC02", b"\x03", b"echo", b"end", b"x"]
    assert client.recv(timeout=0.3) is None
    c = counters(broker)
    assert (c["requests"], c["partials"], c["replies"]) == (1, 1, 1)


def test_least_recently_used_worker_first(broker, peers):
    a = ready(peers, broker, identity=b"A")
    b = peers(broker.worker_endpoint, b"B")
    b.send(b"MDPW02", b"\x01", b"echo")
    wait_for(lambda: broker.call("INFO")["workers"] == 2, 5, "two workers")
    client = peers(broker.endpoint)
    for expected in (a, b, a):
        client.send(b"MDPC02", b"\x01", b"echo", b"q")
        request = expected.recv()
        assert request is not None and request[1] == b"\x02"
        expected.send(b"MDPW02", b"\x04", request[2], b"", b"r")
        assert client.recv()[1] == b"\x03"


def test_queued_request_goes_to_the_worker_that_frees_up(peers):
    with Broker(heartbeat=5.0) as broker:  # no timer of the broker can be what dispatches it
        _queued_request_goes_to_the_worker_that_frees_up(broker, peers)


def _queued_request_goes_to_the_worker_that_frees_up(broker, peers):
    worker = ready(peers, broker)
    c1, c2 = peers(broker.endpoint), peers(broker.endpoint)
    c1.send(b"MDPC02", b"\x01", b"echo", b"one")
    first = worker.recv()
    c2.send(b"MDPC02", b"\x01", b"echo", b"two")
    wait_for(lambda: broker.call("INFO")["queued"] == 1, 5, "second request queued")
    worker.send(b"MDPW02", b"\x04", first[2], b"", b"one")
    second = worker.recv(timeout=1.0)  # well under one heartbeat (5 s): dispatched on FINAL, not on a timer
    assert second is not None and second[-1] == b"two"
    assert c1.recv()[-1] == b"one"


def test_unexpected_commands_get_disconnect(broker, peers):
    stranger = peers(broker.worker_endpoint)
    stranger.send(b"MDPW02", b"\x05")                          # HEARTBEAT before READY
    assert stranger.recv() == [b"MDPW02", b"\x06"]
    idle = ready(peers, broker)
    idle.send(b"MDPW02", b"\x04", b"nobody", b"", b"x")        # a reply it owes nobody
    assert idle.recv() == [b"MDPW02", b"\x06"]
    wait_for(lambda: broker.call("INFO")["workers"] == 0, 5, "worker forgotten")
    twice = ready(peers, broker)
    twice.send(b"MDPW02", b"\x01", b"echo")                    # a second READY
    assert twice.recv() == [b"MDPW02", b"\x06"]
    assert counters(broker)["unexpected"] == 3


def test_invalid_messages_dropped_and_counted(broker, peers):
    bad = peers(broker.endpoint)
    for frames in ([b"junk"], [b"MDPC02", b"\x09", b"x", b"y"], [b"", b"MDPC02", b"\x01", b"echo", b"x"]):
        bad.send(*frames)
    wait_for(lambda: counters(broker).get("invalid") == 3, 5, "3 invalid counted")
    assert bad.recv(timeout=0.2) is None


def test_mmi(broker, workers):
    workers(Echo, broker.worker_endpoint)
    wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "worker")
    with Client(broker.endpoint) as client:
        assert client.request("mmi.service", "echo") == [[b"200"]]
        assert client.request("mmi.service", "nothing") == [[b"404"]]
        assert client.request("mmi.workers", "echo") == [[b"501"]]


def test_request_for_absent_service_expires(peers):
    with Broker(heartbeat=0.1, request_expiry=0.3) as broker:
        client = peers(broker.endpoint)
        client.send(b"MDPC02", b"\x01", b"late", b"q")
        wait_for(lambda: broker.call("INFO")["queued"] == 1, 5, "queued")
        started = time.monotonic()
        wait_for(lambda: counters(broker).get("expired") == 1, 5, "expiry")
        assert time.monotonic() - started < 1.5
        info = broker.call("INFO")
        assert info["queued"] == 0 and "late" not in info["services"]
        worker = ready(peers, broker, b"late")
        assert worker.recv(timeout=0.3) is None  # expired means never delivered
        assert client.recv(timeout=0.1) is None  # and the client is told nothing (its timeout decides)


def test_queue_limit_rejects_new_requests(peers):
    with Broker(max_queue=2) as broker:
        client = peers(broker.endpoint)
        for i in range(3):
            client.send(b"MDPC02", b"\x01", b"busy", b"%d" % i)
        wait_for(lambda: counters(broker).get("rejected") == 1, 5, "one rejected")
        assert broker.call("INFO")["services"]["busy"]["queued"] == 2
        worker = ready(peers, broker, b"busy")
        assert worker.recv()[-1] == b"0"


@pytest.mark.parametrize("interval,liveness", [(0.1, 3), (0.2, 4)])
def test_worker_heartbeat_loss_detected_within_liveness_intervals(peers, interval, liveness):
    with Broker(heartbeat=interval, liveness=liveness) as broker:
        worker = ready(peers, broker)
        assert worker.recv(skip_heartbeats=False) == [b"MDPW02", b"\x05"]   # the broker heartbeats us
        worker.send(b"MDPW02", b"\x05")
        last = time.monotonic()
        wait_for(lambda: counters(broker).get("workers_expired") == 1, 5, "worker expired")
        took = time.monotonic() - last
        assert took <= interval * liveness + 0.4, took      # (slack for a loaded machine's scheduler)
        assert took >= interval * liveness - 0.05, took


def test_an_idempotent_worker_leaving_mid_request_has_it_redispatched_once(broker, peers):
    a = ready(peers, broker, identity=b"A", idempotent=True)
    client = peers(broker.endpoint)
    client.send(b"MDPC02", b"\x01", b"echo", b"job")
    held = a.recv()
    b = peers(broker.worker_endpoint, b"B")
    b.send(b"MDPW02", b"\x01", b"echo")
    a.send(b"MDPW02", b"\x06")                                  # A leaves holding the request
    again = b.recv()
    assert again is not None and again[-1] == b"job"
    a.send(b"MDPW02", b"\x04", held[2], b"", b"from A")        # too late: A is not a worker any more
    b.send(b"MDPW02", b"\x04", again[2], b"", b"from B")
    assert client.recv() == [b"MDPC02", b"\x03", b"echo", b"from B"]
    assert client.recv(timeout=0.3) is None
    assert counters(broker)["redispatched"] == 1


def test_a_request_whose_worker_is_lost_is_not_run_again_and_the_client_is_told(broker, peers):
    a = ready(peers, broker, identity=b"A")                     # no idempotent frame: the spec's READY
    client = peers(broker.endpoint)
    client.send(b"MDPC02", b"\x01", b"echo", b"job")
    assert a.recv()[-1] == b"job"
    b = ready(peers, broker, identity=b"B")
    wait_for(lambda: broker.call("INFO")["workers"] == 2, 5, "B registered")
    a.send(b"MDPW02", b"\x06")                                  # A leaves holding the request
    reply = client.recv()
    assert reply[:4] == [b"MDPC02", b"\x03", b"echo", b"\x00MDP-ERROR"] and reply[4] == b"WorkerLost"
    assert b"it disconnected" in reply[5], reply
    assert b.recv(timeout=0.3) is None                           # B never sees it
    c = counters(broker)
    assert c["lost"] == 1 and "redispatched" not in c


def test_poison_request_dropped_after_max_attempts_by_distinct_workers(peers):
    with Broker(max_attempts=2) as broker:
        client = peers(broker.endpoint)
        client.send(b"MDPC02", b"\x01", b"echo", b"poison")
        for _ in range(2):
            w = ready(peers, broker, idempotent=True)
            assert w.recv()[-1] == b"poison"
            w.send(b"MDPW02", b"\x06")
            wait_for(lambda: broker.call("INFO")["workers"] == 0, 5, "worker gone")
        assert counters(broker)["poisoned"] == 1 and broker.call("INFO")["queued"] == 0
        reply = client.recv()
        assert reply[3:5] == [b"\x00MDP-ERROR", b"WorkerLost"]
        assert b"lost 2 time(s), by 2 worker(s)" in reply[5], reply


def test_lost_by_counts_workers_not_reconnections(peers):
    with Broker(max_attempts=3) as broker:
        client = peers(broker.endpoint)
        client.send(b"MDPC02", b"\x01", b"echo", b"poison")
        w = peers(broker.worker_endpoint, b"same")
        for _ in range(3):                                       # one worker, losing it three times
            w.send(b"MDPW02", b"\x01", b"echo", b"idempotent")
            assert w.recv()[-1] == b"poison"
            w.send(b"MDPW02", b"\x06")
        reply = client.recv()
        assert b"lost 3 time(s), by 1 worker(s)" in reply[5], reply


def test_two_endpoints(workers, peers):
    with Broker(worker_endpoint="tcp://127.0.0.1:*") as broker:
        assert broker.worker_endpoint != broker.endpoint
        workers(Count, broker.worker_endpoint)
        with Client(broker.endpoint) as client:
            assert client.request("count", "2") == [[b"0"], [b"1"], [b"done"]]
        peers(broker.endpoint).send(b"MDPW02", b"\x01", b"echo")                  # a worker at the client door
        peers(broker.worker_endpoint).send(b"MDPC02", b"\x01", b"count", b"1")    # a client at the worker door
        wait_for(lambda: broker.call("INFO")["counters"].get("invalid") == 2, 5, "both refused")
        assert broker.call("INFO")["workers"] == 1


def test_curve_broker(workers):
    from zactors.actors.auth import generate_keypair
    server, client_keys = generate_keypair(), generate_keypair()
    with Broker(curve=server) as broker:
        workers(Echo, broker.endpoint, curve=(server.public, generate_keypair()))
        with Client(broker.endpoint, curve=(server.public, client_keys)) as client:
            assert client.request("echo", "secret") == [[b"secret"]]
        with Client(broker.endpoint, timeout=0.3, retries=1) as plain:
            with pytest.raises(HandshakeFailed, match="uses another security mechanism"):
                plain.request("echo", "in clear")


def test_curve_access_through_the_kernel_authenticator(workers, tmp_path):
    from zactors.actors.auth import Authenticator, create_keypair, generate_keypair, load_keypair
    server = generate_keypair()
    allowed = load_keypair(create_keypair(str(tmp_path), "allowed")[1])
    with Authenticator(curve=str(tmp_path)) as auth, Broker(curve=server) as broker:
        workers(Echo, broker.endpoint, curve=(server.public, allowed))
        with Client(broker.endpoint, curve=(server.public, allowed)) as client:
            assert client.request("echo", "hello") == [[b"hello"]]
        with Client(broker.endpoint, curve=(server.public, generate_keypair()), timeout=0.3, retries=1) as stranger:
            with pytest.raises(HandshakeFailed, match="refused our key"):
                stranger.request("echo", "let me in")
        assert auth.call("$STATS").get("denied", 0) >= 1


def test_info_introspection(broker, workers, peers):
    workers(Echo, broker.worker_endpoint)
    client = peers(broker.endpoint)
    client.send(b"MDPC02", b"\x01", b"nobody", b"q")
    wait_for(lambda: broker.call("INFO")["queued"] == 1, 5, "queued")
    info = broker.call("INFO")
    assert info["endpoint"] == broker.endpoint and info["framing"] == "spec"
    assert info["services"]["echo"] == {"workers": 1, "idle": 1, "queued": 0}
    assert info["services"]["nobody"] == {"workers": 0, "idle": 0, "queued": 1}
    assert info["workers"] == 1 and info["counters"]["requests"] == 1


def test_many_concurrent_clients(broker, workers):
    for _ in range(3):
        workers(Echo, broker.worker_endpoint)
    with Client(broker.endpoint, pool_size=50) as client:
        jobs = [gevent.spawn(client.request, "echo", b"%d" % i) for i in range(300)]
        gevent.joinall(jobs, timeout=30, raise_error=True)
        assert [job.value for job in jobs] == [[[b"%d" % i]] for i in range(300)]
