"""A Clone server with real clients over tcp: updates, subtrees, ttl, snapshots, hostile input."""
import random

import gevent
import pytest
import zmq

from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.protocol import KTHXBAI, decode_kvmsg, encode_icanhaz, encode_kvmsg
from zactors.patterns.clone.server import CloneServer
from tests.conftest import wait_for
from tests.patterns.clone.conftest import client_of

pytestmark = pytest.mark.timeout(120)


def test_two_clients_share_a_map(make):
    server = make(CloneServer)
    a = make(Clone, [client_of(server)])
    b = make(Clone, [client_of(server)])
    assert a.wait_synced(5) and b.wait_synced(5)
    seq = a.set("colour", "blue", wait=5)
    assert seq == 1
    wait_for(lambda: b.get("colour") == b"blue", what="b sees a's update")
    assert "colour" in b and len(b) == 1 and b["colour"] == b"blue" and b.items() == [(b"colour", b"blue")]
    b.delete("colour", wait=5)
    wait_for(lambda: "colour" not in a, what="a sees b's delete")
    info = server.call("INFO")
    assert info["sequence"] == 2 and info["keys"] == 0 and info["state"] == "active"


def test_late_joiner_gets_snapshot_then_updates_in_order(make):
    server = make(CloneServer)
    a = make(Clone, [client_of(server)])
    a.wait_synced(5)
    for i in range(200):
        a.set("k%d" % i, "v%d" % i)
    a.set("last", "x", wait=5)
    b = make(Clone, [client_of(server)])
    seen = []
    b.on_change(lambda k, v, s: seen.append(s))
    assert b.wait_synced(5)
    for i in range(100):
        a.set("k%d" % i, "w%d" % i)
    a.set("last", "y", wait=5)
    wait_for(lambda: b.get("last") == b"y", what="b catches up")
    assert dict(b.items()) == dict(a.items())
    assert b.sequence == a.sequence == server.call("INFO")["sequence"]
    tail = [s for s in seen if s > 201]
    assert tail == sorted(tail) and len(set(tail)) == len(tail)


def test_change_iterator(make):
    server = make(CloneServer)
    a = make(Clone, [client_of(server)])
    a.wait_synced(5)
    got = []

    def watch():
        for event in a.changes(timeout=2):
            got.append(event)
            if len(got) == 3:
                return
    g = gevent.spawn(watch)
    gevent.sleep(0)
    a.set("x", "1"); a.set("y", "2"); a.delete("x")
    g.join(5)
    assert [(k, v) for k, v, _ in got] == [(b"x", b"1"), (b"y", b"2"), (b"x", b"")]


def test_subtrees(make):
    server = make(CloneServer)
    writer = make(Clone, [client_of(server)])
    writer.wait_synced(5)
    writer.set("/a/1", "one"); writer.set("/b/1", "two"); writer.set("/a/2", "three", wait=5)
    a = make(Clone, [client_of(server)], subtree="/a/")
    assert a.wait_synced(5)
    assert dict(a.items()) == {b"/a/1": b"one", b"/a/2": b"three"}
    writer.set("/b/2", "four"); writer.set("/a/3", "five", wait=5)
    wait_for(lambda: "/a/3" in a, what="subtree update")
    assert sorted(a) == [b"/a/1", b"/a/2", b"/a/3"]
    with pytest.raises(ValueError):
        make(Clone, [client_of(server)], subtree="/bad")


def test_ttl_expiry_seen_by_all_clients(make):
    server = make(CloneServer)
    a = make(Clone, [client_of(server)])
    b = make(Clone, [client_of(server)])
    a.wait_synced(5); b.wait_synced(5)
    a.set("temp", "1", ttl=0.3, wait=5)
    a.set("perm", "1", wait=5)
    wait_for(lambda: "temp" in b, what="b sees temp")
    wait_for(lambda: "temp" not in a and "temp" not in b, timeout=5, what="expiry everywhere")
    assert b.get("perm") == b"1" and server.call("INFO")["counters"]["expired"] == 1


