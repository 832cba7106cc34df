"""Router: mandatory routing, per-peer backlog under backpressure, overflow."""
import pytest
import zmq

from zactors.actors import Actor, command
from zactors.actors.sockets import Socket, context
from zactors.actors.router import RouterActor
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


class Echo(RouterActor):
    """Echoes every message; BLAST identity n sends n numbered messages to it."""

    backlog = 50000

    def on_message(self, identity, frames):
        self.route(identity, *frames)

    @command(reply=True)
    def blast(self, identity, n, size=0):
        """Send n messages; reply [accepted, backlog right after]."""
        pad = b" " * size
        accepted = sum(self.route(identity, b"%d" % i, pad) for i in range(n))
        return [accepted, self.router.backlog_of(identity)]

    @command(reply=True)
    def backlog_of(self, identity):
        return self.router.backlog_of(identity)

    @command(reply=True)
    def to(self, identity):
        return self.route(identity, b"anyone?")


def dealer(endpoint, identity, rcvhwm=1000):
    sock = context().socket(zmq.DEALER, socket_class=Socket)
    sock.linger = 0
    sock.identity = identity
    sock.rcvhwm = rcvhwm
    sock.connect(endpoint)
    return sock


@pytest.fixture
def echo():
    actor = Echo()
    yield actor
    actor.destroy()


def test_routes_by_identity(echo):
    a, b = dealer(echo.endpoint, b"A"), dealer(echo.endpoint, b"B")
    a.send_multipart([b"from", b"a"])
    b.send_multipart([b"from b"])
    assert a.recv_multipart(timeout=5) == [b"from", b"a"]
    assert b.recv_multipart(timeout=5) == [b"from b"]
    a.close(); b.close()


def test_unroutable_is_refused_and_counted_not_silently_dropped(echo):
    assert echo.call("TO", b"nobody") is False
    assert echo.call("$STATS")["unroutable"] == 1


def test_slow_peer_backlog_is_delivered_in_order_without_blocking_others(echo):
    slow = dealer(echo.endpoint, b"SLOW", rcvhwm=10)
    slow.send(b"hello")
    assert slow.recv_multipart(timeout=5) == [b"hello"]
    fast = dealer(echo.endpoint, b"FAST")
    n = 20000
    accepted, backlog = echo.call("BLAST", b"SLOW", n, 1000, timeout=10)  # 20 MB: more than tcp buffers hold
    assert accepted == n
    assert backlog > 0, "the slow peer's HWM should have been hit"
    # the loop still serves other peers while SLOW has a backlog
    fast.send(b"ping")
    assert fast.recv_multipart(timeout=5) == [b"ping"]
    got = [int(slow.recv_multipart(timeout=10)[0]) for _ in range(n)]
    assert got == list(range(n))
    wait_for(lambda: echo.call("BACKLOG_OF", b"SLOW") == 0, what="backlog flushed")
    slow.close(); fast.close()


def test_overflow_beyond_backlog_is_refused_and_counted():
    class Small(Echo):
        backlog = 5
        endpoint = "inproc://router-overflow"  # no kernel buffers: the HWM bites exactly

    small = Small()
    try:
        slow = dealer(small.endpoint, b"SLOW", rcvhwm=1)
        slow.send(b"hi")
        assert slow.recv_multipart(timeout=5) == [b"hi"]
        accepted, _ = small.call("BLAST", b"SLOW", 5000, timeout=10)
        assert accepted < 5000
        assert small.call("$STATS")["overflow"] == 5000 - accepted
        got = 0
        while True:
            try:
                slow.recv_multipart(timeout=1)
            except zmq.Again:
                break
            got += 1
        assert got == accepted, "everything accepted is delivered"
        slow.close()
    finally:
        small.destroy()


def test_router_actor_subclass_must_handle_messages():
    class Lazy(RouterActor):
        pass

    lazy = Lazy()
    d = dealer(lazy.endpoint, b"X")
    d.send(b"boom")
    event = lazy.recv_event(timeout=5)
    assert event.name == "$DIED" and "NotImplementedError" in event.args[0]
    d.close()
    lazy.destroy()
    assert isinstance(lazy, Actor)
