"""Hypothesis at a live server: well-formed KVSETs with hostile contents, checked against a model."""
import itertools

import gevent
import pytest
import zmq
from hypothesis import HealthCheck, given, settings, strategies as st

from zactors.actors.sockets import Socket, context
from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.protocol import MAX_KEY, ProtocolError, decode_kvset, encode_kvmsg
from zactors.patterns.clone.server import CloneServer
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(300)

_round = itertools.count()


@pytest.fixture(scope="module")
def live():
    server = CloneServer()
    clone = Clone([tuple(server.endpoints[:3])])
    assert clone.wait_synced(10)
    pub = context().socket(zmq.PUB, socket_class=Socket)
    pub.linger = 0
    pub.sndhwm = 0
    pub.connect(server.endpoints[2])
    gevent.sleep(0.3)
    yield server, clone, pub
    pub.close(0)
    clone.destroy()
    server.destroy()


suffixes = st.one_of(st.binary(min_size=0, max_size=12), st.sampled_from([b"HUGZ", b"KTHXBAI", b"x" * (MAX_KEY + 1)]))
props = st.one_of(st.just(b""), st.sampled_from([b"ttl=1000\n", b"ttl=0\n", b"ttl=-5\n", b"ttl=nan\n", b"ttl=1e400\n",
                                                 b"a=b\nc=d\n", b"bad line\n", b"=x\n", b"owner=\xff\n"]),
                  st.binary(max_size=30))
uuids = st.sampled_from([b"", b"u" * 16, b"u" * 15, b"u" * 17])
values = st.one_of(st.just(b""), st.binary(min_size=1, max_size=50))
updates = st.lists(st.tuples(suffixes, st.integers(0, 2 ** 64 - 1), uuids, props, values), max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(updates=updates)
def test_hostile_kvsets_against_a_model(live, updates):
    server, clone, pub = live
    prefix = b"fuzz-%d-" % next(_round)
    model = {}
    for suffix, seq, uuid, prop, value in updates:
        key = suffix if suffix in (b"HUGZ", b"KTHXBAI") else prefix + suffix
        frames = encode_kvmsg(key, seq, value, uuid, prop)
        try:
            decode_kvset(frames)
        except ProtocolError:
            pass
        else:
            if value:
                model[key] = value
            else:
                model.pop(key, None)
        pub.send_multipart(frames)
    clone.set(prefix + b"end", b"1", wait=10)  # same PUB path order is not guaranteed: wait for the map
    model[prefix + b"end"] = b"1"
    wait_for(lambda: server.call("DUMP", prefix) == model, timeout=10, what="the server holds the model's map")
    assert {k: v for k, v in clone.items() if k.startswith(prefix)} == model
    assert server.alive
