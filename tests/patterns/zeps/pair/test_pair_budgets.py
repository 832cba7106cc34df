"""Issue 20: what a peer can make a ZEPS broker hold through its pair endpoint (the link's ROUTER).

Each broker is a process of its own, so its RSS and descriptors are its own.  Without CURVE the pair
link is for a trusted network, yet a stray or hostile peer reaching it must not exhaust the node.
"""
import gevent
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.zeps.client import Publisher, Subscriber

from tests.patterns.zeps.test_budgets import MiB, nofile, open_fds, poll, rss
from ._broker_process import PairBrokerProcess
from .conftest import wait_for

pytestmark = pytest.mark.timeout(180)


def dealer(endpoint, routing_id=None):
    sock = context().socket(zmq.DEALER, socket_class=Socket)
    sock.linger = 0
    if routing_id is not None:
        sock.routing_id = routing_id
    sock.connect(endpoint)
    return sock


def ready(broker):
    return (lambda pair: pair["state"] == "passive" and pair["ready"])(broker.pair())


def test_connections_reusing_a_routing_id_on_the_pair_endpoint_are_read_not_buffered(processes, tmp_path):
    """libzmq (handover off) never read a connection whose routing id was in use, yet buffered up to the
    pair ROUTER's RCVHWM (100,000) of its messages, each frame up to ~8 MiB: GiBs per connection.  The
    newest connection holds the id now: what it sends is read (and dropped as malformed, counted)."""
    primary, backup = PairBrokerProcess(processes, tmp_path, "primary"), PairBrokerProcess(processes, tmp_path, "backup")
    primary.start(backup)            # (alone: its peer never starts)
    junk = [b"JUNK", bytes(6 * MiB)]   # under the link's frame limit: dropped only once read
    socks = []
    try:
        base = rss(primary.proc.pid)
        read = True
        for i in range(4):               # 4 connections x 8 x 6 MiB with one routing id
            sock = dealer(primary.pair_endpoint, b"same-id")
            socks.append(sock)
            for _ in range(8):
                sock.send_multipart(junk)
            if read:    # (the old code never read the second: stop waiting there)
                read = poll(lambda: primary.info()["counters"].get("pair_malformed", 0) >= 8 * (i + 1), timeout=20)
        poll(lambda: primary.info()["counters"].get("pair_malformed", 0) >= 32, timeout=20)
        malformed = primary.info()["counters"].get("pair_malformed", 0)
        grown = rss(primary.proc.pid) - base
        print("pair broker RSS grew %.1f MiB for 4 connections x 48 MiB with one routing id; %d of 32 messages read"
              % (grown / MiB, malformed))
        assert malformed == 32      # every message of every connection read
        assert grown < 60 * MiB, grown // MiB   # the old code held the 3 duplicates' 144 MiB
    finally:
        for sock in socks:
            sock.close(0)


def test_a_connection_flood_on_the_pair_endpoint_under_ulimit_1024_leaves_the_link_serving(processes, tmp_path):
    """Connections to the pair endpoint past its budget (an eighth of the fds, less 64) are shut at once and
    counted: the descriptors stay the journals'; the pair replicates all along, and its peer reconnects."""
    primary = PairBrokerProcess(processes, tmp_path, "primary", tcp=True)
    backup = PairBrokerProcess(processes, tmp_path, "backup", tcp=True)
    primary.start(backup, preexec_fn=nofile(1024))
    backup.start(primary, preexec_fn=nofile(1024))
    wait_for(lambda: ready(backup), 30, "the pair")
    pub = Publisher(primary.endpoint, "s")          # ack="replicated": each flush needs the passive
    sub = Subscriber(primary.endpoint, "s", from_seq=0)
    flood = []
    try:
        for i in range(1200):
            flood.append(dealer(primary.pair_endpoint))
            if i % 200 == 199:
                pub.publish(b"k", b"%d" % i)
                pub.flush(timeout=30)               # replicated: the link serves all along
                assert sub.get(timeout=20).body == b"%d" % i
                assert open_fds(primary.proc.pid) < 600
        counters = poll(lambda: (lambda c: c if c.get("connections_refused", 0) >= 1000 else None)(
            primary.info()["counters"]), timeout=60)
        assert counters, primary.info()["counters"]
        for sock in flood:
            sock.close(0)
        flood = []
        backup.kill()                               # the passive comes back on a fresh connection
        backup.start(primary, preexec_fn=nofile(1024))
        wait_for(lambda: ready(backup), 60, "the passive back")
        pub.publish(b"k", b"late")
        pub.flush(timeout=30)
        assert sub.get(timeout=20).body == b"late"
        assert primary.proc.poll() is None and backup.proc.poll() is None
    finally:
        for sock in flood:
            sock.close(0)
        pub.close()
        sub.destroy()
