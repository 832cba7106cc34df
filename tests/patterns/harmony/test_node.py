"""Harmony nodes in one process on 127.0.0.1 (beacons off: endpoint discovery)."""
import random

import gevent
import gevent.event
import pytest

from zactors.patterns.harmony import protocol as zre
from tests.conftest import wait_for
from tests.patterns.harmony.peers import RawPeer, expect, mesh, quiet_until

pytestmark = pytest.mark.timeout(60)


def test_endpoint_only_discovery_finds_the_whole_network(nodes):
    made = mesh(nodes, 4)
    ids = {n.id for n in made}
    for node in made:
        assert set(node.peers()) == ids - {node.id}
    first = made[0]
    enter = expect(first, "ENTER", name="n3")
    assert enter.address == made[3].endpoint and enter.headers.get("X-ZACTORS-GOSSIP") == "1"


def test_peer_properties_and_groups(nodes):
    a = nodes("alpha", headers={"X-ROLE": "test"})
    b = nodes("beta", endpoints=[a.endpoint])
    b.join("red")
    b.join("blue")
    expect(a, "JOIN", group="blue")
    wait_for(lambda: b.peers() == [a.id], 10, "b to know a")
    assert a.peer_name(b.id) == "beta"
    assert a.peer_address(b.id) == b.endpoint
    assert b.peer_header(a.id, "X-ROLE") == "test"
    assert a.peer_groups(b.id) == ["blue", "red"]
    assert a.peer_groups() == ["blue", "red"]
    assert a.peers_by_group("red") == [b.id]
    assert b.own_groups() == ["blue", "red"]
    b.leave("red")
    expect(a, "LEAVE", group="red", peer=b.id)
    assert a.peers_by_group("red") == []
    assert a.peer("nobody") is None


def test_shout_reaches_exactly_the_members(nodes):
    a, b, c = mesh(nodes, 3)
    a.join("g")
    b.join("g")
    for node in (a, b, c):
        members = {a.id, b.id} - {node.id}
        wait_for(lambda: set(node.peers_by_group("g")) == members, 10, "%s to see the members" % node.name)
    c.shout("g", b"from c")  # a non-member may shout to a group
    assert expect(a, "SHOUT", peer=c.id).frames == [b"from c"]
    assert expect(b, "SHOUT", peer=c.id).frames == [b"from c"]
    a.shout("g", b"from a", b"part 2")
    a.whisper(c.id, b"marker")  # same DEALER, so it comes after any SHOUT to c
    assert quiet_until(c, b"marker") == []
    assert expect(b, "SHOUT", peer=a.id, group="g").frames == [b"from a", b"part 2"]
    b.leave("g")
    expect(a, "LEAVE", peer=b.id, group="g")
    a.shout("g", b"after leave")
    a.whisper(b.id, b"marker")
    assert quiet_until(b, b"marker") == []


def test_multi_frame_whisper(nodes):
    a, b = mesh(nodes, 2)
    frames = [b"", b"x", bytes(range(256)) * 4096, "unicode \u2713".encode()]
    a.whisper(b.id, *frames)
    event = expect(b, "WHISPER", peer=a.id)
    assert event.frames == frames and event.name == "n0"


