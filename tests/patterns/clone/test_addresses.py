"""Clone addresses that work: port 0 binds free ports, and the snapshot endpoint is all a client needs."""
import socket

import gevent
import pytest
import zmq

from zactors.apps.cli import main
from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.protocol import KTHXBAI, decode_kvmsg, encode_icanhaz
from zactors.patterns.clone.server import CloneServer
from tests.conftest import wait_for
from tests.apps.dashboard.helpers import start

pytestmark = pytest.mark.timeout(60)


def _port(endpoint):
    return int(endpoint.rpartition(":")[2])


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_port_0_binds_three_free_ports(make):
    server = make(CloneServer, 0)
    ports = [_port(e) for e in server.endpoints[:3]]
    assert len(set(ports)) == 3 and min(ports) > 1024, server.endpoints  # not 0, 1 and 2


def test_the_snapshot_reply_advertises_the_other_endpoints(make, raw):
    from zactors.patterns.clone.protocol import advertised
    server = make(CloneServer, 0)
    dealer = raw(zmq.DEALER, connect=server.endpoints[0])
    dealer.send_multipart(encode_icanhaz(b"/nothing/"))
    with gevent.Timeout(5):
        frames = dealer.recv_multipart()
    msg = decode_kvmsg(frames)
    assert msg.key == KTHXBAI and msg.value == b"/nothing/"              # the spec's frames, as before
    assert advertised(msg.properties) == tuple(server.endpoints[1:3])


def test_one_endpoint_is_enough(make):
    server = make(CloneServer, 0)
    a = make(Clone, server.endpoints[0])
    b = make(Clone, [server.endpoints[0]], subtree="/app/")
    assert a.wait_synced(5) and b.wait_synced(5)
    assert a.set("/app/x", "1", wait=5) == 1 and b.set("/app/y", "2", wait=5) == 2
    wait_for(lambda: a.get("/app/y") == b"2" and b.get("/app/x") == b"1", what="both see both updates")
    assert a.call("INFO")["endpoints"] == list(server.endpoints[:3])


def test_the_server_names_its_endpoint_as_the_brokers_do(make):
    # a newcomer wrote Clone(server.endpoint), as for Majordomo and ZEPS brokers: AttributeError before
    server = make(CloneServer, 0)
    assert server.endpoint == server.endpoints[0] and _port(server.endpoint) > 0
    clone = make(Clone, server.endpoint)
    assert clone.wait_synced(5) and clone.set("/k", "v", wait=5) == 1


def test_synced_means_the_client_can_publish(make):
    server = make(CloneServer, 0)
    nowhere = "tcp://127.0.0.1:%d" % _free_port()  # nobody collects there
    lost = make(Clone, [(server.endpoints[0], server.endpoints[1], nowhere)])
    assert not lost.wait_synced(1.5)                # the snapshot came, but an update would go nowhere
    assert lost.call("INFO")["counters"].get("snapshots") == 1 and not lost.call("INFO")["synced"]
    good = make(Clone, [tuple(server.endpoints[:3])])
    assert good.wait_synced(5) and good.call("INFO")["synced"]


def test_advertised_wildcards_and_the_spec_fallback():
    from zactors.patterns.clone.client import _reachable, _spec_ports
    from zactors.patterns.clone.protocol import advertised
    assert _reachable("tcp://0.0.0.0:7001", "tcp://box.example:7000") == "tcp://box.example:7001"
    assert _reachable("tcp://[::]:7001", "tcp://10.1.2.3:7000") == "tcp://10.1.2.3:7001"
    assert _reachable("tcp://10.0.0.9:7001", "tcp://box.example:7000") == "tcp://10.0.0.9:7001"
    assert _reachable("ipc:///tmp/x", "tcp://box.example:7000") == "ipc:///tmp/x"
    assert _spec_ports("tcp://h:5556") == ("tcp://h:5557", "tcp://h:5558")   # a server that advertises nothing
    assert _spec_ports("tcp://h:65535") is None and _spec_ports("ipc:///tmp/s") is None
    assert advertised(b"") is None and advertised(b"publisher=x\n") is None


def test_cli_reaches_a_node_on_clone_port_0(tmp_path, capsys):
    node = start(tmp_path, harmony={"enabled": False}, dashboard={"enabled": False})
    try:
        snapshot = node.clone.endpoints[0]
        at = ["--connect", snapshot, "--timeout", "5"]
        assert main(["-q", "clone", "set", "/app/a", "1", *at]) == 0
        capsys.readouterr()
        assert main(["-q", "clone", "get", "/app/a", *at]) == 0
        assert capsys.readouterr().out == "1\n"
    finally:
        node.stop()



def test_a_server_that_advertises_nothing_is_reached_on_the_spec_ports(make, raw):
    """A spec-only server (P, P+1, P+2; a KTHXBAI without properties): one endpoint still works."""
    from tests.patterns.clone.conftest import free_base_port
    from zactors.patterns.clone.protocol import decode_icanhaz, encode_kthxbai, encode_kvmsg

    base = free_base_port()
    snapshot, publisher, collector = raw(zmq.ROUTER), raw(zmq.PUB), raw(zmq.SUB)
    collector.setsockopt(zmq.SUBSCRIBE, b"")
    for i, sock in enumerate((snapshot, publisher, collector)):
        sock.bind("tcp://127.0.0.1:%d" % (base + i))
    got = []

    def answer():
        while True:
            identity, *request = snapshot.recv_multipart()
            subtree = decode_icanhaz(request)
            if not subtree:
                snapshot.send_multipart([identity, *encode_kvmsg(b"k", 1, b"v")])
            snapshot.send_multipart([identity, *encode_kthxbai(1, subtree)])

    def collect():
        while True:
            got.append(collector.recv_multipart())

    def hugz():
        while True:
            publisher.send_multipart([b"HUGZ", bytes(8), b"", b"", b""])
            gevent.sleep(0.05)  # the server's HUGZ interval, not a wait for anything

    server = [gevent.spawn(answer), gevent.spawn(collect), gevent.spawn(hugz)]
    try:
        a = make(Clone, "tcp://127.0.0.1:%d" % base)
        assert a.wait_synced(5) and a.get("k") == b"v"
        assert a.call("INFO")["endpoints"][1:] == ["tcp://127.0.0.1:%d" % (base + 1), "tcp://127.0.0.1:%d" % (base + 2)]
        a.set("x", "1")
        wait_for(lambda: any(frames[0] == b"x" for frames in got), what="the update at the spec's collector")
    finally:
        gevent.killall(server)


def test_an_endpoint_for_the_port_is_refused_in_words():
    # CloneServer("tcp://127.0.0.1:*"), as the brokers are made, said "can only concatenate str (not "int") to str"
    with pytest.raises(TypeError, match=r"CloneServer\(port\): the base port is a number \(0 for free ports\), "
                                        r"not 'tcp://127.0.0.1:\*'; give endpoints as snapshot="):
        CloneServer("tcp://127.0.0.1:*")
