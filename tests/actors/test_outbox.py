"""Outbox: the kernel's per-peer backpressure sender, over a real ROUTER and real DEALERs."""
import errno

import pytest
import zmq

from zactors.actors import Actor, command
from zactors.actors.outbox import Outbox, send_now
from zactors.actors.sockets import Socket, context
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


class Sender(Actor):
    """A ROUTER whose sends go through an Outbox; held/drained become events, refusals are kept."""

    def __init__(self, **options):
        self.options = options

    def setup(self):
        self.router = self.socket(zmq.ROUTER, router_mandatory=1, sndhwm=10)
        self.router.bind("tcp://127.0.0.1:*")
        self.endpoint = self.router.last_endpoint.decode()
        self.add_reader(self.router, lambda frames: None)
        router = self.router
        self.refusals = []  # [kind, peer, first frame]
        self.outbox = Outbox(self, lambda peer, frames: send_now(router, (peer, *frames)),
                             on_held=lambda peer: self.emit("HELD", peer),
                             on_drained=lambda peer: self.emit("DRAINED", peer),
                             on_overflow=lambda peer, frames: self.refusals.append(["OVERFLOW", peer, frames[0]]),
                             on_unroutable=lambda peer, frames: self.refusals.append(["GONE", peer, frames[0]]),
                             **self.options)

    @command(reply=True)
    def blast(self, peer, first, n, size=0):
        """Send n numbered messages, up to the first refusal; reply [accepted, pending after]."""
        pad = b" " * size
        accepted = 0
        for i in range(first, first + n):
            if not self.outbox.send(peer, [b"%d" % i, pad]):
                break
            accepted += 1
        return [accepted, self.outbox.pending(peer)]

    @command(reply=True)
    def refused(self):
        """The refusals since the last call."""
        refusals, self.refusals = self.refusals, []
        return refusals

    @command(reply=True)
    def probe(self, peer):
        """Send b"-1" past the outbox: None once the ROUTER knows ``peer``."""
        return send_now(self.router, (peer, b"-1"))

    @command(reply=True)
    def pending(self, peer):
        return self.outbox.pending(peer)

    @command(reply=True)
    def grant(self, peer, amount):
        self.outbox.grant(peer, amount)
        return [self.outbox.credit_of(peer), self.outbox.pending(peer)]

    @command(reply=True)
    def credit(self, peer):
        return self.outbox.credit_of(peer)

    @command(reply=True)
    def drop(self, peer):
        return len(self.outbox.drop(peer))


def dealer(endpoint, identity, rcvhwm=1000):
    sock = context().socket(zmq.DEALER, socket_class=Socket)
    sock.linger = 0
    sock.identity = identity
    sock.rcvhwm = rcvhwm
    sock.connect(endpoint)
    return sock


def connected(sender, sock):
    """Wait until the ROUTER can route to ``sock`` (its identity is known)."""
    identity = sock.identity
    wait_for(lambda: sender.call("PROBE", identity) is None)
    assert sock.recv_multipart(timeout=5)[0] == b"-1"


def events(actor, count, timeout=10):
    got = []
    for _ in range(count):
        event = actor.recv_event(timeout)
        assert event is not None, "only %r arrived" % got
        got.append((event.name, *event.args))
    return got


@pytest.fixture
def make():
    made = []

    def make(**options):
        actor = Sender(**options)
        made.append(actor)
        return actor

    yield make
    for actor in made:
        actor.destroy()


def test_thresholds_are_checked():
    with pytest.raises(ValueError):
        Outbox(None, None, limit=0)
    with pytest.raises(ValueError):
        Outbox(None, None, limit=10, high=11)
    with pytest.raises(ValueError):
        Outbox(None, None, limit=10, high=5, low=5)


def test_slow_peer_gets_everything_in_order_and_is_held_then_drained(make):
    sender = make(limit=1500, high=1000)
    slow = dealer(sender.endpoint, b"SLOW", rcvhwm=10)
    connected(sender, slow)
    first = sender.call("BLAST", b"SLOW", 0, 1200, 100000, timeout=10)  # 120 MB: more than TCP buffers hold
    assert first[0] == 1200 and first[1] >= 1000
    assert events(sender, 1) == [("HELD", b"SLOW")]
    rest = sender.call("BLAST", b"SLOW", 1200, 300, 100000, timeout=10)
    assert rest[0] == 300
    got = [int(slow.recv_multipart(timeout=10)[0]) for _ in range(1500)]
    assert got == list(range(1500))
    assert events(sender, 1) == [("DRAINED", b"SLOW")]
    wait_for(lambda: sender.call("PENDING", b"SLOW") == 0)
    slow.close()


def test_a_full_outbox_refuses_and_says_overflow(make):
    sender = make(limit=50)
    slow = dealer(sender.endpoint, b"SLOW", rcvhwm=1)
    connected(sender, slow)
    accepted, pending = sender.call("BLAST", b"SLOW", 0, 5000, 100000, timeout=10)  # 500 MB offered
    assert pending == 50 and accepted < 5000
    assert events(sender, 1) == [("HELD", b"SLOW")]
    assert sender.call("REFUSED") == [["OVERFLOW", b"SLOW", b"%d" % accepted]]
    got = [int(slow.recv_multipart(timeout=10)[0]) for _ in range(accepted)]
    assert got == list(range(accepted))  # what was accepted all arrives, in order
    slow.close()