def test_keys_lists_values_ttls_and_one_level(make):
    from zactors.actors.errors import CommandError
    server = make(CloneServer)
    writer = make(Clone, [client_of(server)])
    writer.wait_synced(5)
    writer.set("/s/lease", "held", ttl=30)
    writer.set("/s/big", b"x" * 1000)
    writer.set("/s/deep/1", "a"); writer.set("/s/deep/2", "b"); writer.set("/s/other/1", "c")
    writer.set("/s/dir/", "a key ending in the delimiter"); writer.set("/t/1", "outside", wait=5)
    assert server.call("KEYS", "/s/", 3) == [b"/s/big", b"/s/deep/1", b"/s/deep/2"]  # as before: sorted, bounded
    items = {item[0]: item[1:] for item in server.call("KEYS", "/s/", 100, 4)}
    value, size, ttl = items[b"/s/lease"]
    assert value == b"held" and size == 4 and 29 < ttl <= 30
    assert items[b"/s/big"] == [b"xxxx", 1000, None]  # a preview of the value, its whole size, no ttl
    level = server.call("KEYS", "/s/", 100, 0, "/")
    assert [k[0] for k in level["keys"]] == [b"/s/big", b"/s/dir/", b"/s/lease"]
    assert level["subtrees"] == [[b"/s/deep/", 2], [b"/s/other/", 1]] and level["truncated"] is False
    short = server.call("KEYS", "/s/", 1, None, "/")
    assert short == {"keys": [b"/s/big"], "subtrees": [[b"/s/deep/", 2]], "truncated": True}
    root = server.call("KEYS", "", 10, None, "/")
    assert root["keys"] == [] and root["subtrees"] == [[b"/s/", 6], [b"/t/", 1]]
    for bad in ((-1, None), (0, "")):
        with pytest.raises(CommandError):
            server.call("KEYS", "/s/", 10, *bad)


def test_ttl_is_relative_on_the_wire_and_replaced_by_a_later_set(make, raw):
    server = make(CloneServer)
    sub = raw(zmq.SUB, connect=server.endpoints[1])
    sub.setsockopt(zmq.SUBSCRIBE, b"t")
    a = make(Clone, [client_of(server)])
    a.wait_synced(5)
    gevent.sleep(0.2)  # a SUB's subscription is asynchronous: give it time to reach the server
    a.set("t", "1", ttl=0.2, wait=5)
    msg = decode_kvmsg(sub.recv_multipart(timeout=5))
    assert msg.props == {"ttl": "0.2"}
    a.set("t", "2", wait=5)  # no ttl any more: the earlier deadline must not delete it
    gevent.sleep(0.5)
    assert a.get("t") == b"2"


def test_big_snapshot_to_a_slow_client_loses_nothing_and_hugz_flow(make, raw):
    n = 100000
    server = make(CloneServer, hugz=0.1)
    pub = raw(zmq.PUB, connect=server.endpoints[2], sndhwm=0)
    gevent.sleep(0.2)
    for i in range(n):
        pub.send_multipart(encode_kvmsg(b"key-%06d" % i, 0, b"v" * 100))
        if i % 5000 == 0:
            gevent.sleep(0)
    wait_for(lambda: server.call("INFO")["keys"] == n, timeout=60, what="the server has every key")
    hugz = raw(zmq.SUB, connect=server.endpoints[1])
    hugz.setsockopt(zmq.SUBSCRIBE, b"HUGZ")
    snap = raw(zmq.DEALER, connect=server.endpoints[0], rcvhwm=100)
    snap.send_multipart(encode_icanhaz())
    keys, gaps, last_hugz = set(), [], None
    while True:
        frames = snap.recv_multipart(timeout=30)
        if frames[0] == KTHXBAI:
            break
        keys.add(frames[0])
        if len(keys) % 5000 == 0:
            gevent.sleep(0.02)  # a slow reader
            while hugz.ready():
                hugz.recv_multipart()
                now = gevent.get_hub().loop.now()
                if last_hugz is not None:
                    gaps.append(now - last_hugz)
                last_hugz = now
    assert len(keys) == n
    assert decode_kvmsg(frames).sequence == n
    assert gaps and max(gaps) < 1.0, "HUGZ starved during the snapshot: %s" % max(gaps)


