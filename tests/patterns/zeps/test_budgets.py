"""Budgets for what a peer can make the ZEPS broker hold: frame size, credit windows, streams.

Each broker runs in a process of its own, so that its RSS and descriptors are
measured alone.
"""
import json
import os
import resource
import sys

import gevent
import gevent.subprocess
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.zeps import protocol as p
from zactors.patterns.zeps.client import Publisher, Subscriber, query

from .conftest import Raw

pytestmark = pytest.mark.timeout(120)
pytest.importorskip("zactors.actors.journal")

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def rss(pid):
    """Resident set size of process ``pid``, bytes (Linux)."""
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for %d" % pid)


def poll(observe, timeout=30.0, step=0.05):
    """Observe another process until ``observe()`` is true (or ``timeout``); its last value."""
    value = observe()
    with gevent.Timeout(timeout, False):
        while not value:
            gevent.sleep(step)
            value = observe()
    return value


class BrokerProcess:
    def __init__(self, start, journal_dir, preexec_fn=None, **options):
        self.proc = start([sys.executable, os.path.join(HERE, "_budget_broker.py"), journal_dir,
                           json.dumps(options)], stdout=gevent.subprocess.PIPE, text=True, preexec_fn=preexec_fn)
        self.endpoint = self.proc.stdout.readline().strip()
        assert self.endpoint.startswith("tcp://"), "the broker did not start"
        self.pid = self.proc.pid

    def info(self):
        return query(self.endpoint, timeout=10.0)

    def counters(self):
        return self.info()["counters"]

    def rss(self):
        return rss(self.pid)


@pytest.fixture
def spawn(journal_dir, processes):
    def make(**options):
        return BrokerProcess(processes, journal_dir, **options)

    return make


def test_a_huge_frame_is_dropped_unread_and_counted(spawn):
    """Defect 4: a 64 MiB frame (max_message 1 MiB) took the broker's RSS up by its size; no longer."""
    broker = spawn()
    with Publisher(broker.endpoint, "s") as pub:  # warm up: the stream and its journal exist
        pub.publish(b"k", b"v")
        pub.flush()
    before = broker.rss()
    attacker = Raw(broker.endpoint)
    try:
        attacker.send(p.attach(b"s"))
        attacker.expect(p.AttachOk)
        attacker.send(p.publish(b"k", bytes(64 * MiB)))
        assert poll(lambda: broker.counters().get("disconnects", 0) >= 1), "the connection was not dropped"
    finally:
        attacker.close()
    grown = broker.rss() - before
    assert grown < 16 * MiB, "the broker grew by %.1f MiB for one refused frame" % (grown / MiB)
    with Publisher(broker.endpoint, "s") as pub:  # everyone else is served
        pub.publish(b"k", b"after")
        pub.flush()
    assert query(broker.endpoint)["streams"]["s"]["last_seq"] == 2


def never_reading(endpoint, stream, credit):
    """A subscriber that grants ``credit`` and then never reads: libzmq takes one message, TCP a little more."""
    peer = Raw.__new__(Raw)
    peer.sock = context().socket(zmq.DEALER, socket_class=Socket)
    peer.sock.linger = 0
    peer.sock.rcvhwm = 1
    peer.sock.rcvbuf = 64 << 10
    peer.sock.connect(endpoint)
    peer.send(p.attach(stream))
    peer.expect(p.AttachOk)
    peer.send(p.subscribe(b"", 0))
    peer.expect(p.SubscribeOk)
    peer.send(p.credit(credit))
    return peer


def settled(broker, what, quiet=1.0, timeout=60.0):
    """``what(info)`` once it has not changed for ``quiet`` seconds."""
    last, since = None, None
    with gevent.Timeout(timeout):
        while True:
            value = what(broker.info())
            now = gevent.get_hub().loop.now()
            if value != last:
                last, since = value, now
            elif now - since >= quiet:
                return value
            gevent.sleep(0.1)