def test_callbacks(nodes):
    a, b = mesh(nodes, 2)
    got = []
    b.on("WHISPER", got.append)
    a.whisper(b.id, b"cb")
    wait_for(lambda: got, 10, "callback")
    assert got[0].frames == [b"cb"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sequence_wraps_past_70000_without_exit(nodes):
    a, b = mesh(nodes, 2)
    total = 70_000
    received = []

    def consume():
        for event in b.events(timeout=20):
            if event.type == "WHISPER":
                received.append(event.frames[0])
                if len(received) == total:
                    return
            elif event.type == "EXIT":
                return

    reader = gevent.spawn(consume)
    for i in range(total):
        a.whisper(b.id, b"%d" % i)
    reader.join(100)
    assert len(received) == total
    assert received[-1] == b"%d" % (total - 1) and received[65536] == b"65536"
    assert b.stats().get("sequence_errors", 0) == 0
    assert a.id in b.peers() and b.id in a.peers()


def test_hello_is_sequence_1_and_first_on_the_dealer(nodes, raw):
    a = nodes("a")
    a.join("g")
    assert a.own_groups() == ["g"]  # the JOIN is done before the peer appears
    peer = raw(a)
    peer.hello()
    identity, hello = peer.recv()
    assert identity == zre.identity_of(bytes.fromhex(a.id))
    assert hello == zre.Hello(1, a.endpoint, ["g"], 1, "a", {"X-ZACTORS-GOSSIP": "1"})
    expect(a, "ENTER", peer=peer.id)
    a.whisper(peer.id, b"w")
    assert peer.recv()[1] == zre.Whisper(2, [b"w"])


def test_bad_input_is_counted_never_fatal(nodes, raw):
    a = nodes("a")
    peer = raw(a)
    stranger = RawPeer.dealer(random.randbytes(16), a.endpoint)
    bad_identity = RawPeer.dealer(None, a.endpoint, identity=b"\x07short")
    try:
        stranger.send_multipart(zre.encode(zre.Whisper(1, [b"who am I"])))  # no HELLO yet
        bad_identity.send_multipart(zre.encode(zre.Hello(1, "tcp://127.0.0.1:1", [], 0, "x", {})))
        peer.hello()
        expect(a, "ENTER", peer=peer.id)
        rng = random.Random(4)
        junk = [[rng.randbytes(rng.randrange(0, 40)) for _ in range(rng.randrange(1, 4))] for _ in range(300)]
        junk += [[b"\xaa\xa1\x09\x02\x00\x02"], [b"\xaa\xa1\x06\x01\x00\x02"], [b"\xaa\xa1\x04\x02\x00\x02\xffab\x01"]]
        for frames in junk:
            peer.out.send_multipart(frames)
        peer.send(zre.Join(peer.next(), "g", 7))  # status should have been 1
        assert expect(a, "JOIN", peer=peer.id).group == "g"
        peer.send(zre.Whisper(peer.next(), [b"still here"]))
        assert expect(a, "WHISPER", peer=peer.id).frames == [b"still here"]
        stats = a.stats()
        assert stats["malformed"] >= 290 and stats["unknown_message"] >= 1
        assert stats["status_mismatch"] == 1 and stats["not_ready"] >= 1
        # A gap in the sequence makes the peer invalid: EXIT; a new HELLO brings it back.
        peer.seq += 1
        peer.send(zre.Whisper(peer.next(), [b"after a gap"]))
        expect(a, "EXIT", peer=peer.id)
        peer.hello()
        expect(a, "ENTER", peer=peer.id)
        assert a.actor.alive
    finally:
        stranger.close(0)
        bad_identity.close(0)


def test_second_hello_means_restart(nodes, raw):
    a = nodes("a")
    peer = raw(a)
    peer.hello()
    expect(a, "ENTER", peer=peer.id)
    peer.hello()
    expect(a, "EXIT", peer=peer.id)
    expect(a, "ENTER", peer=peer.id)


def test_evasive_ping_then_exit_after_expiry(nodes, raw):
    a = nodes("a", evasive=0.3, expired=1.5)
    peer = raw(a)
    peer.hello()
    expect(a, "ENTER", peer=peer.id)
    started = gevent.get_hub().loop.now()
    expect(a, "EVASIVE", peer=peer.id)
    kinds = set()
    with gevent.Timeout(5, False):
        while zre.Ping not in kinds:
            kinds.add(type(peer.recv()[1]))
    assert zre.Ping in kinds
    expect(a, "EXIT", peer=peer.id)
    assert gevent.get_hub().loop.now() - started >= 1.2


def test_ping_ok_keeps_a_quiet_peer_alive(nodes):
    a = nodes("a", evasive=0.2, expired=1.0)
    b = nodes("b", evasive=0.2, expired=1.0, endpoints=[a.endpoint])
    expect(a, "ENTER", peer=b.id)
    expect(a, "EVASIVE", peer=b.id)  # silence turns evasive: PING, PING-OK...
    hub = gevent.get_hub()
    until = hub.loop.now() + 2.0  # watch for longer than the expiry: no EXIT
    evasive = 0
    while hub.loop.now() < until:
        event = a.recv(until - hub.loop.now())
        assert event is None or event.type != "EXIT"
        evasive += event is not None and event.type == "EVASIVE"
    assert b.id in a.peers() and a.id in b.peers()
    # Pinged again after each evasive span, not only once per expiry span.
    assert evasive >= 4, evasive


@pytest.mark.timeout(90)
def test_slow_receiver_blocks_the_sender_and_loses_nothing(nodes, raw):
    a = nodes("a", hwm=100, backlog=200, evasive=0.2)  # EVASIVE events while the sender is held
    peer = raw(a, rcvhwm=100)
    peer.hello()
    peer.recv()  # a's HELLO
    expect(a, "ENTER", peer=peer.id)
    total, size = 40_000, 1_000  # more than the pipe (2 x 10k), backlog and TCP buffers hold
    done = gevent.event.Event()

    def send_all():
        for i in range(total):
            a.whisper(peer.id, b"%06d" % i + bytes(size))
        done.set()

    sender = gevent.spawn(send_all)
    wait_for(lambda: a.blocked or done.is_set(), 20, "the node to hold back its sender")
    assert not done.is_set(), "the sender should be blocked by a peer that does not read"
    got, sequences = [], []
    while len(got) < total:
        _, message = peer.recv(timeout=30)
        sequences.append(message.sequence)  # PINGs may come in between: a quiet peer
        if type(message) is zre.Whisper:
            got.append(message)
    sender.join(10)
    assert [m.content[0][:6] for m in got] == [b"%06d" % i for i in range(total)]
    assert sequences == [(2 + i) & 0xFFFF for i in range(len(sequences))]
    assert a.stats().get("dropped_on_exit", 0) == 0


def test_polite_stop_is_seen_at_once(nodes):
    a, b = mesh(nodes, 2)
    b.stop()
    expect(a, "EXIT", timeout=3, peer=b.id)
    assert "STOP" in [event.type for event in b.events(timeout=3)]


def test_fuzzed_well_formed_headers_at_a_live_node(nodes, raw):
    """Random bodies behind valid ZRE headers, from peers with and without HELLO."""
    a = nodes("a")
    rng = random.Random(7)
    talkers = [raw(a) for _ in range(3)]
    for peer in talkers[:2]:
        peer.hello()
    for _ in range(600):
        peer = rng.choice(talkers)
        head = b"\xaa\xa1" + bytes((rng.randrange(0, 10), 2)) + rng.randrange(0, 65536).to_bytes(2, "big")
        frames = [head + rng.randbytes(rng.randrange(0, 30))] + [rng.randbytes(5) for _ in range(rng.randrange(3))]
        peer.out.send_multipart(frames)
    fresh = raw(a)
    fresh.hello()
    expect(a, "ENTER", peer=fresh.id, timeout=20)
    fresh.send(zre.Whisper(fresh.next(), [b"alive"]))
    assert expect(a, "WHISPER", peer=fresh.id).frames == [b"alive"]
    stats = a.stats()
    assert a.actor.alive and sum(stats.values()) > 100


def test_embedded_in_a_gevent_web_server(nodes):
    from gevent.pywsgi import WSGIServer
    import urllib.request

    a, b = mesh(nodes, 2)

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/shout":
            a.shout("web", b"from a web handler")
        body = ",".join(a.peers()).encode()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [body]

    b.join("web")
    wait_for(lambda: a.peers_by_group("web") == [b.id], 10, "b in web")
    server = WSGIServer(("127.0.0.1", 0), app, log=None)
    server.start()
    try:
        url = "http://127.0.0.1:%d/" % server.server_port
        fetch = gevent.get_hub().threadpool
        replies = [fetch.spawn(lambda u=url + ("shout" if i % 2 else ""): urllib.request.urlopen(u, timeout=20).read())
                   for i in range(20)]
        assert [r.get(timeout=30) for r in replies] == [b.id.encode()] * 20
        shouts = 0
        with gevent.Timeout(10, False):
            while shouts < 10:
                if expect(b, "SHOUT", group="web").frames == [b"from a web handler"]:
                    shouts += 1
        assert shouts == 10
    finally:
        server.stop()


def test_the_handle_and_the_engine_share_one_command_table():
    from zactors.patterns.harmony import NodeActor, commands
    assert {getattr(commands, name) for name in commands.__all__} == set(NodeActor._commands)


def test_a_fixed_tcp_port_gives_a_stable_endpoint_across_a_restart():
    """Issue 21: Harmony's TCP port can be fixed, so the broadcast-free mode has a stable endpoint."""
    import socket

    from zactors.patterns.harmony.node import Node
    with socket.socket() as probe:                     # a free port, then released for the node
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    first = Node("fixed", beacon=False, tcp_port=port).start()
    try:
        assert first.endpoint == "tcp://127.0.0.1:%d" % port
    finally:
        first.stop()
    again = Node("fixed", beacon=False, tcp_port=port).start()   # binds it again while it is released
    other = Node("other", beacon=False, endpoints=["tcp://127.0.0.1:%d" % port]).start()
    try:
        assert again.endpoint == "tcp://127.0.0.1:%d" % port
        wait_for(lambda: again.id in other.peers(), 10, "a peer that knows only the fixed endpoint to find it")
    finally:
        other.stop()
        again.stop()


def test_a_node_can_be_given_its_identity():
    """Issue 22: a restarted node keeps its UUID (its supervisor's factory passes it), so it is the same peer."""
    import uuid

    from zactors.patterns.harmony.node import Node
    given = uuid.uuid4()
    assert Node("a", beacon=False, uuid=given).id == given.hex.upper()
    assert Node("b", beacon=False, uuid=given.hex).uuid == given.bytes == Node("c", beacon=False, uuid=given.bytes).uuid
    assert Node("d", beacon=False).uuid != given.bytes
    for wrong in (b"short", "not-hex", 42):
        with pytest.raises(ValueError, match="a node uuid is"):
            Node("e", beacon=False, uuid=wrong)
