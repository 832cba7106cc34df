"""Issue 20: every ZEPS message is one frame after the ROUTER's identity: the broker drops a message of more
frames unread (a million of them cost no copy), counts it, and serves everyone else.  Real TCP sockets."""
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.zeps import Publisher, Subscriber

from ...conftest import wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("permissions", [False, True], ids=["plain", "zero-copy reader"])
def test_a_million_frame_message_is_refused_counted_and_publishing_goes_on(journal_dir, permissions):
    pytest.importorskip("zactors.actors.journal")
    from zactors.actors.auth import Authenticator, generate_keypair
    from zactors.patterns.zeps.broker import Broker
    from zactors.patterns.zeps.permissions import Permissions
    made = []
    curve = client = None
    if permissions:   # a broker with permissions reads its ROUTER zero-copy (the ZAP User-Id): bounded too
        server, client = generate_keypair(), generate_keypair()
        made.append(Authenticator(curve="*"))
        broker = Broker(journal_dir, curve=server, permissions=Permissions([(client.public, "publish,subscribe,create",
                                                                            "*")]))
        curve = (server.public, client)
    else:
        broker = Broker(journal_dir)
    made.append(broker)
    try:
        dealer = context().socket(zmq.DEALER, socket_class=Socket)
        dealer.linger = 0
        dealer.sndhwm = 0
        if curve is not None:
            dealer.curve_serverkey, dealer.curve_publickey, dealer.curve_secretkey = curve[0], client.public, \
                client.secret
        dealer.connect(broker.endpoint)
        for _ in range(1000000):
            dealer.send(b"", zmq.SNDMORE)
        dealer.send(b"end")
        wait_for(lambda: broker.call("INFO")["counters"].get("multipart_refused") == 1, 60, "the message refused")
        dealer.close()
        with Publisher(broker.endpoint, "s", curve=curve) as pub:
            pub.publish(b"k", b"v")
            pub.flush(timeout=10)
        sub = Subscriber(broker.endpoint, "s", curve=curve)
        made.append(sub)
        assert sub.get(timeout=10).body == b"v"
    finally:
        for thing in reversed(made):
            thing.destroy()
