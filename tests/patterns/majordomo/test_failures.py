"""Failures the broker must survive: a worker process killed mid-request, a flood of garbage."""
import os
import random
import signal
import sys

import gevent
import gevent.subprocess
import pytest

from zactors.patterns.majordomo import Client
from zactors.patterns.majordomo.protocol import CLIENT, SPEC, WORKER, ProtocolError
from tests.conftest import wait_for
from tests.patterns.majordomo.conftest import Echo
from tests.patterns.majordomo._worker_process import Slow



@pytest.fixture
def spawn(processes):
    return lambda *args: processes([sys.executable, "-m", "tests.patterns.majordomo._worker_process", *args],
                                   stdout=gevent.subprocess.PIPE)


class Quick(Slow):
    delay = 0.02


@pytest.mark.timeout(60)
@pytest.mark.parametrize("idempotent", [True, False])
def test_sigkilled_worker_process_every_request_gets_one_final(broker, workers, peers, spawn, idempotent):
    proc = spawn(broker.worker_endpoint, "work", "30", *(["idempotent"] if idempotent else []))
    assert proc.stdout.readline().strip() == b"READY"
    wait_for(lambda: broker.call("INFO")["workers"] == 1, 20, "worker process registered")
    clients = [peers(broker.endpoint) for _ in range(10)]
    for i, client in enumerate(clients):
        client.send(b"MDPC02", b"\x01", b"work", b"%d" % i)
    held = int(proc.stdout.readline().split()[1])                # the process holds this request
    workers(Quick, broker.worker_endpoint, service=b"work")     # the survivor, after the kill is decided
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    for i, client in enumerate(clients):
        reply = client.recv(timeout=20)
        if i == held and not idempotent:                         # not run again: the client is told
            assert reply[:5] == [b"MDPC02", b"\x03", b"work", b"\x00MDP-ERROR", b"WorkerLost"], reply
        else:
            assert reply == [b"MDPC02", b"\x03", b"work", b"done", b"%d" % i]
    assert clients[0].recv(timeout=0.3) is None              # exactly one FINAL each: nothing follows
    assert all(client.recv(timeout=0.01) is None for client in clients)
    c = broker.call("INFO")["counters"]
    if idempotent:
        assert c["redispatched"] >= 1 and c["replies"] == 10
    else:
        assert c["lost"] == 1 and "redispatched" not in c and c["replies"] == 9
    assert c.get("workers_lost", 0) + c.get("workers_expired", 0) == 1


def malformed(rng):
    """One message the broker must reject as invalid (never a valid command)."""
    def junk(n):
        return bytes(rng.getrandbits(8) for _ in range(n))

    def frames(lo, hi):
        return [junk(rng.randrange(6)) for _ in range(rng.randrange(lo, hi))]
    kind = rng.randrange(9)
    if kind == 0:
        head = junk(rng.randrange(8))
        return [head if head not in (CLIENT, WORKER) else b"X"] + frames(0, 5)
    if kind == 1:
        return [CLIENT, rng.choice([b"", b"\x00", b"\x02", b"\x03", b"\x01\x01", junk(3)])] + frames(1, 4)
    if kind == 2:
        return [CLIENT, b"\x01"] + frames(0, 2)
    if kind == 3:
        bad = rng.choice([b"", junk(2) + bytes([rng.choice([0, 9, 31, 127, 200, 255])])])
        return [CLIENT, b"\x01", bad] + frames(1, 3)
    if kind == 4:
        return [WORKER, rng.choice([b"", b"\x00", b"\x07", b"\xff", b"\x01\x05", junk(4)])] + frames(0, 4)
    if kind == 5:
        return [WORKER, b"\x01"] + rng.choice([[], [b"echo", b"x"], [b"", b"", b""]])
    if kind == 6:
        cmd = rng.choice([b"\x03", b"\x04"])
        return rng.choice([[WORKER, cmd, b"C", b"not empty", b"x"], [WORKER, cmd, b"", b"", b"x"],
                           [WORKER, cmd, b"C", b""], [WORKER, cmd, b"C"]])
    if kind == 7:
        return [WORKER, rng.choice([b"\x05", b"\x06"])] + frames(1, 4)
    return [WORKER, b"\x02", b"C", b"", b"body"]


@pytest.mark.timeout(90)
def test_10k_malformed_messages_at_a_live_broker(broker, workers, peers):
    rng = random.Random(18)
    garbage = [malformed(rng) for _ in range(10000)]
    for frames in garbage:
        with pytest.raises(ProtocolError):
            SPEC.decode_for_broker(frames)
    workers(Echo, broker.worker_endpoint)
    wait_for(lambda: broker.call("INFO")["workers"] == 1, 10, "worker")
    fuzzers = [peers(broker.endpoint) for _ in range(4)]
    answered = []

    def valid_traffic():
        with Client(broker.endpoint, timeout=10) as client:
            for i in range(200):
                answered.append(client.request("echo", b"%d" % i) == [[b"%d" % i]])

    job = gevent.spawn(valid_traffic)
    for n, frames in enumerate(garbage):
        fuzzers[n % 4].send(*frames)
    job.join(60)
    assert job.successful() and len(answered) == 200 and all(answered)
    wait_for(lambda: broker.call("INFO")["counters"].get("invalid") == 10000, 30, "10000 invalid counted")
    info = broker.call("INFO")
    assert info["workers"] == 1 and broker.alive
    assert "unexpected" not in info["counters"] and info["counters"]["replies"] == 200
    with Client(broker.endpoint) as client:
        assert client.request("echo", "still here") == [[b"still here"]]
