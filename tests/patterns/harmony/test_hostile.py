"""Hostile but well-formed ZRE input, sent over tcp to a live node: it lives and serves a good peer.

Each packet here decodes as valid ZRE v2; the harm is in its contents
(endpoints libzmq rejects or that point into our own process, group names
longer than a SHOUT can carry, gossip floods).  Before these fixes one such
HELLO or gossip entry killed the node.
"""
import json
import random
import subprocess
import sys

import pytest

from zactors.patterns.harmony import GOSSIP_HEADER, Node
from zactors.patterns.harmony import protocol as zre
from zactors.patterns.harmony.endpoints import peer_endpoint
from zactors.patterns.harmony.gossip import GOSSIP_LIMIT
from tests.conftest import wait_for
from tests.patterns.harmony.peers import expect

pytestmark = pytest.mark.timeout(60)

GOSSIP_PEERS = b"\x00zactors/gossip/peers"

BAD_ENDPOINTS = [
    "tcp://host",                 # no port
    "tcp://127.0.0.1",            # no port
    "not an endpoint",
    "",
    "tcp://127.0.0.1:99999",      # port out of range
    "tcp://127.0.0.1:0",
    "tcp://127.0.0.1:-1",
    "tcp://*:5670",               # a wildcard is for bind
    "tcp://0.0.0.0:5670",
    "tcp://a;b:5670",             # libzmq's source-address syntax
    "tcp://224.0.0.1:5670",
    "inproc://zactors-pipe-1",    # never into our own process
    "ipc:///tmp/zactors.sock",
    "udp://127.0.0.1:5670",
    "pgm://eth0;239.192.1.1:5555",
    "tcp://\u00e9t\u00e9:5670",
]


@pytest.fixture
def pair(nodes):
    """Two good nodes that know each other."""
    a = nodes("a")
    b = nodes("b", endpoints=[a.endpoint])
    expect(a, "ENTER", peer=b.id)
    expect(b, "ENTER", peer=a.id)
    return a, b


def still_serves(a, b, mark=b"still here"):
    assert a.actor.alive
    b.whisper(a.id, mark)
    assert expect(a, "WHISPER", peer=b.id).frames == [mark]
    a.whisper(b.id, mark)
    assert expect(b, "WHISPER", peer=a.id).frames == [mark]


def test_the_validator():
    for endpoint in BAD_ENDPOINTS:
        with pytest.raises(ValueError):
            peer_endpoint(endpoint)
    for endpoint in ("tcp://127.0.0.1:5670", "tcp://[::1]:1", "tcp://node-7.example.org:65535"):
        assert peer_endpoint(endpoint) == endpoint


def test_hello_with_an_endpoint_libzmq_rejects_or_that_points_inside(pair, raw):
    a, b = pair
    liars = []
    for endpoint in BAD_ENDPOINTS + [a.endpoint]:  # and our own endpoint
        peer = raw(a)
        peer.send(zre.Hello(1, endpoint, ["g"], 1, "liar", {}))
        liars.append(peer)
    wait_for(lambda: a.stats().get("bad_endpoint", 0) >= len(liars), 10, "every HELLO refused")
    assert a.peers() == [b.id]
    still_serves(a, b)
    # A liar that says HELLO again, truthfully, is a peer like any other.
    liars[0].hello()
    expect(a, "ENTER", peer=liars[0].id)


def test_gossip_entries_without_port_or_into_the_process(pair, raw):
    a, b = pair
    peer = raw(a)
    peer.seq = 1
    peer.send(zre.Hello(1, peer.endpoint, [], 0, "gossip", {GOSSIP_HEADER: "1"}))
    expect(a, "ENTER", peer=peer.id)
    entries = [("%s %s" % (random.randbytes(16).hex(), e)).encode() for e in BAD_ENDPOINTS]
    entries += [b"", b"\xff\xfe", b"zz tcp://127.0.0.1:5", b"%s" % random.randbytes(16).hex().encode()]
    peer.send(zre.Whisper(peer.next(), [GOSSIP_PEERS] + entries))
    wait_for(lambda: a.stats().get("bad_endpoint", 0) >= len(BAD_ENDPOINTS), 10, "bad gossip refused")
    assert a.stats()["malformed_gossip"] == 4
    assert sorted(a.peers()) == sorted([b.id, peer.id])
    still_serves(a, b)


