"""Consumer-group test helpers: a broker with short group timers, a publisher, a raw group peer."""
import gevent
import pytest

from zactors.patterns.zeps import groups_protocol as g
from zactors.patterns.zeps import protocol as p
from tests.patterns.zeps.conftest import Raw


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


class RawMember(Raw):
    """A raw ZEPS peer (:class:`Raw`) attached to ``stream`` that also speaks the group commands,
    each frame sent as its own message."""

    def __init__(self, endpoint, stream=b"s"):
        super().__init__(endpoint)
        self.send(p.attach(stream))
        assert type(self.recv()) is p.AttachOk

    def send(self, *frames):
        for frame in frames:
            self.sock.send(frame)

    @staticmethod
    def decode(frame):
        return g.decode(frame) if g.is_group_command(frame) else p.decode(frame)
