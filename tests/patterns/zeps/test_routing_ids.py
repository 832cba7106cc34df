"""Issue 20: peers that connect with a routing id already in use.

libzmq's ROUTER (handover off) never read a connection whose routing id was taken, yet buffered up to RCVHWM
(1,000) of its frames, each up to ``max_message``: five such connections sending 300 MiB each took the broker
from 34 MiB to 1.5 GiB.  The newest connection takes the id now (ROUTER_HANDOVER), so what it sends is read
and refused; with permissions it cannot act with the key of the peering it took over.
"""
import gevent
import pytest
import zmq

from zactors.actors.auth import Authenticator, generate_keypair
from zactors.actors.sockets import Socket, context
from zactors.patterns.zeps import Publisher, Subscriber, ZepsError, protocol as p
from zactors.patterns.zeps.permissions import Permissions

from .conftest import Raw
from .test_budgets import MiB, nofile, open_fds, poll, spawn  # noqa: F401 - spawn: the fixture

pytestmark = pytest.mark.timeout(120)
pytest.importorskip("zactors.actors.journal")


def dealer(endpoint, routing_id, curve=None):
    sock = context().socket(zmq.DEALER, socket_class=Socket)
    sock.linger = 0
    sock.sndhwm = 0
    sock.routing_id = routing_id
    if curve is not None:
        server_public, keys = curve
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = server_public, keys.public, keys.secret
    sock.connect(endpoint)
    return sock


def test_connections_reusing_a_routing_id_cannot_make_the_broker_buffer_their_frames(spawn):
    broker = spawn(preexec_fn=nofile(1024), streams=["good"])
    pub = Publisher(broker.endpoint, "good")
    sub = Subscriber(broker.endpoint, "good", from_seq=0)
    frame = p.publish(b"k", b"x" * (MiB - 64))    # under max_message: each one is a PUBLISH before ATTACH
    socks = []
    try:
        base = broker.rss()
        for _ in range(8):                          # 8 x 40 MiB with one routing id
            sock = dealer(broker.endpoint, b"same-id")
            socks.append(sock)
            for _ in range(40):
                sock.send(frame, copy=False)
        # the newest connection holds the id: what it sends is read (the old code never read it, and kept
        # the frames of all but the first in libzmq: ~280 MiB more); what the others sent is dropped
        last = Raw.__new__(Raw)
        last.sock = socks[-1]
        last.send(p.QUERY_FRAME)
        with gevent.Timeout(30, AssertionError("the connection holding the routing id is never read")):
            while True:
                answer = last.recv(timeout=30)
                if type(answer) is p.QueryOk:
                    break
        assert poll(lambda: broker.rss() - base < 150 * MiB, timeout=10), (broker.rss() - base) // MiB
        pub.publish(b"k", b"served")
        pub.flush(timeout=20)
        assert sub.get(timeout=20).body == b"served"
        # and 600 more with that id under ulimit -n 1024: past the connection budget they are shut
        for i in range(600):
            socks.append(dealer(broker.endpoint, b"same-id"))
            if i % 100 == 99:
                pub.publish(b"k", b"%d" % i)
                pub.flush(timeout=20)
                assert sub.get(timeout=20).body == b"%d" % i
                assert open_fds(broker.pid) < 1000
        for sock in socks:          # (a QUERY needs a connection too: asked once they are gone)
            sock.close(0)
        socks = []
        def refused():
            try:        # (the broker may still be taking the closed connections off its count: asked again)
                return broker.counters().get("connections_refused", 0) > 0
            except ZepsError:
                return False
        assert poll(refused, timeout=60)
        assert broker.proc.poll() is None
    finally:
        for sock in socks:
            sock.close(0)
        pub.close()
        sub.destroy()


def test_a_routing_id_taken_over_by_another_key_does_not_publish_with_the_first_keys_rights(journal_dir):
    from zactors.patterns.zeps.broker import Broker
    server, alice, mallory = generate_keypair(), generate_keypair(), generate_keypair()
    perms = Permissions([(alice.public, "publish,subscribe,create", "orders")])
    auth = Authenticator(curve="*")
    broker = Broker(journal_dir, curve=server, permissions=perms)
    victim = thief = None
    try:
        victim = Raw.__new__(Raw)
        victim.sock = dealer(broker.endpoint, b"victim", curve=(server.public, alice))
        victim.send(p.attach(b"orders"))
        victim.expect(p.AttachOk)
        victim.send(p.publish(b"k", b"alice"))
        victim.send(p.PING_FRAME)
        victim.expect(p.PingOk)
        thief = Raw.__new__(Raw)
        thief.sock = dealer(broker.endpoint, b"victim", curve=(server.public, mallory))
        thief.send(p.publish(b"k", b"forged"))
        thief.send(p.PING_FRAME)
        with gevent.Timeout(10):    # refused: the peering it took was alice's (the old code never read it)
            answer = thief.recv(timeout=10)
        assert type(answer) is p.Invalid and "before ATTACH" in answer.reason, answer
        assert broker.call("INFO")["streams"]["orders"]["last_seq"] == 1
        assert broker.call("$STATS")["peers_taken_over"] == 1
    finally:
        for peer in (victim, thief):
            if peer is not None:
                peer.close()
        broker.destroy()
        auth.destroy()
