"""Issue 20: peers that connect to a Clone server's snapshot ROUTER with a routing id already in use.

libzmq's ROUTER (handover off) never read a connection whose routing id was taken, yet buffered up to
RCVHWM (1,000) of its messages, of any number of frames (the frame cap is per frame): duplicates held
what they sent.  The newest connection holds the id now (ROUTER_HANDOVER), so what it sends is read
and refused (``multipart_refused``); with CURVE a message of another key on the id of a snapshot under
way ends that snapshot first (``peers_taken_over``).
"""
import json
import signal
import sys
import uuid

import gevent
import gevent.subprocess
import pytest
import zmq

from zactors.actors.auth import Authenticator, generate_keypair
from zactors.actors.sockets import Socket, context
from zactors.patterns.clone.protocol import DISCOVERY, KTHXBAI, encode_icanhaz
from zactors.patterns.clone.server import CloneServer
from tests.conftest import wait_for
from tests.patterns.zeps.test_budgets import MiB, poll, rss

pytestmark = pytest.mark.timeout(120)

SERVER = """
import json, signal, gevent
from zactors.patterns.clone.server import CloneServer
server = CloneServer(0)
gevent.signal_handler(signal.SIGUSR1, lambda: gevent.spawn(lambda: print(json.dumps(server.call("INFO")), flush=True)))
print(server.endpoints[0], flush=True)
gevent.wait()
"""


def dealer(endpoint, routing_id, curve=None, **options):
    sock = context().socket(zmq.DEALER, socket_class=Socket)
    sock.linger = 0
    sock.routing_id = routing_id
    for name, value in options.items():
        setattr(sock, name, value)
    if curve is not None:
        server_public, keys = curve
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = server_public, keys.public, keys.secret
    sock.connect(endpoint)
    return sock


def recv(sock, timeout):
    """The next message on ``sock``, or None after ``timeout``."""
    with gevent.Timeout(timeout, False):
        return sock.recv_multipart()
    return None


def test_connections_reusing_a_routing_id_are_read_not_buffered(processes):
    proc = processes([sys.executable, "-c", SERVER], stdout=gevent.subprocess.PIPE, text=True)
    endpoint = proc.stdout.readline().strip()
    assert endpoint.startswith("tcp://")

    def counters():
        proc.send_signal(signal.SIGUSR1)
        return json.loads(proc.stdout.readline())["counters"]

    junk = [b"ICANHAZ?"] + [bytes(4000)] * 63     # frames under MAX_REQUEST; 64 of them: refused once read
    socks = []
    try:
        base = rss(proc.pid)
        read = True
        for i in range(5):                          # 5 connections x 50 MiB with one routing id
            sock = dealer(endpoint, b"same-id")
            socks.append(sock)
            for _ in range(200):
                sock.send_multipart(junk)
            if read:    # (the old code never read the second: stop waiting there)
                read = poll(lambda: counters().get("multipart_refused", 0) >= 200 * (i + 1), timeout=15)
        socks[-1].send_multipart(encode_icanhaz(DISCOVERY))     # the newest holds the id: answered
        answer = recv(socks[-1], 15)
        grown = rss(proc.pid) - base
        print("Clone server RSS grew %.1f MiB for 5 connections x 50 MiB with one routing id" % (grown / MiB))
        assert answer is not None and answer[0] == KTHXBAI and answer[-1] == DISCOVERY, (answer, grown // MiB)
        assert counters()["multipart_refused"] == 1000  # every message of every connection read and refused
        assert grown < 100 * MiB, grown // MiB      # the old code held the 4 duplicates' 200 MiB
    finally:
        for sock in socks:
            sock.close(0)


def test_a_snapshot_id_taken_over_by_another_key_ends_that_snapshot():
    keys, alice, mallory = generate_keypair(), generate_keypair(), generate_keypair()
    auth = Authenticator(curve="*")
    server = CloneServer(0, curve=keys, snapshot_hwm=20, window=20, chunk=10)
    pub = context().socket(zmq.PUB, socket_class=Socket)
    pub.linger, pub.sndhwm = 0, 0
    pub.curve_serverkey, pub.curve_publickey, pub.curve_secretkey = keys.public, alice.public, alice.secret
    pub.connect(server.endpoints[2])
    socks = [pub]
    try:
        def probe():
            pub.send_multipart([b"probe", bytes(8), uuid.uuid4().bytes, b"", b"1"])
            return server.call("GET", "probe") == b"1"
        wait_for(probe, timeout=20, what="the publisher reaches the server")
        for i in range(3000):                       # 12 MB: more than the socket buffers take
            pub.send_multipart([b"k%06d" % i, bytes(8), uuid.uuid4().bytes, b"", bytes(4096)])
        wait_for(lambda: server.call("INFO")["keys"] == 3001, timeout=30, what="the map loaded")
        victim = dealer(server.endpoint, b"victim", (keys.public, alice), rcvhwm=1, rcvbuf=4096)
        socks.append(victim)
        victim.send_multipart(encode_icanhaz())     # never read: the snapshot waits on its backpressure
        wait_for(lambda: server.call("INFO")["snapshots"]["active"] == 1, timeout=10, what="the snapshot runs")
        thief = dealer(server.endpoint, b"victim", (keys.public, mallory))
        socks.append(thief)
        thief.send_multipart(encode_icanhaz(DISCOVERY))
        kthxbai = []
        with gevent.Timeout(15, False):             # the old code never read the thief: nothing came
            while not kthxbai or kthxbai[-1][-1] != DISCOVERY:
                frames = thief.recv_multipart()
                if frames[0] == KTHXBAI:
                    kthxbai.append(frames)
        assert kthxbai and kthxbai[-1][-1] == DISCOVERY, kthxbai
        info = server.call("INFO")
        assert info["counters"]["peers_taken_over"] == 1 and info["snapshots"]["active"] == 0, info
        # alice's snapshot ended: none of it completes on the thief's connection
        frames = recv(thief, 1.0)
        while frames is not None and frames[0] != KTHXBAI:
            frames = recv(thief, 1.0)
        assert frames is None and len(kthxbai) == 1, frames
        assert server.call("INFO")["counters"].get("snapshots_sent", 0) == 0
    finally:
        for sock in socks:
            sock.close(0)
        server.destroy()
        auth.destroy()