def test_a_slow_peer_does_not_hold_back_the_others(make):
    sender = make(limit=100000)
    slow = dealer(sender.endpoint, b"SLOW", rcvhwm=10)
    fast = dealer(sender.endpoint, b"FAST")
    connected(sender, slow)
    connected(sender, fast)
    assert sender.call("BLAST", b"SLOW", 0, 3000, 10000, timeout=10)[1] > 0
    assert sender.call("BLAST", b"FAST", 0, 10)[0] == 10
    assert [fast.recv_multipart(timeout=5)[0] for _ in range(10)] == [b"%d" % i for i in range(10)]
    slow.close(); fast.close()


def test_unknown_peer_is_refused_as_gone(make):
    sender = make()
    assert sender.call("BLAST", b"NOBODY", 0, 1) == [0, 0]
    assert sender.call("REFUSED") == [["GONE", b"NOBODY", b"0"]]


def test_peer_gone_with_a_queue_drops_it_as_unroutable(make):
    sender = make(limit=100000)
    slow = dealer(sender.endpoint, b"SLOW", rcvhwm=1)
    connected(sender, slow)
    accepted, pending = sender.call("BLAST", b"SLOW", 0, 2000, 100000, timeout=10)
    assert accepted == 2000 and pending > 0
    slow.close()  # the peer goes: the ROUTER says EHOSTUNREACH on a retry
    wait_for(lambda: sender.call("PENDING", b"SLOW") == 0)
    refused = sender.call("REFUSED")
    # what had not gone out yet is reported, each message, in order, up to the last
    assert 0 < len(refused) <= pending
    assert [int(first) for kind, peer, first in refused] == list(range(2000 - len(refused), 2000))
    assert {(kind, peer) for kind, peer, first in refused} == {("GONE", b"SLOW")}


def test_drop_forgets_the_queue_and_drains_a_held_peer(make):
    sender = make(limit=100, high=10)
    slow = dealer(sender.endpoint, b"SLOW", rcvhwm=1)
    connected(sender, slow)
    accepted, pending = sender.call("BLAST", b"SLOW", 0, 500, 100000, timeout=10)
    assert pending >= 10
    assert sender.call("DROP", b"SLOW") == pending
    assert events(sender, 2) == [("HELD", b"SLOW"), ("DRAINED", b"SLOW")]
    assert sender.call("PENDING", b"SLOW") == 0
    slow.close()


def test_credit_gates_what_goes_and_a_grant_resumes(make):
    sender = make(credit=True, limit=1000, high=100)
    peer = dealer(sender.endpoint, b"SUB")
    connected(sender, peer)
    # No credit yet: everything waits, in the one queue.
    assert sender.call("BLAST", b"SUB", 0, 10, 90) == [10, 10]  # 10 messages of 1 + 90 or 2 + 90 bytes
    assert not peer.wait(zmq.POLLIN, timeout=0.2)
    # 250 bytes of credit: messages go while the balance is positive (3 of ~91 bytes).
    credit, pending = sender.call("GRANT", b"SUB", 250)
    assert pending == 7 and credit == 250 - 3 * 91
    assert [peer.recv_multipart(timeout=5)[0] for _ in range(3)] == [b"0", b"1", b"2"]
    assert not peer.wait(zmq.POLLIN, timeout=0.2)
    # More credit: the rest goes, in order; later sends go at once while credit lasts.
    sender.call("GRANT", b"SUB", 10000)
    wait_for(lambda: sender.call("PENDING", b"SUB") == 0)  # some may have met the HWM and been retried
    assert sender.call("CREDIT", b"SUB") == 250 + 10000 - 10 * 91
    assert [peer.recv_multipart(timeout=5)[0] for _ in range(7)] == [b"%d" % i for i in range(3, 10)]
    assert sender.call("BLAST", b"SUB", 10, 1) == [1, 0]
    assert peer.recv_multipart(timeout=5)[0] == b"10"
    peer.close()


def test_a_message_larger_than_the_credit_window_still_goes(make):
    sender = make(credit=True)
    peer = dealer(sender.endpoint, b"SUB")
    connected(sender, peer)
    assert sender.call("BLAST", b"SUB", 0, 1, 5000) == [1, 1]
    credit, pending = sender.call("GRANT", b"SUB", 100)
    assert pending == 0 and credit == 100 - 5001
    assert peer.recv_multipart(timeout=5)[0] == b"0"
    # in debt: the next one waits until the debt is repaid
    assert sender.call("BLAST", b"SUB", 1, 1) == [1, 1]
    assert sender.call("GRANT", b"SUB", 4901) == [0, 1]
    assert sender.call("GRANT", b"SUB", 1) == [1 - 1, 0]
    assert peer.recv_multipart(timeout=5)[0] == b"1"
    peer.close()


def test_credit_exhaustion_holds_the_peer_until_granted(make):
    sender = make(credit=True, limit=100, high=20)
    peer = dealer(sender.endpoint, b"SUB")
    connected(sender, peer)
    assert sender.call("BLAST", b"SUB", 0, 20) == [20, 20]
    assert events(sender, 1) == [("HELD", b"SUB")]
    sender.call("GRANT", b"SUB", 1000)
    assert events(sender, 1) == [("DRAINED", b"SUB")]
    assert [peer.recv_multipart(timeout=5)[0] for _ in range(20)] == [b"%d" % i for i in range(20)]
    peer.close()


def test_grant_without_credit_mode_is_an_error(make):
    sender = make()
    with pytest.raises(Exception, match="credit"):
        sender.call("GRANT", b"X", 1)


def test_send_now_reports_the_errno():
    router = context().socket(zmq.ROUTER, socket_class=Socket)
    router.router_mandatory = 1
    try:
        assert send_now(router, [b"nobody", b"x"]) == errno.EHOSTUNREACH
    finally:
        router.close(0)
