"""Sockets: the frame size limit (ZMQ_MAXMSGSIZE) and monitored sockets closing cleanly."""
import pytest
import zmq

from zactors.actors.router import RouterActor
from zactors.actors.sockets import Socket, context, limit_size
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


class Echo(RouterActor):
    max_message = 1000

    def on_message(self, identity, frames):
        self.route(identity, *frames)


def dealer(endpoint):
    sock = context().socket(zmq.DEALER, socket_class=Socket)
    sock.linger = 0
    sock.connect(endpoint)
    return sock


def test_a_frame_over_the_limit_drops_its_connection_unread_and_is_counted():
    echo = Echo()
    small, big = dealer(echo.endpoint), dealer(echo.endpoint)
    try:
        small.send(b"x" * 1000)
        assert small.recv_multipart(timeout=5) == [b"x" * 1000]  # at the limit: served
        big.send(b"y" * 1001)
        wait_for(lambda: echo.call("$STATS").get("disconnects", 0) == 1, 10, "the disconnect")
        assert echo.call("$STATS").get("router_malformed", 0) == 0  # nothing of it was read
        small.send(b"still here")
        assert small.recv_multipart(timeout=5) == [b"still here"]
    finally:
        small.close()
        big.close()
        echo.destroy()


def test_limit_size_refuses_nonsense_and_lifts_with_none():
    sock = context().socket(zmq.DEALER, socket_class=Socket)
    try:
        with pytest.raises(ValueError):
            limit_size(sock, 0)
        limit_size(sock, 4096)
        assert sock.getsockopt(zmq.MAXMSGSIZE) == 4096
        limit_size(sock, None)
        assert sock.getsockopt(zmq.MAXMSGSIZE) == -1
    finally:
        sock.close()


def test_a_monitored_socket_stops_its_monitor_when_it_closes():
    """Closed first, it stops its monitor: the reader may close after it (the actor's order) safely."""
    for i in range(20):
        sock = context().socket(zmq.ROUTER, socket_class=Socket)
        sock.monitor("inproc://test-monitored-close-%d" % i, zmq.EVENT_ALL)
        reader = context().socket(zmq.PAIR, socket_class=Socket)
        reader.connect("inproc://test-monitored-close-%d" % i)
        port = sock.bind_to_random_port("tcp://127.0.0.1")
        peer = dealer("tcp://127.0.0.1:%d" % port)
        peer.send(b"hello")
        assert sock.recv_multipart(timeout=5)[1] == b"hello"
        assert sock.monitored
        sock.close()
        assert not sock.monitored
        peer.close()    # a DISCONNECTED after the reader is gone would block libzmq's I/O thread
        reader.close()
    probe = dealer("inproc://nowhere")  # the context still works
    probe.close()
