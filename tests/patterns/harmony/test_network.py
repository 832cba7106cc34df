"""Harmony nodes in separate processes and network namespaces: UDP discovery, EXIT, pyre interop."""
import json
import os
import random
import signal
import time

import gevent
import pytest
from gevent.fileobject import FileObjectThread

from tests.netns import lab  # noqa: F401  (fixture)

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(90)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FAST = {"interval": 0.1, "evasive": 1.0, "expired": 3.0}


class Agent:
    """A node process in a namespace, driven by JSON lines (see agent.py)."""

    def __init__(self, ns, config, pyre=False):
        args = ["-m", "tests.patterns.harmony.agent"] + (["--pyre"] if pyre else []) + [json.dumps(config)]
        self.proc = ns.python(*args, cwd=ROOT)
        self.ns = ns
        self.lines = FileObjectThread(self.proc.stdout, "r")
        ready = self.next(30, "ready line")
        self.id = ready["ready"]
        self.endpoint = ready["endpoint"]
        self.events = []

    def next(self, timeout, what="anything"):
        with gevent.Timeout(timeout, False):
            line = self.lines.readline()
            if line:
                return json.loads(line)
            pytest.fail("agent ended: %s" % self.proc.stderr.read()[-2000:])
        pytest.fail("agent: no %s within the deadline; unclaimed events: %s" % (what, self.events[-10:]))

    def expect(self, kind, timeout=15, **fields):
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if event.get("type") == kind and all(event.get(k) == v for k, v in fields.items()):
                    self.events.remove(event)
                    return event
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail("no %s %s within %ss; had %s" % (kind, fields, timeout, self.events[-10:]))
            self.events.append(self.next(remaining, "%s %s" % (kind, fields)))

    def send(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()


def test_discovery_groups_whisper_and_polite_exit_across_namespaces(lab):
    a_ns, b_ns = lab.pair()
    a = Agent(a_ns, dict(FAST, name="A"))
    b = Agent(b_ns, dict(FAST, name="B", headers={"X-ROLE": "b"}))
    enter = a.expect("ENTER", peer=b.id)
    assert enter["name"] == "B" and enter["headers"]["X-ROLE"] == "b"
    assert enter["address"].startswith("tcp://%s:" % b_ns.address)
    assert int(enter["address"].rsplit(":", 1)[1]) >= 0xC000
    b.expect("ENTER", peer=a.id)
    a.send(cmd="join", group="g")
    b.send(cmd="join", group="g")
    a.expect("JOIN", peer=b.id, group="g")
    b.expect("JOIN", peer=a.id, group="g")
    a.send(cmd="shout", group="g", frames=["hello", "group"])
    assert b.expect("SHOUT", peer=a.id)["frames"] == ["hello", "group"]
    b.send(cmd="whisper", peer=a.id, frames=["one", "", "three"])
    assert a.expect("WHISPER", peer=b.id)["frames"] == ["one", "", "three"]
    started = time.monotonic()
    b.send(cmd="stop")
    a.expect("EXIT", peer=b.id, timeout=5)
    assert time.monotonic() - started < FAST["expired"], "a polite stop must not wait for expiry"


def test_sigkilled_node_exits_after_the_expired_timeout(lab):
    a_ns, b_ns = lab.pair()
    config = {"interval": 0.1, "evasive": 0.5, "expired": 2.0}
    a = Agent(a_ns, dict(config, name="A"))
    b = Agent(b_ns, dict(config, name="B"))
    a.expect("ENTER", peer=b.id)
    killed = time.monotonic()
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(10)
    a.expect("EVASIVE", peer=b.id, timeout=10)
    a.expect("EXIT", peer=b.id, timeout=15)
    elapsed = time.monotonic() - killed
    assert config["expired"] - 0.3 <= elapsed <= config["expired"] + 8, elapsed


def test_three_namespaces_on_a_lan(lab):
    hosts = lab.lan(3)
    agents = [Agent(ns, dict(FAST, name="N%d" % i)) for i, ns in enumerate(hosts)]
    for agent in agents:
        for other in agents:
            if other is not agent:
                agent.expect("ENTER", peer=other.id)
    agents[0].send(cmd="join", group="g")
    agents[1].send(cmd="join", group="g")
    for member in agents[:2]:
        agents[2].expect("JOIN", peer=member.id, group="g")
    agents[2].send(cmd="shout", group="g", frames=["to members"])
    for member in agents[:2]:
        assert member.expect("SHOUT", peer=agents[2].id)["frames"] == ["to members"]


def test_interop_with_pyre_both_ways(lab):
    z_ns, p_ns = lab.pair()
    z = Agent(z_ns, {"name": "zactors", "interval": 0.5})
    p = Agent(p_ns, {"name": "pyre"}, pyre=True)
    # discovery both ways
    enter = z.expect("ENTER", peer=p.id, timeout=20)
    assert enter["name"] == "pyre" and enter["address"].startswith("tcp://%s:" % p_ns.address)
    assert p.expect("ENTER", peer=z.id, timeout=20)["name"] == "zactors"
    # JOIN both ways
    z.send(cmd="join", group="chat")
    p.send(cmd="join", group="chat")
    p.expect("JOIN", peer=z.id, group="chat")
    z.expect("JOIN", peer=p.id, group="chat")
    # SHOUT both ways
    z.send(cmd="shout", group="chat", frames=["from zactors"])
    assert p.expect("SHOUT", peer=z.id, group="chat")["frames"] == ["from zactors"]
    p.send(cmd="shout", group="chat", frames=["from pyre"])
    assert z.expect("SHOUT", peer=p.id, group="chat")["frames"] == ["from pyre"]
    # WHISPER both ways, multi-frame
    z.send(cmd="whisper", peer=p.id, frames=["w1", "w2"])
    assert p.expect("WHISPER", peer=z.id)["frames"] == ["w1", "w2"]
    p.send(cmd="whisper", peer=z.id, frames=["back"])
    assert z.expect("WHISPER", peer=p.id)["frames"] == ["back"]
    # LEAVE, then a polite stop seen by pyre
    z.send(cmd="leave", group="chat")
    p.expect("LEAVE", peer=z.id, group="chat")
    z.send(cmd="stop")
    p.expect("EXIT", peer=z.id, timeout=10)


def test_no_broadcast_interface_is_a_clear_error_or_log(lab, caplog):
    from zactors.actors.beacon import BeaconError
    from zactors.patterns.harmony import Node

    lonely = lab.namespace()  # loopback only
    with lonely.entered():
        with pytest.raises(BeaconError, match="no IPv4 interface named or addressed 'eth9'"):
            Node("picky", interface="eth9").start()
        node = Node("modest").start()  # no interface asked for: log, go on by endpoint
    try:
        assert "no UDP discovery: no broadcast-capable IPv4 interface" in caplog.text
        assert node.actor.call("INFO", timeout=5)["beacon"] is None
        assert node.endpoint.startswith("tcp://127.0.0.1:")
    finally:
        node.stop()


def test_beacons_alone_do_not_keep_a_peer_alive(lab):
    """UDP says B is there, TCP says nothing: EVASIVE, SILENT, then EXIT at expiry."""
    from zactors.actors.beacon import Beacon
    from zactors.patterns.harmony import protocol as zre

    a_ns, b_ns = lab.pair()
    config = {"interval": 0.1, "evasive": 0.5, "expired": 2.5}
    a = Agent(a_ns, dict(config, name="A"))
    b = Agent(b_ns, dict(config, name="B"))
    a.expect("ENTER", peer=b.id)
    port = int(b.endpoint.rsplit(":", 1)[1])
    with b_ns.entered():  # B's beacon goes on from another socket in B's namespace...
        ghost = Beacon(port=5670, interval=0.1)
    try:
        ghost.call("PUBLISH", zre.encode_beacon(bytes.fromhex(b.id), port), timeout=5)
        b.proc.send_signal(signal.SIGSTOP)  # ...while B itself says nothing over TCP
        stopped = time.monotonic()
        a.expect("EVASIVE", peer=b.id, timeout=10)
        a.expect("SILENT", peer=b.id, timeout=10)
        a.expect("EXIT", peer=b.id, timeout=15)
        assert time.monotonic() - stopped >= config["expired"] - 0.5
    finally:
        ghost.destroy()
        b.proc.send_signal(signal.SIGCONT)


def test_a_node_restarted_with_its_identity_is_found_again_by_pyre_and_zactors_peers(lab):
    """Issue 22, with beacons: B is SIGKILLed and restarted with its UUID and TCP port.  A pyre peer and a
    zactors peer, both still holding the old B, take its successor's HELLO as a restart, within a few beacon
    intervals (pyre's is 1 s), and talk to it both ways."""
    b_ns, p_ns, a_ns = lab.lan(3)
    config = dict(FAST, name="B", uuid="%032x" % random.getrandbits(128), tcp_port=0xC123)
    b = Agent(b_ns, config)
    p = Agent(p_ns, {"name": "P"}, pyre=True)
    a = Agent(a_ns, dict(FAST, name="A"))
    for peer in (p, a):
        peer.expect("ENTER", peer=b.id, timeout=20)
        b.expect("ENTER", peer=peer.id, timeout=20)
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(10)
    again = Agent(b_ns, config)
    assert (again.id, again.endpoint) == (b.id, b.endpoint)
    for peer in (p, a):
        again.expect("ENTER", peer=peer.id, timeout=10)
        peer.expect("ENTER", peer=b.id, timeout=10)
        again.send(cmd="whisper", peer=peer.id, frames=["back"])
        assert peer.expect("WHISPER", peer=b.id)["frames"] == ["back"]
        peer.send(cmd="whisper", peer=b.id, frames=["welcome back"])
        assert again.expect("WHISPER", peer=peer.id)["frames"] == ["welcome back"]
