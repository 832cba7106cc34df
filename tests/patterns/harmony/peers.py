"""Test helpers for Harmony: waiting for events, meshes, and hand-driven raw ZRE peers."""
import random

import gevent
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.harmony import protocol as zre
from tests.conftest import wait_for

__all__ = ["RawPeer", "expect", "quiet_until", "mesh"]


def expect(node, kind, timeout=10.0, **fields):
    """The next event of ``kind`` whose fields match; others are skipped."""
    with gevent.Timeout(timeout, False):
        while True:
            event = node.recv(timeout)
            if event is None:
                break
            if event.type == kind and all(getattr(event, k) == v for k, v in fields.items()):
                return event
    pytest.fail("%s: no %s %s within %ss" % (node.name, kind, fields, timeout))


def quiet_until(node, marker, kinds=("SHOUT", "WHISPER")):
    """Events of ``kinds`` that arrive before the WHISPER whose first frame is ``marker``."""
    seen = []
    with gevent.Timeout(10, False):
        while True:
            event = node.recv(10)
            if event is None:
                break
            if event.type == "WHISPER" and event.frames[:1] == [marker]:
                return seen
            if event.type in kinds:
                seen.append(event)
    pytest.fail("%s: marker %r never arrived" % (node.name, marker))


def mesh(nodes, count):
    """``count`` nodes, each told only the previous one's endpoint; waits until all know all."""
    made = []
    for i in range(count):
        endpoints = [made[-1].endpoint] if made else []
        made.append(nodes("n%d" % i, endpoints=endpoints))
    for node in made:
        wait_for(lambda: len(node.peers()) == count - 1, 15, "%s to know every peer" % node.name)
    return made


# -- raw peers: a DEALER/ROUTER we drive by hand -----------------------------
class RawPeer:
    """A hand-driven ZRE peer: a DEALER into the node, a ROUTER for its replies."""

    def __init__(self, node, name="raw", rcvhwm=1000):
        self.uuid = random.randbytes(16)
        self.id = self.uuid.hex().upper()
        self.inbox = context().socket(zmq.ROUTER, socket_class=Socket)
        self.inbox.linger = 0
        self.inbox.rcvhwm = rcvhwm
        port = self.inbox.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = "tcp://127.0.0.1:%d" % port
        self.out = self.dealer(self.uuid, node.endpoint)
        self.name = name
        self.seq = 0

    @staticmethod
    def dealer(uuid, endpoint, identity=None):
        sock = context().socket(zmq.DEALER, socket_class=Socket)
        sock.linger = 0
        sock.identity = identity if identity is not None else zre.identity_of(uuid)
        sock.connect(endpoint)
        return sock

    def send(self, message):
        self.out.send_multipart(zre.encode(message))

    def next(self):
        self.seq = (self.seq + 1) & 0xFFFF
        return self.seq

    def hello(self, groups=(), status=0):
        self.seq = 1
        self.send(zre.Hello(1, self.endpoint, list(groups), status, self.name, {}))

    def recv(self, timeout=10):
        frames = self.inbox.recv_multipart(timeout=timeout)
        return frames[0], zre.decode(frames[1:])

    def close(self):
        self.out.close(0)
        self.inbox.close(0)
