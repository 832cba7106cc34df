"""A CURVE pair: the pair link is CURVE too and hears only the peer's key."""
import msgpack
import pytest
import zmq

from zactors.actors.auth import Authenticator, curve_client, generate_keypair
from zactors.actors.sockets import Socket, context
from zactors.patterns.zeps import Publisher

from .conftest import Pair, records, wait_for

pytestmark = pytest.mark.timeout(60)


def test_a_curve_pair_replicates_and_refuses_a_stranger_on_its_link(tmp_path):
    auth = Authenticator(curve="*")       # any client key may connect: the pair link itself checks the peer
    keys = {"primary": generate_keypair(), "backup": generate_keypair()}
    pair = Pair(tmp_path, ack="replicated")
    stranger = context().socket(zmq.DEALER, socket_class=Socket)
    stranger.linger = 0
    try:
        for role, other in (("primary", "backup"), ("backup", "primary")):
            pair.options.update(curve=keys[role], peer_key=keys[other].public)
            pair.start(role)
        pair.wait_state("primary", "active")
        pair.wait_ready("backup")
        primary = pair.brokers["primary"]
        client = (keys["primary"].public, generate_keypair())
        with Publisher(primary.endpoint, "s", idempotent=True, curve=client) as pub:
            pub.publish("k", b"secret")
            pub.flush()                    # replicated over the CURVE link
        assert records(pair.dirs["backup"], b"s")[0][0][3] == b"secret"
        curve_client(stranger, generate_keypair(), keys["primary"].public)
        stranger.connect(primary.pair_endpoint)
        stranger.send_multipart([b"FOLLOW", b"t" * 8, msgpack.packb({})])
        wait_for(lambda: primary.call("INFO")["counters"].get("pair_refused_key", 0) >= 1, 10, "the refusal")
        assert not stranger.wait(zmq.POLLIN, 0.5)          # no STREAMS for it
    finally:
        stranger.close(0)
        pair.close()
        auth.destroy()


def test_a_curve_pair_needs_the_peer_key(tmp_path):
    from zactors.patterns.zeps.broker import Broker
    with pytest.raises(ValueError, match="peer_key"):
        Broker(str(tmp_path / "x"), role="primary", curve=generate_keypair())


def test_strangers_sharing_a_routing_id_on_a_curve_link_are_all_read_and_refused(tmp_path):
    """Issue 20: the second connection with a routing id in use was never read, only buffered; now each is
    read (the newest holds the id) and every message of a key other than the peer's is refused, counted."""
    auth = Authenticator(curve="*")
    keys = {"primary": generate_keypair(), "backup": generate_keypair()}
    pair = Pair(tmp_path, ack="replicated")
    strangers = []
    try:
        for role, other in (("primary", "backup"), ("backup", "primary")):
            pair.options.update(curve=keys[role], peer_key=keys[other].public)
            pair.start(role)
        pair.wait_state("primary", "active")
        pair.wait_ready("backup")
        primary = pair.brokers["primary"]
        for i in range(3):
            stranger = context().socket(zmq.DEALER, socket_class=Socket)
            stranger.linger = 0
            stranger.routing_id = b"same-id"
            strangers.append(stranger)
            curve_client(stranger, generate_keypair(), keys["primary"].public)
            stranger.connect(primary.pair_endpoint)
            for _ in range(4):
                stranger.send_multipart([b"ACK", b"t" * 8, msgpack.packb({}), bytes(1 << 20)])
            wait_for(lambda: primary.call("INFO")["counters"].get("pair_refused_key", 0) >= 4 * (i + 1), 10,
                     "connection %d read and refused" % i)
        client = (keys["primary"].public, generate_keypair())
        with Publisher(primary.endpoint, "s", idempotent=True, curve=client) as pub:
            pub.publish("k", b"after")
            pub.flush()                    # the link replicates all along
        assert records(pair.dirs["backup"], b"s")[0][-1][3] == b"after"
    finally:
        for stranger in strangers:
            stranger.close(0)
        pair.close()
        auth.destroy()
