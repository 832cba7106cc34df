"""A client given a pair whose first broker is down goes to the other at once (#23, leftovers item 8).

Construction waited up to ``max(0.5, heartbeat)`` (1 s by default) on a first endpoint where nothing
listens before it tried the second; the running clients already move on when the connection is
refused.  Now construction does too: the refused connection is seen and the next broker tried."""
import socket
import time

import pytest

from zactors.patterns.zeps.client import Publisher, Subscriber

pytestmark = pytest.mark.timeout(60)

#: generous: construction used to take a full second on the dead broker
BOUND = 0.5


def dead_endpoint():
    """A loopback TCP endpoint where nothing listens (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "tcp://127.0.0.1:%d" % s.getsockname()[1]


@pytest.mark.parametrize("client", ["Subscriber", "Publisher"])
def test_construction_skips_a_first_broker_that_refuses_the_connection(make_pair, client):
    pair = make_pair()
    primary, _backup = pair.up()
    with Publisher(primary.endpoint, "s") as pub:    # the stream exists
        pub.publish("k", "v")
        pub.flush()
    endpoints = "%s,%s" % (dead_endpoint(), primary.endpoint)
    took = []
    for _ in range(3):
        started = time.monotonic()
        made = Subscriber(endpoints, "s", from_seq=1) if client == "Subscriber" else Publisher(endpoints, "s")
        took.append(time.monotonic() - started)
        try:
            assert made.endpoint == primary.endpoint
        finally:
            made.destroy() if client == "Subscriber" else made.close()
    print("\n%s constructions over a dead first broker: %s s" % (client, ", ".join("%.3f" % t for t in took)))
    assert min(took) < BOUND, took