def test_never_reading_subscribers_hold_no_more_than_the_credit_budget(spawn):
    """Defect 5: 8 subscribers granting 64 MiB and never reading held ~240 MiB; now the total budget bounds them."""
    broker = spawn(max_credit=64 * MiB, max_credit_total=16 * MiB, heartbeat=0.5, expiry=3.0)
    body = bytes(1000000)
    with Publisher(broker.endpoint, "s") as pub:
        for _ in range(48):
            pub.publish(b"k", body)
        pub.flush()
    gevent.sleep(0.5)  # the journal's tail cache: part of the baseline, not of the subscribers' share
    before = broker.rss()
    hostile = [never_reading(broker.endpoint, b"s", 64 * MiB) for _ in range(8)]
    try:
        delivered = settled(broker, lambda info: sum(s["delivered"] for s in info["streams"]["s"]["subscribers"]))
        grown = broker.rss() - before
        info = broker.info()
        assert grown < 40 * MiB, "8 never-reading subscribers took %.1f MiB (%d messages sent)" % (
            grown / MiB, delivered)
        assert info["credit"]["held"] <= 16 * MiB
        assert info["credit"]["waiting"] >= 1
        assert info["counters"]["credit_deferred"] >= 1
        reasons = []
        for peer in hostile:  # the ones kept waiting were told why (one message past what they hold)
            try:
                while True:
                    message = p.decode(peer.sock.recv_multipart(zmq.NOBLOCK)[0])
                    if type(message) is p.Invalid:
                        reasons.append(message.reason)
            except zmq.Again:
                pass
        with Publisher(broker.endpoint, "s") as pub:  # publishers are served
            pub.publish(b"k", b"after")
            pub.flush()
    finally:
        for peer in hostile:
            peer.close()
    # once their connections are gone, what they held is free again: a well-behaved subscriber gets everything
    with Subscriber(broker.endpoint, "s", from_seq=0, window=8 * MiB) as sub:
        got = [sub.get(timeout=30) for _ in range(49)]
    assert [m.seq for m in got] == list(range(1, 50)) and got[-1].body == b"after"
    assert poll(lambda: broker.info()["credit"]["gone_holding"] == 0 and broker.info()["credit"]["held"] == 0)
    assert any(reason.startswith("credit budget: ") for reason in reasons), reasons



def test_credit_granted_again_without_reading_buys_no_more_buffer(spawn):
    """A credit flood: a subscriber that re-grants credit but never reads used to get max_credit more each time."""
    broker = spawn(max_credit=4 * MiB, max_credit_total=8 * MiB)
    with Publisher(broker.endpoint, "s") as pub:
        for _ in range(48):
            pub.publish(b"k", bytes(1000000))
        pub.flush()
    gevent.sleep(0.5)  # the journal's tail cache: part of the baseline
    before = broker.rss()
    liar = never_reading(broker.endpoint, b"s", 4 * MiB)
    try:
        for _ in range(30):
            liar.send(p.credit(4 * MiB))
        delivered = settled(broker, lambda info: sum(s["delivered"] for s in info["streams"]["s"]["subscribers"]))
        assert delivered <= 4, "%d MB went to a subscriber that granted 4 MiB and read nothing" % delivered
        assert broker.rss() - before < 24 * MiB
        assert broker.info()["credit"]["held"] <= 4 * MiB
    finally:
        liar.close()



def test_peers_sitting_on_credit_cannot_keep_a_subscriber_waiting(spawn):
    """Four peers take the whole budget as credit and never use it: a new subscriber is still served."""
    broker = spawn(max_credit=8 * MiB, max_credit_total=32 * MiB, expiry=60.0)  # they stay attached
    sitters = []
    for _ in range(4):
        peer = Raw(broker.endpoint)
        peer.send(p.attach(b"s"))
        peer.expect(p.AttachOk)
        peer.send(p.subscribe(b"nothing-matches.", p.NEW))
        peer.expect(p.SubscribeOk)
        peer.send(p.credit(8 * MiB))
        sitters.append(peer)
    try:
        assert poll(lambda: broker.info()["credit"]["held"] == 32 * MiB)
        with Subscriber(broker.endpoint, "s", new=True, window=1 * MiB) as sub, \
                Publisher(broker.endpoint, "s") as pub:
            for i in range(20):
                pub.publish(b"k", b"%d" % i)
            pub.flush()
            assert [sub.get(timeout=10).body for _ in range(20)] == [b"%d" % i for i in range(20)]
        counters = broker.counters()
        assert counters["credit_deferred"] >= 1 and counters["credit_revoked"] >= 1
    finally:
        for peer in sitters:
            peer.close()


