"""Hypothesis against a live Harmony node: well-formed ZRE messages with hostile contents.

Every message is built with the codec's own types (``zre.Hello``, ``Join``,
...) and encoders, so it passes the header checks and reaches the node's
state machine: huge and empty strings, binary junk where UTF-8 belongs, every
sequence and status number, unknown and forged peers, long groups, gossip
with hostile endpoints.  Sent over tcp from a pool of raw DEALERs; the node
must never die, and must go on serving a good peer.
"""
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from zactors.patterns.harmony import GOSSIP_HEADER, protocol as zre
from tests.conftest import wait_for
from tests.patterns.harmony.peers import RawPeer, expect

pytestmark = pytest.mark.timeout(120)

GOSSIP_PEERS = b"\x00zactors/gossip/peers"
GOSSIP_BYE = b"\x00zactors/gossip/bye"

# -- field strategies: text that fits a ZRE string, or not UTF-8 at all -----
short_text = st.text(max_size=60).filter(lambda s: len(s.encode()) <= 255)
junk = st.binary(min_size=1, max_size=255).filter(lambda b: not _utf8(b))
string = st.one_of(short_text, st.just(""), st.just("x" * 255), st.just("\u00e9" * 127), junk)
longstr = st.one_of(short_text, st.just("g" * 4000), st.just("\u20ac" * 300), junk)
sequence = st.one_of(st.integers(0, 65535), st.sampled_from([0, 1, 2, 65535]))
status = st.integers(0, 255)
content = st.lists(st.one_of(st.binary(max_size=64), st.just(b"\x00" * 70000), st.just(b"\x00")), max_size=4)


def _utf8(data):
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


@st.composite
def endpoints(draw, known):
    """An endpoint as a peer might advertise it: real listeners, ours, or hostile strings."""
    return draw(st.one_of(
        st.sampled_from(known),
        st.sampled_from(["tcp://host", "tcp://127.0.0.1", "tcp://127.0.0.1:99999", "tcp://*:5670",
                         "inproc://zactors", "ipc:///tmp/zactors.sock", "tcp://a;b:1", "", "tcp://[::1]:x",
                         "tcp://0.0.0.0:1", "tcp://" + "a" * 240 + ":1"]),
        short_text,
    ))


@st.composite
def messages(draw, known):
    kind = draw(st.sampled_from(["hello", "whisper", "shout", "join", "leave", "ping", "pingok", "gossip", "bye"]))
    seq = draw(sequence)
    if kind == "hello":
        headers = draw(st.dictionaries(string, longstr, max_size=4))
        if draw(st.booleans()):
            headers[GOSSIP_HEADER] = "1"
        return zre.encode(zre.Hello(seq, draw(endpoints(known)), draw(st.lists(longstr, max_size=6)), draw(status),
                                    draw(string), headers))
    if kind == "whisper":
        return zre.encode(zre.Whisper(seq, draw(content)))
    if kind == "shout":
        return zre.encode(zre.Shout(seq, draw(string), draw(content)))
    if kind == "join":
        return zre.encode(zre.Join(seq, draw(string), draw(status)))
    if kind == "leave":
        return zre.encode(zre.Leave(seq, draw(string), draw(status)))
    if kind == "ping":
        return zre.encode(zre.Ping(seq))
    if kind == "pingok":
        return zre.encode(zre.PingOk(seq))
    if kind == "bye":
        return zre.encode(zre.Whisper(seq, [GOSSIP_BYE] + draw(content)))
    entries = draw(st.lists(st.one_of(
        st.builds(lambda uuid, endpoint: ("%s %s" % (uuid.hex(), endpoint)).encode(),
                  st.binary(min_size=16, max_size=16), endpoints(known)),
        st.binary(max_size=80)), max_size=8))
    return zre.encode(zre.Whisper(seq, [GOSSIP_PEERS] + entries))


def test_well_formed_hostile_messages_never_kill_a_node(nodes, raw):
    a = nodes("a")
    b = nodes("b", endpoints=[a.endpoint])
    expect(a, "ENTER", peer=b.id)
    talkers = [raw(a, name="t%d" % i) for i in range(5)]
    for peer in talkers[:3]:
        peer.send(zre.Hello(1, peer.endpoint, ["g"], 0, peer.name, {GOSSIP_HEADER: "1"}))
    forged = [RawPeer.dealer(None, a.endpoint, identity=identity)
              for identity in (b"\x02" + bytes(16), b"\x01" + bytes(15), b"\x01" + bytes(17))]
    senders = [t.out for t in talkers] + forged
    known = [t.endpoint for t in talkers] + [a.endpoint, b.endpoint]

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.integers(0, len(senders) - 1), messages(known)), min_size=1, max_size=8))
    def barrage(batch):
        for index, frames in batch:
            senders[index].send_multipart(frames)
        assert a.actor.alive

    try:
        barrage()
        # Each talker now says HELLO afresh and whispers a marker: when every
        # marker is in, everything the talker sent before it was handled.
        for peer in talkers:
            peer.hello()
            peer.send(zre.Whisper(peer.next(), [b"marker " + peer.name.encode()]))
        markers = set()
        wait_for(lambda: _collect(a, markers) >= len(talkers), 30, "every talker's marker")
        assert a.actor.alive
        stats = a.stats()
        assert stats.get("malformed", 0) + stats.get("bad_endpoint", 0) > 0
        b.whisper(a.id, b"good")
        assert expect(a, "WHISPER", peer=b.id).frames == [b"good"]
        a.whisper(b.id, b"good back")
        assert expect(b, "WHISPER", peer=a.id).frames == [b"good back"]
    finally:
        for sock in forged:
            sock.close(0)


def _collect(node, markers):
    event = node.recv(0.05)
    if event is not None and event.type == "WHISPER" and event.frames[:1] and event.frames[0].startswith(b"marker "):
        markers.add(event.frames[0])
    return len(markers)


def test_hostile_hellos_from_many_identities_never_kill_a_node(nodes):
    """Each HELLO from a fresh identity: the node makes (or refuses) a DEALER each time."""
    a = nodes("a", max_peers=50)
    b = nodes("b", endpoints=[a.endpoint])
    expect(a, "ENTER", peer=b.id)
    made = []
    rng = random.Random(11)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(endpoints([b.endpoint, "tcp://127.0.0.1:9"]), st.lists(longstr, max_size=3), string)
    def hello(endpoint, groups, name):
        sock = RawPeer.dealer(rng.randbytes(16), a.endpoint)
        made.append(sock)
        sock.send_multipart(zre.encode(zre.Hello(1, endpoint, groups, 0, name, {})))
        assert a.actor.alive

    try:
        hello()
        wait_for(lambda: a.stats().get("bad_endpoint", 0) + len(a.peers()) > 10, 20, "the HELLOs handled")
        b.whisper(a.id, b"good")
        assert expect(a, "WHISPER", peer=b.id).frames == [b"good"]
        assert a.actor.alive
    finally:
        for sock in made:
            sock.close(0)
