"""Fixtures for the Majordomo tests: brokers with fast heartbeats and raw MDP peers."""
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.majordomo import Broker, Worker


def recv_skipping(sock, timeout, is_heartbeat):
    """The next message on ``sock`` that ``is_heartbeat`` does not match, or None after ``timeout``."""
    while True:
        try:
            frames = sock.recv_multipart(timeout=timeout)
        except zmq.Again:
            return None
        if not (is_heartbeat and is_heartbeat(frames)):
            return frames


def _heartbeat_to_worker(frames):
    return frames[-1:] == [b"\x05"] and len(frames) <= 3


class Peer:
    """A raw DEALER speaking frames at a broker, for protocol-level tests."""

    def __init__(self, endpoint, identity=None):
        self.sock = context().socket(zmq.DEALER, socket_class=Socket)
        self.sock.linger = 0
        if identity:
            self.sock.identity = identity
        self.sock.connect(endpoint)

    def send(self, *frames):
        self.sock.send_multipart(list(frames), timeout=5)

    def recv(self, timeout=5.0, skip_heartbeats=True):
        """The next message, or None after ``timeout`` seconds."""
        return recv_skipping(self.sock, timeout, skip_heartbeats and _heartbeat_to_worker)

    def close(self):
        self.sock.close(0)


@pytest.fixture
def peers():
    made = []

    def make(endpoint, identity=None):
        peer = Peer(endpoint, identity)
        made.append(peer)
        return peer
    yield make
    for peer in made:
        peer.close()


@pytest.fixture
def broker():
    b = Broker("tcp://127.0.0.1:*", heartbeat=0.2, liveness=5, request_expiry=5.0)
    yield b
    b.destroy()


class Echo(Worker):
    service = b"echo"

    def handle(self, request):
        return request


class Count(Worker):
    """Streams body[0] partials, then FINAL b"done"."""
    service = b"count"

    def handle(self, request):
        for i in range(int(request[0])):
            yield [b"%d" % i]
        return [b"done"]


@pytest.fixture
def workers():
    made = []

    def make(cls, endpoint, **kw):
        kw.setdefault("heartbeat", 0.2)
        kw.setdefault("liveness", 5)
        worker = cls(endpoint, **kw)
        made.append(worker)
        return worker
    yield make
    for worker in made:
        worker.destroy()
