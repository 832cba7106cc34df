"""ZEPS test helpers: a broker on a temporary journal, raw peers speaking bytes."""
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.zeps import protocol as p


@pytest.fixture
def journal_dir(tmp_path):
    return str(tmp_path / "journal")


@pytest.fixture
def broker(journal_dir):
    pytest.importorskip("zactors.actors.journal")
    from zactors.patterns.zeps.broker import Broker

    b = Broker(journal_dir, heartbeat=0.5, expiry=3.0)
    yield b
    b.destroy()


class Raw:
    """A DEALER speaking ZEPS frame by frame, for protocol-level tests."""

    decode = staticmethod(p.decode)

    def __init__(self, endpoint):
        self.sock = context().socket(zmq.DEALER, socket_class=Socket)
        self.sock.linger = 0
        self.sock.connect(endpoint)

    def send(self, *frames):
        self.sock.send_multipart(list(frames))

    def recv(self, timeout=5.0, skip_pings=True):
        while True:
            frames = self.sock.recv_multipart(timeout=timeout)
            message = self.decode(frames[0])
            if skip_pings and type(message) is p.Ping:
                self.sock.send(p.PING_OK_FRAME)
                continue
            return message

    def expect(self, kind, timeout=5.0):
        message = self.recv(timeout)
        assert type(message) is kind, message
        return message

    def close(self):
        self.sock.close(0)


@pytest.fixture
def raw():
    made = []

    def make(endpoint):
        peer = Raw(endpoint)
        made.append(peer)
        return peer

    yield make
    for peer in made:
        peer.close()