def _load(server, raw, n, size):
    pub = raw(zmq.PUB, connect=server.endpoints[2], sndhwm=0)
    gevent.sleep(0.2)
    for i in range(n):
        pub.send_multipart(encode_kvmsg(b"k%d" % i, 0, b"x" * size))
        if i % 2000 == 0:
            gevent.sleep(0)
    wait_for(lambda: server.call("INFO")["keys"] == n, timeout=30, what="keys loaded")


def test_client_stalled_mid_snapshot_is_dropped_after_a_bounded_time(make, raw):
    server = make(CloneServer, snapshot_timeout=0.5, snapshot_hwm=100, window=100)
    _load(server, raw, 20000, 1000)
    snap = raw(zmq.DEALER, connect=server.endpoints[0], rcvhwm=10)
    snap.send_multipart(encode_icanhaz())
    snap.recv_multipart(timeout=5)  # started, then never read again
    wait_for(lambda: server.call("INFO")["clients_syncing"] == 0, timeout=10, what="the stalled snapshot dropped")
    assert server.call("INFO")["counters"].get("snapshots_abandoned") == 1


def test_client_vanishing_mid_snapshot_costs_nothing(make, raw):
    server = make(CloneServer, snapshot_hwm=100, window=100)
    _load(server, raw, 20000, 1000)
    snap = raw(zmq.DEALER, connect=server.endpoints[0], rcvhwm=10)
    snap.send_multipart(encode_icanhaz())
    snap.recv_multipart(timeout=5)
    snap.close(0)
    wait_for(lambda: server.call("INFO")["clients_syncing"] == 0, timeout=10, what="the snapshot ended")
    counters = server.call("INFO")["counters"]
    assert counters.get("unroutable", 0) >= 1 and "snapshots_sent" not in counters


def test_malformed_messages_at_a_live_server(make, raw):
    server = make(CloneServer)
    a = make(Clone, [client_of(server)])
    a.wait_synced(5)
    pub = raw(zmq.PUB, connect=server.endpoints[2], sndhwm=0)
    dealer = raw(zmq.DEALER, connect=server.endpoints[0], sndhwm=0)
    gevent.sleep(0.2)
    rnd = random.Random(7)
    bad = 0
    for i in range(10000):
        frames = [rnd.randbytes(rnd.randrange(0, 20)) for _ in range(rnd.choice((1, 2, 3, 4, 6, 7)))]
        if i % 3 == 0:  # well-formed shape, hostile contents
            frames = [b"k", b"\x00" * rnd.choice((0, 7, 9)), b"", b"", b"v"] if i % 2 else \
                [b"k", b"\x00" * 8, b"u" * 5, b"ttl=x", b"v"]
        (pub if i % 2 else dealer).send_multipart(frames)
        bad += 1
        if i % 500 == 0:
            gevent.sleep(0)
    a.set("alive", "yes", wait=10)
    counted = ("malformed", "multipart_refused")  # too many frames: dropped unread, counted apart
    wait_for(lambda: sum(server.call("INFO")["counters"].get(c, 0) for c in counted) >= bad - 10, timeout=10,
             what="every malformed message counted")
    assert server.call("INFO")["keys"] == 1 and server.alive


def test_client_never_takes_an_older_snapshot(make):
    """Failing over to a server that holds less (here: an empty one), the client keeps its map."""
    server, empty = make(CloneServer), make(CloneServer)
    a = make(Clone, [client_of(server), client_of(empty)], timeout=0.5)
    writer = make(Clone, [client_of(server)])  # so that only `server` holds the keys
    assert a.wait_synced(5) and writer.wait_synced(5)
    for i in range(5):
        writer.set("k%d" % i, "v%d" % i)
    writer.set("last", "1", wait=5)
    wait_for(lambda: len(a) == 6, what="the client holds the keys")
    held, seq = dict(a.items()), a.sequence
    server.destroy()
    wait_for(lambda: a.call("INFO")["counters"].get("stale_snapshots", 0) >= 1, timeout=10,
             what="the stale snapshot")
    assert dict(a.items()) == held and a.sequence == seq
