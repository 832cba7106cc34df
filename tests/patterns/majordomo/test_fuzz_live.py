"""Hypothesis against a live Majordomo broker: well-formed MDP commands with hostile contents.

Every message is built by the codec's own encoders (``Framing.client_request``,
``ready``, ``worker_reply``, ...) in both framings, so it reaches the broker's
state machine: READY twice or for ``mmi.*``, replies for requests never
given or for other workers' clients, HEARTBEAT from strangers, DISCONNECT mid
request, huge, empty and non-printable service names, big and empty bodies,
commands a broker never takes (replies meant for clients, requests meant for
workers), the same peer acting as client and worker.  Sent over tcp from a
pool of raw DEALERs, to a one-endpoint and a two-endpoint broker; the broker
must never die, and a valid client must still be served by a valid worker.
The worker side is fuzzed the same way: a hand-driven broker sends a real
Worker hostile REQUESTs (odd addresses, huge bodies), stray client replies,
READYs, HEARTBEATs and DISCONNECTs, mid-stream too; and the client side: a
hand-driven broker answers a real Client with stale, partial, final and
misdirected replies before the valid one.
"""
import gevent
import pytest
import zmq
from hypothesis import HealthCheck, given, settings, strategies as st

from zactors.actors.sockets import Socket, context
from zactors.patterns.majordomo import Broker, Client
from zactors.patterns.majordomo import protocol as mdp
from tests.conftest import wait_for
from tests.patterns.majordomo.conftest import Echo, Peer

pytestmark = pytest.mark.timeout(120)

GOOD = b"good.echo"   # the valid client's service: no fuzzed READY can name it


class GoodEcho(Echo):
    service = GOOD

service = st.one_of(
    st.sampled_from([b"echo", b"x", b"mmi.service", b"mmi.nope", b"mmi.", b" ", b"~" * 300]),
    st.binary(min_size=1, max_size=40).filter(lambda s: s != GOOD),   # non-printable: invalid
    st.text("abcdefghijklmnopqrstuvwxyz.", min_size=1, max_size=12).map(str.encode),
    st.just(b""),
)
body = st.lists(st.one_of(st.binary(max_size=32), st.just(b""), st.just(b"\xff" * 100000)), max_size=4)


@st.composite
def commands(draw, framing, identities):
    """One command a client or worker might send, with hostile contents."""
    kind = draw(st.sampled_from(["request", "ready", "partial", "final", "heartbeat", "disconnect",
                                 "client_reply", "worker_request", "mmi"]))
    if kind == "request":
        return framing.client_request(draw(service), draw(body))
    if kind == "mmi":
        return framing.client_request(b"mmi.service", draw(st.lists(service, max_size=2)))
    if kind == "ready":
        return framing.ready(draw(service))
    address = draw(st.one_of(st.sampled_from(identities), st.binary(max_size=20)))
    if kind in ("partial", "final"):
        return framing.worker_reply(kind == "final", address, draw(body))
    if kind == "heartbeat":
        return list(framing.heartbeat)
    if kind == "disconnect":
        return list(framing.disconnect)
    if kind == "client_reply":
        return framing.client_reply(draw(st.booleans()), draw(service), draw(body))
    return framing.worker_request(address, draw(body))


