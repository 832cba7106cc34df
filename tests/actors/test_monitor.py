"""actors.monitor: handshake outcomes told in words, peers counted by completed handshakes."""
import socket

import pytest
import zmq

from zactors.actors.auth import Authenticator, create_keypair, curve_client, curve_server, generate_keypair
from zactors.actors.monitor import HandshakeFailed, Monitor, MonitorEvent, Peers, probe
from zactors.actors.sockets import Socket, context

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def router():
    sock = context().socket(zmq.ROUTER, socket_class=Socket)
    sock.linger = 0
    yield sock
    sock.close()


def test_probe_sees_a_handshake_succeed(router):
    port = router.bind_to_random_port("tcp://127.0.0.1")
    assert probe("tcp://127.0.0.1:%d" % port, timeout=5) is True


def test_probe_of_nobody_returns_false():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    assert probe("tcp://127.0.0.1:%d" % port, timeout=0.3) is False


def test_probe_tells_why_a_curve_server_refuses(router, tmp_path):
    server, stranger = generate_keypair(), generate_keypair()
    create_keypair(str(tmp_path), "someone-else")
    auth = Authenticator(curve=str(tmp_path))
    try:
        curve_server(router, server)
        endpoint = "tcp://127.0.0.1:%d" % router.bind_to_random_port("tcp://127.0.0.1")
        cases = [(lambda s: curve_client(s, stranger, server.public), "refused our key (ZAP 400)"),
                 (lambda s: curve_client(s, stranger, stranger.public), "server public key we use is not its key"),
                 (None, "another security mechanism (it uses CURVE")]
        for secure, says in cases:
            with pytest.raises(HandshakeFailed) as caught:
                probe(endpoint, secure, timeout=5)
            assert str(caught.value).startswith("the peer ") and says in str(caught.value)
    finally:
        auth.destroy()


def test_monitor_close_stops_the_monitor_first(router):
    watch = Monitor(router)
    router.bind_to_random_port("tcp://127.0.0.1")
    assert watch.recv(5).event == zmq.EVENT_LISTENING
    watch.close()
    watch.close()  # idempotent
    assert watch.events() == [] and watch.recv(0) is None


def _e(kind, value=0):
    return MonitorEvent(kind, value, "tcp://127.0.0.1:1")


def test_peers_count_only_completed_handshakes():
    peers = Peers()
    feed = lambda *events: [peers.feed(e) for e in events][-1]  # noqa: E731
    assert feed(_e(zmq.EVENT_ACCEPTED, 10), _e(zmq.EVENT_DISCONNECTED, 10)) == 0          # HTTP: no handshake
    assert feed(_e(zmq.EVENT_ACCEPTED, 11), _e(zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400),
                _e(zmq.EVENT_DISCONNECTED, 11)) == 0                                      # refused key
    assert feed(_e(zmq.EVENT_ACCEPTED, 12)) == 0                                          # idle, stays
    assert feed(_e(zmq.EVENT_ACCEPTED, 13), _e(zmq.EVENT_HANDSHAKE_SUCCEEDED)) == 1       # a worker
    assert feed(_e(zmq.EVENT_DISCONNECTED, 12)) == 1                                      # idle leaves
    assert feed(_e(zmq.EVENT_ACCEPTED, 12), _e(zmq.EVENT_HANDSHAKE_SUCCEEDED)) == 2       # fd reused
    assert feed(_e(zmq.EVENT_DISCONNECTED, 13)) == 1
    assert peers.failed == 1 and peers.last_failure.value == 400
