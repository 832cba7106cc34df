"""Issue 22: a node restarted with its identity (same UUID, same endpoint) is heard again promptly.

A peer that knows the node's endpoint keeps it: when the connection of its
DEALER drops, it drops the node (EXIT) and greets the endpoint anew, so the
next incarnation hears its HELLO; libzmq alone would reconnect the old DEALER
silently, after its HELLO was lost with the dying node, or with nothing said
to a new incarnation that drops whatever comes before a HELLO.
"""
import json
import os
import socket
import sys
import time
import uuid

import gevent
import gevent.subprocess
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.harmony import protocol as zre
from tests.conftest import wait_for
from tests.patterns.harmony.peers import expect

pytestmark = pytest.mark.timeout(60)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def free_port():
    with socket.socket() as sock:  # a free port, released for the node to bind
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bound_router(port, timeout=10):
    """A plain ROUTER on ``port``, bound as soon as the port is released."""
    sock = context().socket(zmq.ROUTER, socket_class=Socket)
    sock.linger = 0
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.bind("tcp://127.0.0.1:%d" % port)
            return sock
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EADDRINUSE or time.monotonic() > deadline:
                sock.close(0)
                raise
        gevent.sleep(0.01)


def test_a_hello_taken_by_a_dying_node_is_said_again_to_its_successor(nodes):
    """The defect behind the xfail of test_up_supervision: the HELLO went to a node that was going."""
    port, identity = free_port(), uuid.uuid4()
    b = nodes("b", tcp_port=port, uuid=identity)
    a = nodes("a", endpoints=[b.endpoint])
    expect(a, "ENTER", peer=b.id)
    b.stop()  # its goodbye: a drops it and greets its endpoint again at once
    expect(a, "EXIT", peer=b.id)
    dying = bound_router(port)  # a node there takes that HELLO, then dies
    try:
        with gevent.Timeout(10, False):
            frames = dying.recv_multipart()
            while type(zre.decode(frames[1:])) is not zre.Hello:
                frames = dying.recv_multipart()
        assert frames[0] == zre.identity_of(bytes.fromhex(a.id)), "a's HELLO reached the dying node"
    finally:
        dying.close(0)
    again = nodes("b", tcp_port=port, uuid=identity)  # its successor: same UUID, same endpoint
    expect(a, "ENTER", peer=b.id, timeout=10)
    wait_for(lambda: a.id in again.peers(), 10, "the successor knowing a")
    again.whisper(a.id, b"back")
    assert expect(a, "WHISPER", peer=b.id).frames == [b"back"]
    a.whisper(again.id, b"hello again")
    assert expect(again, "WHISPER", peer=a.id).frames == [b"hello again"]
    assert a.stats()["disconnects"] >= 1


class Agent:
    """A node in a process of its own on loopback (tests/patterns/harmony/agent.py), to be SIGKILLed."""

    def __init__(self, config):
        self.proc = gevent.subprocess.Popen(
            [sys.executable, "-m", "tests.patterns.harmony.agent", json.dumps(config)], cwd=ROOT,
            stdin=gevent.subprocess.PIPE, stdout=gevent.subprocess.PIPE, text=True)
        self.lines = self.proc.stdout  # gevent's: reading parks this greenlet only
        ready = self.next(30)
        self.id, self.endpoint = ready["ready"], ready["endpoint"]

    def next(self, timeout):
        with gevent.Timeout(timeout, False):
            line = self.lines.readline()
            assert line, "the agent ended"
            return json.loads(line)
        pytest.fail("the agent said nothing within %ss" % timeout)

    def expect(self, kind, timeout=10, **fields):
        deadline = time.monotonic() + timeout
        while True:
            event = self.next(max(0.0, deadline - time.monotonic()))
            if event.get("type") == kind and all(event.get(k) == v for k, v in fields.items()):
                return event

    def send(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.proc.stdin.close()
        self.proc.stdout.close()


def test_a_node_killed_and_restarted_with_its_identity_is_heard_again_long_before_expiry(nodes):
    """SIGKILL: no goodbye.  Its peer sees the connection drop and greets the successor (Zyre would wait
    for the 30 s expiry, and the successor would drop what it is sent until then)."""
    config = {"name": "b", "beacon": False, "host": "127.0.0.1", "tcp_port": free_port(),
              "uuid": uuid.uuid4().hex}
    b = Agent(config)
    agents = [b]
    try:
        a = nodes("a", endpoints=[b.endpoint])  # Zyre's timeouts: evasive 5 s, expired 30 s
        expect(a, "ENTER", peer=b.id)
        b.kill()
        expect(a, "EXIT", peer=b.id, timeout=4)  # well before evasive (5 s), let alone expired (30 s)
        again = Agent(config)
        agents.append(again)
        assert (again.id, again.endpoint) == (b.id, b.endpoint)
        expect(a, "ENTER", peer=b.id, timeout=10)
        again.expect("ENTER", peer=a.id)
        again.send(cmd="whisper", peer=a.id, frames=["back"])
        assert expect(a, "WHISPER", peer=b.id).frames == [b"back"]
        a.whisper(b.id, b"hello again")
        assert again.expect("WHISPER", peer=a.id)["frames"] == ["hello again"]
    finally:
        for agent in agents:
            agent.kill()