@pytest.mark.parametrize("framing,two_endpoints", [("spec", False), ("spec", True), ("majortomo", False)])
def test_well_formed_hostile_commands_never_kill_a_broker(framing, two_endpoints):
    codec = mdp.framing(framing)
    broker = Broker("tcp://127.0.0.1:*", heartbeat=0.2, liveness=5, request_expiry=1.0, max_queue=50,
                    max_queued=200, framing=framing,
                    worker_endpoint="tcp://127.0.0.1:*" if two_endpoints else None)
    identities = [b"C%d" % i for i in range(4)] + [b"W%d" % i for i in range(4)]
    peers, client_side = [], []
    try:
        for identity in identities:  # each talks to both endpoints (when there are two)
            peers.append(Peer(broker.endpoint, identity))
            client_side.append(peers[-1])
            if two_endpoints:
                peers.append(Peer(broker.worker_endpoint, identity))

        @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.lists(st.tuples(st.integers(0, len(peers) - 1), commands(codec, identities)),
                        min_size=1, max_size=10))
        def barrage(batch):
            for index, frames in batch:
                peers[index].sock.send_multipart(frames, timeout=5)
            assert broker.alive

        barrage()
        # Everything sent before a marker on a connection is handled before the
        # marker is: an MMI request answered on every client-side peer.
        for peer in client_side:
            peer.send(*codec.client_request(b"mmi.service", [b"marker"]))
        for peer in client_side:
            wait_for(lambda: _answered(peer, codec), 20, "the MMI marker on every peer")
        info = broker.call("INFO", timeout=5)
        assert broker.alive and info["counters"].get("invalid", 0) > 0
        # its books still balance: the global queue count is the sum of the service queues
        assert info["queued"] == sum(s["queued"] for s in info["services"].values())
        worker = GoodEcho(broker.worker_endpoint, heartbeat=0.2, liveness=5, framing=framing)
        client = Client(broker.endpoint, timeout=5, retries=2, framing=framing)
        try:
            assert client.request(GOOD, b"still", b"served") == [[b"still", b"served"]]
        finally:
            client.close()
            worker.destroy()
        assert broker.alive
    finally:
        for peer in peers:
            peer.close()
        broker.destroy()


def _answered(peer, codec):
    """True when the next messages on ``peer`` include the MMI answer to our marker."""
    frames = peer.recv(timeout=0.05)
    while frames is not None:
        try:
            message = codec.decode_for_client(frames)
        except mdp.ProtocolError:
            message = None
        if message is not None and message.body in ([b"404"], [b"200"]) and (
                message.service in (None, b"mmi.service")):
            return True
        frames = peer.recv(timeout=0.05)
    return False


# -- the worker side: a hand-driven broker sends hostile commands to a real Worker --
class Streamer(Echo):
    """Echoes, as one PARTIAL per frame then a FINAL, so hostile input lands mid-stream too."""

    def handle(self, request):
        for frame in request[:3]:
            yield [frame]
        return request


@st.composite
def to_worker(draw, framing):
    """One command a broker might send a worker, with hostile contents."""
    kind = draw(st.sampled_from(["request", "request", "heartbeat", "disconnect", "client_reply", "ready"]))
    if kind == "request":
        address = draw(st.one_of(st.just(b"C"), st.binary(min_size=1, max_size=300)))
        return framing.worker_request(address, draw(body))
    if kind == "heartbeat":
        return list(framing.heartbeat)
    if kind == "disconnect":
        return list(framing.disconnect)
    if kind == "client_reply":
        return framing.client_reply(draw(st.booleans()), draw(service), draw(body))
    return framing.ready(draw(service))


