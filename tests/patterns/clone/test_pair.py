"""A Binary Star pair in one process: the backup follows, takes over, re-syncs, and settles a split brain."""
import gevent
import pytest
import zmq

from zactors.actors.sockets import Socket, context
from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.server import CloneServer
from tests.conftest import wait_for
from tests.patterns.clone.conftest import client_of, pair, rebind

pytestmark = pytest.mark.timeout(120)


def _settled(primary, backup):
    wait_for(lambda: primary.call("INFO")["state"] == "active" and backup.call("INFO")["state"] == "passive"
             and not backup.call("INFO")["syncing"], timeout=10, what="the pair settles")


def test_backup_follows_and_takes_over_with_pending_updates(make):
    primary, backup = pair(make)
    _settled(primary, backup)
    servers = [client_of(primary), client_of(backup)]
    a = make(Clone, servers, name="a")
    b = make(Clone, servers, name="b")
    assert a.wait_synced(10) and b.wait_synced(10)
    for i in range(300):
        a.set("k%d" % i, "v%d" % i)
        a.set("same", str(i))  # the backup must not replay these on takeover
    a.set("k-last", "1", ttl=60, wait=10)
    wait_for(lambda: backup.call("INFO")["sequence"] == primary.call("INFO")["sequence"], what="backup caught up")
    assert backup.call("DUMP") == primary.call("DUMP")
    assert backup.call("INFO")["counters"].get("expired", 0) == 0
    primary.destroy()
    b.set("after", "x")  # held as pending by the backup, then applied on takeover
    wait_for(lambda: a.get("after") == b"x" and b.get("after") == b"x", timeout=5, what="failover")
    info = backup.call("INFO")
    assert info["state"] == "active" and info["counters"]["takeovers"] == 1
    assert dict(a.items()) == dict(b.items()) == backup.call("DUMP") and len(a) == 303
    assert a.get("same") == b"299" and info["sequence"] == 602


def test_passive_never_expires_keys(make):
    primary, backup = pair(make)
    _settled(primary, backup)
    a = make(Clone, [client_of(primary), client_of(backup)])
    a.wait_synced(10)
    a.set("short", "1", ttl=0.3, wait=5)
    a.set("long", "1", ttl=60, wait=5)
    wait_for(lambda: "short" not in a, timeout=5, what="expiry")
    wait_for(lambda: backup.call("GET", b"short") is None, what="backup follows the delete")
    assert backup.call("INFO")["counters"].get("expired", 0) == 0
    assert primary.call("INFO")["counters"]["expired"] == 1
    assert backup.call("GET", b"long") == b"1"


def test_backup_restarted_mid_stream_resyncs(make):
    primary, backup = pair(make)
    _settled(primary, backup)
    a = make(Clone, [client_of(primary), client_of(backup)])
    a.wait_synced(10)
    endpoints = list(backup.endpoints)
    writer = gevent.spawn(lambda: [a.set("k%d" % (i % 500), str(i)) or gevent.sleep(0.001) for i in range(3000)])
    gevent.sleep(0.5)
    backup.destroy()
    backup = rebind(make, CloneServer, role="backup", name="backup2", snapshot=endpoints[0], publisher=endpoints[1],
                  collector=endpoints[2], state=endpoints[3], peer=primary.endpoints)
    writer.join(60)
    a.set("done", "1", wait=10)
    wait_for(lambda: backup.call("INFO")["sequence"] == primary.call("INFO")["sequence"], timeout=20,
             what="the restarted backup caught up")
    assert backup.call("DUMP") == primary.call("DUMP") == dict(a.items())
    assert backup.call("INFO")["counters"]["synced"] >= 1


class StateLink:
    """A real XSUB->XPUB forwarder between a server's PUB (state or updates) and its peer, that can be
    cut, or lose the messages ``drop(frames)`` picks."""

    def __init__(self, upstream):
        ctx = context()
        self.xsub = ctx.socket(zmq.XSUB, socket_class=Socket)
        self.xpub = ctx.socket(zmq.XPUB, socket_class=Socket)
        for s in (self.xsub, self.xpub):
            s.linger = 0
        self.xsub.connect(upstream)
        self.xpub.bind("tcp://127.0.0.1:*")
        self.endpoint = self.xpub.last_endpoint.decode()
        self.cut = False
        self.drop = None
        self.greenlets = [gevent.spawn(self._pump, self.xsub, self.xpub, True),
                          gevent.spawn(self._pump, self.xpub, self.xsub, False)]

    def _pump(self, source, sink, data):
        while True:
            frames = source.recv_multipart()
            if not (data and (self.cut or (self.drop is not None and self.drop(frames)))):
                sink.send_multipart(frames)

    def close(self):
        gevent.killall(self.greenlets)
        self.xsub.close(0)
        self.xpub.close(0)