def nofile(limit):
    """preexec_fn: the child runs under ``ulimit -n limit`` (soft and hard: zactors raises soft to hard)."""
    def apply():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    return apply


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def junk_streams(endpoint, names, publish):
    """One connection ATTACHing each of ``names`` in turn (PUBLISH one message if ``publish``): the reasons refused."""
    peer = Raw(endpoint)
    refused = []
    try:
        for name in names:
            peer.send(p.attach(name))
            answer = peer.recv()
            if type(answer) is p.Invalid:
                refused.append(answer.reason)
                continue
            assert type(answer) is p.AttachOk, answer
            if publish:
                peer.send(p.publish(b"k", b"junk"))
            peer.send(p.encode(p.Detach()))
            peer.expect(p.DetachOk)
    finally:
        peer.close()
    return refused


def test_a_stream_flood_under_ulimit_1024_is_refused_and_a_good_client_is_served(spawn):
    """Defect 6: any peer created streams for good; at 3 fds a stream, ulimit -n 1024 ran out after 336."""
    broker = spawn(preexec_fn=nofile(1024), streams=["good"], heartbeat=0.5, expiry=5.0)
    budget = broker.info()["stream_budget"]
    assert budget["max_open"] == 1024 // 2 // 4
    pub = Publisher(broker.endpoint, "good")
    sub = Subscriber(broker.endpoint, "good", from_seq=0)
    refused = []
    try:
        for c in range(0, 80, 4):  # four junk peers at once: new streams faster than 128 a second, loaded or not
            floods = [gevent.spawn(junk_streams, broker.endpoint, [b"junk-%d-%d" % (c + j, i) for i in range(17)],
                                   publish=True) for j in range(4)]
            for flood in floods:
                refused += flood.get(timeout=60)
            pub.publish(b"k", b"%d" % c)
            pub.flush()  # the good client is served all along
            assert sub.get(timeout=10).body == b"%d" % c
            assert open_fds(broker.pid) < 900
        info = broker.info()
        assert info["stream_budget"]["open"] <= budget["max_open"]
        assert info["counters"]["streams_refused"] == len(refused) >= 80
        assert any(r.startswith("stream quota: this peer created 16 streams (at most 16)") for r in refused)
        assert any(r.startswith("too many open streams (128)") for r in refused)
        reasons = ("stream quota", "too many streams", "too many open streams", "busy: ")
        assert all(r.startswith(reasons) for r in refused)
        with Publisher(broker.endpoint, "good") as late:  # and a newcomer is served too
            late.publish(b"k", b"late")
            late.flush()
        assert sub.get(timeout=10).body == b"late"
    finally:
        pub.close()
        sub.destroy()


def test_junk_names_do_not_outlive_their_peers_nor_a_restart(journal_dir, spawn, processes):
    broker = spawn(streams=["good"], stream_idle=1.0)
    refused = []
    for c in range(20):
        refused += junk_streams(broker.endpoint, [b"junk-%d-%d" % (c, i) for i in range(16)], publish=False)
    assert refused == []
    assert poll(lambda: (broker.info()["stream_budget"]["open"], broker.info()["stream_budget"]["closing"]) == (1, 0))
    # (closed when idle, and deleted: empty)
    assert broker.info()["stream_budget"]["closed"] == 0
    assert sorted(os.listdir(journal_dir)) == ["good"]
    # and at start: an empty stream left behind (the broker was killed first) is not kept
    names = [b"junk-left-%d" % i for i in range(10)]
    assert junk_streams(broker.endpoint, names, publish=False) == []
    broker.proc.kill()
    broker.proc.wait()
    again = BrokerProcess(processes, journal_dir, streams=["good"])
    assert again.info()["stream_budget"] == dict(again.info()["stream_budget"], open=1, closed=0)
    assert sorted(os.listdir(journal_dir)) == ["good"]


