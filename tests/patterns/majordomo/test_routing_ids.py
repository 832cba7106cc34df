"""Issue 20: peers that connect to an MDP broker with a routing id already in use.

libzmq's ROUTER (handover off) never read a connection whose routing id was taken, yet buffered up to
RCVHWM (1,000) of its messages, each frame up to ``max_message`` (16 MiB by default): ~16 GiB a duplicate
connection.  The newest connection holds the id now (ROUTER_HANDOVER), so what it sends is read (and
refused when invalid, counted); with CURVE a message of another key on a worker's or client's id ends
that peering, so it never acts as, or hears for, the first key.
"""
import json
import os
import signal
import sys

import gevent
import gevent.subprocess
import pytest
import zmq

from zactors.actors.auth import Authenticator, generate_keypair
from zactors.actors.sockets import Socket, context
from zactors.patterns.majordomo import Broker
from zactors.patterns.majordomo.protocol import SPEC, parse_error
from tests.patterns.zeps.test_budgets import MiB, poll, rss

pytestmark = pytest.mark.timeout(120)
HERE = os.path.dirname(os.path.abspath(__file__))


def dealer(endpoint, routing_id, curve=None):
    sock = context().socket(zmq.DEALER, socket_class=Socket)
    sock.linger = 0
    sock.routing_id = routing_id
    if curve is not None:
        server_public, keys = curve
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = server_public, keys.public, keys.secret
    sock.connect(endpoint)
    return sock


def recv(sock, timeout=10.0):
    """The next message on ``sock`` that is not a HEARTBEAT to a worker, or None after ``timeout``."""
    with gevent.Timeout(timeout, False):
        while True:
            frames = sock.recv_multipart()
            if frames != SPEC.heartbeat:
                return frames
    return None


def test_connections_reusing_a_routing_id_are_read_not_buffered(processes):
    proc = processes([sys.executable, os.path.join(HERE, "_budget_broker.py"), json.dumps({"max_message": 4 * MiB})],
                     stdout=gevent.subprocess.PIPE, text=True)
    endpoint = proc.stdout.readline().strip()
    assert endpoint.startswith("tcp://")

    def counters():
        proc.send_signal(signal.SIGUSR1)
        return json.loads(proc.stdout.readline())["counters"]

    junk = [b"JUNK", bytes(4 * MiB - 4096)]     # under max_message: refused only once read (invalid)
    socks = []
    try:
        base = rss(proc.pid)
        read = True
        for i in range(5):                      # 5 connections x 60 MiB with one routing id
            sock = dealer(endpoint, b"same-id")
            socks.append(sock)
            for _ in range(15):
                sock.send_multipart(junk)
            if read:    # (the old code never read the second: stop waiting there)
                read = poll(lambda: counters().get("invalid", 0) >= 15 * (i + 1), timeout=15)
        # the newest connection holds the id: it is answered
        socks[-1].send_multipart([b"MDPC02", b"\x01", b"mmi.service", b"echo"])
        answer = recv(socks[-1], timeout=15)
        grown = rss(proc.pid) - base
        print("broker RSS grew %.1f MiB for 5 connections x 60 MiB with one routing id" % (grown / MiB))
        assert answer is not None and answer[2:] == [b"mmi.service", b"404"], (answer, grown // MiB)
        assert counters()["invalid"] == 75      # every message of every connection read and refused
        assert grown < 100 * MiB, grown // MiB  # the old code held the 4 duplicates' 240 MiB
    finally:
        for sock in socks:
            sock.close(0)


@pytest.fixture
def secure():
    """A CURVE broker (ZAP: any key) and key pairs for alice (worker), carol (client), mallory (thief)."""
    server = generate_keypair()
    auth = Authenticator(curve="*")
    broker = Broker("tcp://127.0.0.1:*", curve=server, heartbeat=0.5, liveness=100)  # raw workers never beat: none expires
    made = []

    def connect(identity, keys):
        sock = dealer(broker.endpoint, identity, curve=(server.public, keys))
        made.append(sock)
        return sock

    try:
        yield broker, connect
    finally:
        for sock in made:
            sock.close(0)
        broker.destroy()
        auth.destroy()


def test_a_worker_id_taken_over_by_another_key_is_that_workers_disconnection(secure):
    broker, connect = secure
    alice, carol, mallory = generate_keypair(), generate_keypair(), generate_keypair()
    worker = connect(b"w1", alice)
    worker.send_multipart(SPEC.ready(b"echo"))
    poll(lambda: broker.call("INFO")["services"].get("echo", {}).get("workers") == 1, timeout=10)
    client = connect(b"c1", carol)
    client.send_multipart(SPEC.client_request(b"echo", [b"secret"]))
    request = recv(worker)
    assert request is not None and request[-1] == b"secret", request
    address = request[2]
    assert address != b"c1"                     # workers never learn client routing ids (to take over)
    thief = connect(b"w1", mallory)             # takes w1 over, then answers as if it were alice's worker
    thief.send_multipart(SPEC.worker_reply(True, address, [b"forged"]))
    reply = recv(client)                        # the old code never read the thief: nothing came
    assert reply is not None and parse_error(reply[3:])[0] == "WorkerLost", reply
    info = broker.call("INFO")
    assert info["counters"]["peers_taken_over"] == 1 and info["counters"]["lost"] == 1
    assert info["workers"] == 0                 # the thief inherits no registration: its FINAL was unexpected
    assert recv(thief, timeout=5)[1:2] == [b"\x06"]     # DISCONNECT
    client.send_multipart(SPEC.client_request(b"echo", [b"again"]))
    assert recv(thief, timeout=1) is None       # no request goes to the thief


def test_a_client_id_taken_over_by_another_key_hears_none_of_its_replies(secure):
    broker, connect = secure
    alice, carol, mallory = generate_keypair(), generate_keypair(), generate_keypair()
    worker = connect(b"w1", alice)
    worker.send_multipart(SPEC.ready(b"echo"))
    client = connect(b"c1", carol)
    client.send_multipart(SPEC.client_request(b"echo", [b"secret"]))
    request = recv(worker)
    assert request is not None and request[-1] == b"secret", request
    client.send_multipart(SPEC.client_request(b"echo", [b"queued"]))   # waits: the one worker is busy
    poll(lambda: broker.call("INFO")["queued"] == 1, timeout=10)
    thief = connect(b"c1", mallory)
    thief.send_multipart(SPEC.client_request(b"mmi.service", [b"echo"]))
    answer = recv(thief)                        # the old code never read the thief
    assert answer is not None and answer[-1] == b"200", answer
    worker.send_multipart(SPEC.worker_reply(True, request[2], [b"for carol only"]))
    poll(lambda: broker.call("$STATS").get("replies", 0) == 1, timeout=10)
    stats = broker.call("$STATS")
    assert stats["peers_taken_over"] == 1 and stats["replies_withheld"] == 1, stats
    assert stats["requests_withdrawn"] == 1 and stats.get("dispatched") == 1, stats    # carol's queued one
    assert recv(thief, timeout=1) is None       # carol's reply went to no one
    # and the worker serves the next request at once
    thief.send_multipart(SPEC.client_request(b"echo", [b"mallory's"]))
    request = recv(worker)
    assert request is not None and request[-1] == b"mallory's"
    worker.send_multipart(SPEC.worker_reply(True, request[2], [b"yours"]))
    reply = recv(thief)
    assert reply is not None and reply[-1] == b"yours", reply
    # peerings end with what they hold: the worker's is left (nothing per finished request)
    assert set(broker._crouter._peerings) == {b"w1"}