def test_split_brain_probe(make):
    primary = make(CloneServer, role="primary", name="primary")
    backup = make(CloneServer, role="backup", name="backup")
    to_backup, to_primary = StateLink(primary.endpoints[3]), StateLink(backup.endpoints[3])
    try:
        backup.call("PEER", primary.endpoints[0], primary.endpoints[1], to_backup.endpoint)
        primary.call("PEER", backup.endpoints[0], backup.endpoints[1], to_primary.endpoint)
        _settled(primary, backup)
        a = make(Clone, [client_of(primary), client_of(backup)], name="a")
        a.wait_synced(10)
        a.set("before", "1", wait=5)
        to_backup.cut = to_primary.cut = True
        wait_for(lambda: backup.call("INFO")["peer_silent"], what="the backup hears nothing from the primary")
        # A client that reaches only the backup votes it active: both servers are now active.
        b = make(Clone, [client_of(backup), client_of(primary)], name="b")
        assert b.wait_synced(10)
        assert backup.call("INFO")["state"] == primary.call("INFO")["state"] == "active"
        a.set("on-primary", "1", wait=5)
        b.set("on-backup", "1", wait=5)
        to_backup.cut = to_primary.cut = False
        wait_for(lambda: backup.call("INFO")["state"] == "passive" and not backup.call("INFO")["syncing"],
                 timeout=10, what="the backup yields")
        assert primary.call("INFO")["state"] == "active"
        assert backup.call("INFO")["counters"]["yielded"] == 1
        wait_for(lambda: b.server == client_of(primary)[0] and b.get("on-primary") == b"1", timeout=10,
                 what="b moves to the primary")
        a.set("after", "1", wait=5)
        wait_for(lambda: backup.call("DUMP") == primary.call("DUMP") == dict(a.items()) == dict(b.items()),
                 timeout=10, what="one map everywhere")
    finally:
        to_backup.close()
        to_primary.close()


def test_stale_pending_update_never_reverts_a_value(make):
    """The backup's feed misses k=v1; v2 follows (a gap: re-sync shows v2); a takeover must not bring v1 back."""
    primary = make(CloneServer, role="primary", name="primary")
    feed = StateLink(primary.endpoints[1])
    try:
        backup = make(CloneServer, role="backup", name="backup",
                      peer=(primary.endpoints[0], feed.endpoint, primary.endpoints[2], primary.endpoints[3]))
        primary.call("PEER", backup.endpoints[0], backup.endpoints[1], backup.endpoints[3])
        _settled(primary, backup)
        a = make(Clone, [client_of(primary), client_of(backup)], name="a")
        assert a.wait_synced(10)
        a.set("warm", "1", wait=5)
        wait_for(lambda: backup.call("GET", b"warm") == b"1", what="the backup follows")
        feed.drop = lambda frames: frames[0] == b"k" and frames[4] == b"v1"
        a.set("k", "v1", wait=5)
        wait_for(lambda: backup.call("INFO")["pending"] == 1, what="v1 pending on the backup")
        feed.drop = None
        a.set("k", "v2", wait=5)  # the backup sees a gap and re-syncs: the synced map has k=v2
        wait_for(lambda: backup.call("INFO")["counters"].get("synced", 0) >= 2 and not backup.call("INFO")["syncing"]
                 and backup.call("GET", b"k") == b"v2", timeout=10, what="the backup re-syncs")
        assert backup.call("INFO")["pending"] == 0
        primary.destroy()
        wait_for(lambda: backup.call("INFO")["state"] == "active" and a.server == client_of(backup)[0]
                 and a.call("INFO")["synced"], timeout=10, what="the backup takes over")
        a.set("after", "1", wait=5)
        assert backup.call("GET", b"k") == b"v2" and a.get("k") == b"v2"
    finally:
        feed.close()
