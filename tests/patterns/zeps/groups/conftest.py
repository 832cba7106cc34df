"""Consumer-group test helpers: a broker with short group timers, a publisher, a raw group peer."""
import gevent
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.zeps import groups_protocol as g
from zactors.patterns.zeps import protocol as p


def make_broker(journal_dir, **options):
    from zactors.patterns.zeps.broker import Broker

    options.setdefault("heartbeat", 0.5)
    options.setdefault("expiry", 3.0)
    return Broker(journal_dir, **options)


@pytest.fixture
def journal_dir(tmp_path):
    return str(tmp_path / "journal")


def publish(endpoint, stream, items):
    """Publish ``items`` ((key, body) pairs) and flush: all journaled when it returns."""
    from zactors.patterns.zeps.client import Publisher

    pub = Publisher(endpoint, stream)
    try:
        for key, body in items:
            pub.publish(key, body)
        pub.flush(timeout=30)
    finally:
        pub.close()


def wait_for(condition, timeout=20.0, what="condition"):
    deadline = gevent.get_hub().loop.now() + timeout
    while not condition():
        if gevent.get_hub().loop.now() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        gevent.sleep(0.005)


class RawMember:
    """A DEALER speaking the group commands frame by frame."""

    def __init__(self, endpoint, stream=b"s"):
        self.sock = context().socket(zmq.DEALER, socket_class=Socket)
        self.sock.linger = 0
        self.sock.connect(endpoint)
        self.send(p.attach(stream))
        assert type(self.recv()) is p.AttachOk

    def send(self, *frames):
        for frame in frames:
            self.sock.send(frame)

    def recv(self, timeout=5.0):
        while True:
            frame = self.sock.recv_multipart(timeout=timeout)[0]
            message = g.decode(frame) if g.is_group_command(frame) else p.decode(frame)
            if type(message) is p.Ping:
                self.sock.send(p.PING_OK_FRAME)
                continue
            return message

    def expect(self, kind, timeout=5.0):
        message = self.recv(timeout)
        assert type(message) is kind, message
        return message

    def close(self):
        self.sock.close(0)