def test_hello_with_a_group_name_longer_than_a_shout_can_carry(pair, raw):
    a, b = pair
    long_name = "g" * 300 + "\u00e9" * 1000
    peer = raw(a)
    peer.hello(groups=[long_name, "ok", "ok", ""])
    expect(a, "ENTER", peer=peer.id)
    joins = {expect(a, "JOIN", peer=peer.id).group for _ in range(3)}
    assert joins == {long_name, "ok", ""}
    assert sorted(a.peer_groups(peer.id)) == sorted([long_name, "ok", ""])
    a.shout("ok", b"to ok")  # a's SHOUT to a normal group still reaches it
    from_a = zre.identity_of(bytes.fromhex(a.id))
    seen = []
    while len(seen) < 2:  # a's HELLO, then the SHOUT (b says HELLO too: it heard of us by gossip)
        identity, message = peer.recv()
        if identity == from_a:
            seen.append(message)
    assert seen[1] == zre.Shout(2, "ok", [b"to ok"])
    a.shout(long_name, b"cannot")  # refused inside (counted), the node goes on
    wait_for(lambda: a.stats().get("failed", 0) == 1, 10, "the SHOUT refused")
    peer.send(zre.Leave(peer.next(), "ok", 1))  # a LEAVE cannot name the long group: only an EXIT ends it
    assert expect(a, "LEAVE", peer=peer.id).group == "ok"
    peer.seq += 1  # a gap: the peer is invalid, EXIT
    peer.send(zre.Whisper(peer.next(), [b"after a gap"]))
    expect(a, "EXIT", peer=peer.id)
    assert a.peer_groups() == []  # groups nobody is in are forgotten
    still_serves(a, b)


def test_too_many_groups_in_a_hello_are_capped(nodes, raw):
    from zactors.patterns.harmony.engine import PEER_GROUPS_LIMIT
    a = nodes("a")
    peer = raw(a)
    peer.hello(groups=["g%d" % i for i in range(PEER_GROUPS_LIMIT + 50)])
    expect(a, "ENTER", peer=peer.id)
    wait_for(lambda: a.stats().get("group_limit", 0) == 50, 10, "the groups beyond the limit refused")
    assert len(a.peer_groups(peer.id)) == PEER_GROUPS_LIMIT


def test_gossip_floods_are_capped(pair, raw):
    a, b = pair
    peer = raw(a)
    peer.send(zre.Hello(1, peer.endpoint, [], 0, "flood", {GOSSIP_HEADER: "1"}))
    peer.seq = 1
    expect(a, "ENTER", peer=peer.id)
    peer.send(zre.Whisper(peer.next(), [GOSSIP_PEERS] + [b"junk %d" % i for i in range(GOSSIP_LIMIT + 100)]))
    wait_for(lambda: a.stats().get("gossip_limit", 0) == 1, 10, "the flood capped")
    assert a.stats()["malformed_gossip"] == GOSSIP_LIMIT  # the rest was never looked at
    still_serves(a, b)


def test_peer_limit_holds_against_gossip_of_many_peers(nodes, raw):
    a = nodes("a", max_peers=4)
    b = nodes("b", endpoints=[a.endpoint])
    expect(a, "ENTER", peer=b.id)
    peer = raw(a)
    peer.send(zre.Hello(1, peer.endpoint, [], 0, "many", {GOSSIP_HEADER: "1"}))
    peer.seq = 1
    expect(a, "ENTER", peer=peer.id)
    # 50 valid entries for nodes that do not exist: a would open a DEALER for each.
    entries = [("%s tcp://127.0.0.1:%d" % (random.randbytes(16).hex(), 1 + i)).encode() for i in range(50)]
    peer.send(zre.Whisper(peer.next(), [GOSSIP_PEERS] + entries))
    wait_for(lambda: a.stats().get("peer_limit", 0) >= 48, 10, "the peers beyond the limit refused")
    assert len(a.actor._sockets) < 10  # the inbox, the pipe, and at most max_peers DEALERs
    still_serves(a, b)


def test_a_user_endpoint_must_be_tcp_host_port():
    with pytest.raises(ValueError):
        Node("x", beacon=False, endpoints=["tcp://host"])
    node = Node("x", beacon=False).start()
    try:
        with pytest.raises(ValueError):
            node.connect("inproc://x")
    finally:
        node.stop()


def test_a_dealer_that_cannot_be_made_drops_that_peer_only(processes):
    """Out of file descriptors (EMFILE) for new peers: counted, and the node serves the others."""
    proc = processes([sys.executable, "-m", "tests.patterns.harmony.fd_starved"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=40)
    assert proc.returncode == 0, err.decode()[-2000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["alive"] and result["frames"] == ["still here"]
    assert result["stats"]["connect_failed"] >= 100


def test_a_hello_claiming_a_live_peers_endpoint_does_not_evict_it(pair, raw):
    a, b = pair
    impostor = raw(a)
    impostor.send(zre.Hello(1, b.endpoint, [], 0, "impostor", {}))
    gossip = raw(a)
    gossip.send(zre.Hello(1, gossip.endpoint, [], 0, "gossip", {GOSSIP_HEADER: "1"}))
    gossip.seq = 1
    expect(a, "ENTER", peer=gossip.id)
    gossip.send(zre.Whisper(gossip.next(), [GOSSIP_PEERS, ("%s %s" % (random.randbytes(16).hex(), b.endpoint)).encode()]))
    wait_for(lambda: a.stats().get("endpoint_conflict", 0) == 2, 10, "both claims refused")
    assert sorted(a.peers()) == sorted([b.id, gossip.id])
    still_serves(a, b)
