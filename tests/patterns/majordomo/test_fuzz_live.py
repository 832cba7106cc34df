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
READYs, HEARTBEATs and DISCONNECTs, mid-stream too.
"""
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
