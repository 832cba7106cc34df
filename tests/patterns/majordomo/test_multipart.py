"""Issue 20: the MDP broker drops a message of more than ``max_frames`` frames unread, counts it, serves on."""
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.majordomo import Client
from zactors.patterns.majordomo.broker import MAX_FRAMES
from tests.conftest import wait_for
from tests.patterns.majordomo.conftest import Echo

pytestmark = pytest.mark.timeout(120)


def test_a_request_of_a_million_frames_is_refused_and_counted(broker):
    worker = Echo(broker.endpoint)
    dealer = context().socket(zmq.DEALER, socket_class=Socket)
    dealer.linger = 0
    dealer.sndhwm = 0
    dealer.connect(broker.endpoint)
    client = Client(broker.endpoint)
    try:
        for frame in (b"", b"MDPC02", b"\x01", b"echo"):
            dealer.send(frame, zmq.SNDMORE)
        for _ in range(1000000):
            dealer.send(b"x", zmq.SNDMORE)
        dealer.send(b"end")
        wait_for(lambda: broker.call("$STATS").get("multipart_refused") == 1, 60, "the request refused")
        body = [b"%d" % i for i in range(MAX_FRAMES - 8)]   # a request within the bound is served
        assert client.request(b"echo", *body, timeout=10) == [body]
    finally:
        client.close()
        dealer.close()
        worker.destroy()