def test_an_idle_stream_closes_its_files_and_opens_again_on_attach(spawn):
    broker = spawn(stream_idle=0.5)
    with Publisher(broker.endpoint, "kept") as pub:
        pub.publish(b"k", b"v1")
        pub.flush()
        open_with_stream = open_fds(broker.pid)
    assert poll(lambda: (broker.info()["stream_budget"]["closed"], broker.info()["stream_budget"]["closing"]) == (1, 0))
    assert open_fds(broker.pid) < open_with_stream  # its journal's descriptors released
    shown = broker.info()["streams"]["kept"]
    assert (shown["open"], shown["last_seq"], shown["peers"]) == (False, 1, 0)
    with Subscriber(broker.endpoint, "kept", from_seq=0) as sub:
        assert sub.get(timeout=10).body == b"v1"
        assert broker.info()["streams"]["kept"]["open"] is True
    assert broker.info()["counters"]["streams_closed"] >= 1


def test_a_connection_flood_under_ulimit_1024_is_refused_and_a_good_client_is_served(spawn):
    """Issue 20: 1,000 connections under ``ulimit -n 1024`` took every descriptor: the journal's next fsync
    could not dup its file (EMFILE) and the broker died.  Connections past half the fds are shut at once."""
    broker = spawn(preexec_fn=nofile(1024), streams=["good"], heartbeat=0.5, expiry=5.0)
    pub = Publisher(broker.endpoint, "good")
    sub = Subscriber(broker.endpoint, "good", from_seq=0)
    flood = []
    try:
        for i in range(1500):
            sock = context().socket(zmq.DEALER, socket_class=Socket)
            sock.linger = 0
            sock.connect(broker.endpoint)
            sock.send(p.attach(b"good"))
            sock.send(p.subscribe(b"", 0))
            flood.append(sock)
            if i % 100 == 99:
                pub.publish(b"k", b"%d" % i)
                pub.flush(timeout=20)                    # the good client is served all along
                assert sub.get(timeout=20).body == b"%d" % i
                assert open_fds(broker.pid) < 1000
        for sock in flood:        # (a QUERY needs a connection too: asked once they are gone)
            sock.close(0)
        flood = []
        info = poll(lambda: (lambda i: i if i["peers"] <= 2 else None)(broker.info()))
        # past half the 1024 fds: about 1,000 of the 1,500 (how many exactly depends on when each was accepted)
        assert info["counters"].get("connections_refused", 0) >= 500, info["counters"]
        with Publisher(broker.endpoint, "good") as late:   # and a newcomer is served once they are gone
            late.publish(b"k", b"late")
            late.flush(timeout=20)
        assert sub.get(timeout=20).body == b"late"
        assert broker.proc.poll() is None
    finally:
        for sock in flood:
            sock.close(0)
        pub.close()
        sub.destroy()


def test_the_stream_quota_of_a_peer_without_curve_holds_by_its_routing_id(broker):
    """Issue 20, part 2 item 3 (a pin: no defect found): without CURVE a peer's stream quota is keyed by its
    routing id and holds across DETACH/ATTACH; another routing id has its own.  The peers tracked for the
    quota are those with streams alive (at most ``max_streams``)."""
    def peer(identity):
        raw = Raw.__new__(Raw)
        raw.sock = context().socket(zmq.DEALER, socket_class=Socket)
        raw.sock.linger = 0
        raw.sock.identity = identity
        raw.sock.connect(broker.endpoint)
        return raw

    def create(raw, name):
        raw.send(p.attach(name))
        answer = raw.recv()
        if type(answer) is p.AttachOk:
            raw.send(p.publish(b"k", b"v"))          # a stream that held a message stays (and counts)
            raw.send(p.encode(p.Detach()))
            raw.expect(p.DetachOk)
            return None
        return answer.reason

    first, other = peer(b"fixed-id"), peer(b"other-id")
    try:
        assert [create(first, b"q-%d" % i) for i in range(16)] == [None] * 16
        assert create(first, b"q-16").startswith("stream quota: this peer created 16 streams")
        assert create(first, b"q-17").startswith("stream quota")
        assert create(other, b"o-0") is None
    finally:
        first.close()
        other.close()