@pytest.mark.parametrize("framing", ["spec", "majortomo"])
def test_well_formed_hostile_commands_never_kill_a_worker(framing):
    codec = mdp.framing(framing)
    router = context().socket(zmq.ROUTER, socket_class=Socket)
    router.linger = 0
    router.bind("tcp://127.0.0.1:*")
    endpoint = router.last_endpoint.decode()
    worker = Streamer(endpoint, heartbeat=0.2, liveness=50, reconnect=0.01, reconnect_max=0.05, framing=framing)
    current = []   # the identity of the worker's latest READY

    def drain(timeout=0.0):
        """Read what the worker sent; True once a READY was seen."""
        seen = False
        while True:
            try:
                frames = router.recv_multipart(timeout=timeout)
            except zmq.Again:
                return seen
            timeout = 0.0
            try:
                message = codec.decode_for_broker(frames[1:])
            except mdp.ProtocolError:
                continue
            if message.command == mdp.READY:
                current[:] = [frames[0]]
                seen = True

    try:
        wait_for(lambda: drain(0.05), 10, "the worker's READY")

        @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.lists(to_worker(codec), min_size=1, max_size=8))
        def barrage(batch):
            drain()
            for frames in batch:
                router.send_multipart([current[0]] + frames)
            assert worker.alive

        barrage()
        assert worker.alive and worker.call("$STATS", timeout=5) is not None
        # Still a worker: a valid REQUEST (to its latest connection) gets its FINAL.
        got = []

        def served():
            drain()
            router.send_multipart([current[0]] + codec.worker_request(b"GOOD", [b"ping"]))
            try:
                while True:
                    frames = router.recv_multipart(timeout=0.2)
                    message = codec.decode_for_broker(frames[1:])
                    if message.command == mdp.READY:
                        current[:] = [frames[0]]
                    elif message.command == mdp.FINAL and message.address == b"GOOD":
                        got.append(message.body)
                        return True
            except zmq.Again:
                return False
            except mdp.ProtocolError:
                return False

        wait_for(served, 20, "a FINAL for a valid request")
        assert got[-1] == [b"ping"]
        assert worker.alive
    finally:
        worker.destroy()
        router.close(0)


# -- the client side: a hand-driven broker answers a real Client with hostile replies --
@st.composite
def to_client(draw, framing):
    """One message a broker might send a client, with hostile contents."""
    kind = draw(st.sampled_from(["partial", "final", "stale", "heartbeat", "worker_request", "request"]))
    if kind in ("partial", "final"):
        return framing.client_reply(kind == "final", b"svc", draw(body))
    if kind == "stale":
        return framing.client_reply(draw(st.booleans()), draw(service.filter(lambda s: s != b"svc")), draw(body))
    if kind == "heartbeat":
        return list(framing.heartbeat)
    if kind == "worker_request":
        return framing.worker_request(b"C", draw(body))
    return framing.client_request(draw(service), draw(body))


class FakeBroker:
    """A hand-driven ROUTER that answers a real Client's requests with what a test says."""

    def __init__(self, framing):
        self.codec = mdp.framing(framing)
        self.router = context().socket(zmq.ROUTER, socket_class=Socket)
        self.router.linger = 0
        self.router.bind("tcp://127.0.0.1:*")
        self.client = Client(self.router.last_endpoint.decode(), timeout=2, retries=1, pool_size=1,
                             framing=framing)

    def answer(self, replies, after=()):
        """Serve one request: ``replies``, a valid FINAL, then ``after``; returns what the client got."""
        job = gevent.spawn(self.client.request, b"svc", b"q")
        frames = self.router.recv_multipart(timeout=5)
        assert self.codec.decode_for_broker(frames[1:]).service == b"svc"
        for reply in list(replies) + [self.codec.client_reply(True, b"svc", [b"valid"])] + list(after):
            self.router.send_multipart([frames[0]] + reply)
        return job.get(timeout=10)

    def close(self):
        self.client.close()
        self.router.close(0)


@pytest.mark.parametrize("framing", ["spec", "majortomo"])
def test_well_formed_hostile_replies_never_break_a_client(framing):
    from zactors.patterns.majordomo.client import RequestTimeout

    fake = FakeBroker(framing)
    answer = fake.answer
    try:
        @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.lists(to_client(fake.codec), max_size=6))
        def barrage(replies):
            try:
                got = answer(replies)
            except RequestTimeout:
                return
            assert got and all(isinstance(body, list) for body in got)

        barrage()
        fresh = FakeBroker(framing)  # a client that met none of it is served as ever
        try:
            assert fresh.answer([]) == [[b"valid"]]
        finally:
            fresh.close()
    finally:
        fake.close()


def test_a_reply_after_the_final_is_not_the_next_requests_answer():
    fake = FakeBroker("spec")
    try:
        stray = fake.codec.client_reply(True, b"svc", [b"stray"])
        assert fake.answer([], after=[stray]) == [[b"valid"]]
        assert fake.answer([]) == [[b"valid"]]
    finally:
        fake.close()
