"""Clone test helpers: servers and clients on ephemeral loopback ports, raw peers."""
import os
import random
import socket
import subprocess
import uuid

import pytest
import zmq

from zactors.actors.sockets import Socket, context
from tests.conftest import wait_for
from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.server import CloneServer


@pytest.fixture
def make():
    """``make(CloneServer, ...)`` / ``make(Clone, ...)``: destroyed after the test, clients first."""
    made = []

    def make(cls, *args, **kwargs):
        actor = cls(*args, **kwargs)
        made.append(actor)
        return actor

    yield make
    for actor in sorted(made, key=lambda a: isinstance(a, CloneServer)):
        actor.destroy()


@pytest.fixture
def raw():
    """``raw(zmq.DEALER, connect=...)``: a greenlet-friendly plain socket, closed after the test."""
    made = []

    def raw(kind, connect=None, **options):
        sock = context().socket(kind, socket_class=Socket)
        sock.linger = 0
        for name, value in options.items():
            setattr(sock, name, value)
        if connect:
            sock.connect(connect)
        made.append(sock)
        return sock

    yield raw
    for sock in made:
        sock.close(0)


@pytest.fixture
def small_disk(tmp_path):
    """A real 256 KiB tmpfs (root only), unmounted after the test."""
    path = tmp_path / "disk"
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % done.stderr.decode().strip())
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)


def load_keys(collector, client, n, value=b"v%d"):
    """Publish ``n`` KVSETs (``k000000``... = ``value % i``) at full speed through a raw PUB to a server's
    ``collector``; return once ``client`` holds them all (and the key ``probe``)."""
    pub = context().socket(zmq.PUB, socket_class=Socket)
    pub.linger = 0
    pub.sndhwm = 0
    pub.connect(collector)
    try:
        def probe():
            pub.send_multipart([b"probe", bytes(8), uuid.uuid4().bytes, b"", b"1"])
            return client.get("probe") == b"1"
        wait_for(probe, timeout=20, what="the raw publisher reaches the primary")
        for i in range(n):
            pub.send_multipart([b"k%06d" % i, bytes(8), uuid.uuid4().bytes, b"", value % i if b"%" in value else value])
        wait_for(lambda: len(client) == n + 1, timeout=60, what="the client holds every key")
    finally:
        pub.close(0)


def rebind(make, cls, timeout=5.0, **kwargs):
    """``make(cls, **kwargs)`` on endpoints a just-destroyed actor held: libzmq releases them
    asynchronously, so retry on EADDRINUSE until ``timeout``."""
    import errno
    import time

    import gevent

    deadline = time.monotonic() + timeout
    while True:
        try:
            return make(cls, **kwargs)
        except zmq.ZMQError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            gevent.sleep(0.05)


def client_of(server):
    """The server spec a Clone takes for a CloneServer actor."""
    return tuple(server.endpoints[:3])


def pair(make, **options):
    """A primary and a backup on ephemeral ports, each told the other's endpoints."""
    primary = make(CloneServer, role="primary", name="primary", **options)
    backup = make(CloneServer, role="backup", name="backup", peer=primary.endpoints, **options)
    snapshot, publisher, _collector, state = backup.endpoints
    primary.call("PEER", snapshot, publisher, state)
    return primary, backup



def free_base_port():
    """A base port P with P..P+3 free on loopback (the servers bind them a moment later)."""
    rnd = random.Random()
    for _ in range(200):
        base = rnd.randrange(20000, 60000)
        held = []
        try:
            for port in range(base, base + 4):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    pytest.skip("no four consecutive free ports")


__all__ = ["rebind", "client_of", "pair", "Clone", "CloneServer", "zmq"]
