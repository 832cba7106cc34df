"""The server's update path stays lean: a plain KVSET (no properties) at an active server without a
journal costs a fixed, small number of Python calls in the Clone modules (the benchmark's
updates_1_client fell 30% when it took eight; it takes two, three with a UUID: the handler, the
map's Entry, and the resend filter for a UUID)."""
import sys
import uuid

import greenlet
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.server import CloneServer
from tests.conftest import wait_for
from tests.patterns.clone.conftest import client_of

pytestmark = pytest.mark.timeout(60)


def test_plain_update_costs_two_clone_calls_three_with_a_uuid(make):
    server = make(CloneServer)
    client = make(Clone, [client_of(server)])
    assert client.wait_synced(5)
    pub = context().socket(zmq.PUB, socket_class=Socket)
    pub.linger = 0
    pub.sndhwm = 0
    pub.connect(server.endpoints[2])
    n = 2000
    calls = []
    server_greenlet = server._greenlet

    def profile(frame, event, arg):
        if event == "call" and "/patterns/clone/" in frame.f_code.co_filename \
                and greenlet.getcurrent() is server_greenlet:
            calls.append(frame.f_code.co_name)
    try:
        def probe():
            pub.send_multipart([b"probe", bytes(8), uuid.uuid4().bytes, b"", b"1"])
            return client.get("probe") == b"1"
        wait_for(probe, timeout=20, what="the publisher reaches the server")
        sys.setprofile(profile)
        try:
            for i in range(n):
                pub.send_multipart([b"k%06d" % i, bytes(8), uuid.uuid4().bytes if i & 1 else b"", b"", b"v"])
            wait_for(lambda: len(client) == n + 1, timeout=30, what="the client holds every key")
        finally:
            sys.setprofile(None)
    finally:
        pub.close(0)
    assert server.call("INFO")["counters"]["updates"] >= n + 1
    per_update = len(calls) / n  # 2 per update, 3 with a UUID (half of them have one)
    assert per_update <= 2.6, "%.2f Clone calls per update: %s" % (
        per_update, sorted(set(calls), key=calls.count, reverse=True)[:8])
