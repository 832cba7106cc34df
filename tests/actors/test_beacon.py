"""Beacon: UDP broadcast/listen, only ever inside namespaces these tests create."""
import gevent
import pytest

from zactors.actors import Actor
from zactors.actors.beacon import Beacon, BeaconError, choose_interface
from tests.conftest import wait_for
from tests.netns import lab  # noqa: F401  (fixture)

PORT = 5670  # private namespaces: no one else is there

pytestmark = [pytest.mark.netns, pytest.mark.timeout(60)]


def beacon_in(ns, **kwargs):
    kwargs.setdefault("port", PORT)
    kwargs.setdefault("interval", 0.05)
    with ns.entered():
        return Beacon(**kwargs)


@pytest.fixture
def beacons():
    """``make(ns, **kwargs)``: a beacon in ``ns``, destroyed after the test."""
    made = []

    def make(ns, **kwargs):
        made.append(beacon_in(ns, **kwargs))
        return made[-1]

    yield make
    for beacon in made:
        beacon.destroy()


def stats(beacon):
    return beacon.call("$STATS", timeout=5)


def next_beacon(beacon, timeout=5.0):
    with gevent.Timeout(timeout, False):
        while True:
            event = beacon.recv_event(timeout)
            if event is not None and event.name == "BEACON":
                return tuple(event.args)
    pytest.fail("no beacon within %ss" % timeout)


def test_unknown_interface_is_a_clear_error():
    with pytest.raises(BeaconError, match="no IPv4 interface named or addressed 'nope0'"):
        choose_interface("nope0")
    with pytest.raises(BeaconError, match="cannot broadcast"):
        choose_interface("lo")


def test_no_broadcast_capable_interface(lab):
    lonely = lab.namespace()  # loopback only
    with pytest.raises(BeaconError, match="no broadcast-capable IPv4 interface"):
        beacon_in(lonely)


def test_interface_by_name_and_by_address(lab):
    a, _ = lab.pair()
    for spec in ("zv0", a.address):
        beacon = beacon_in(a, interface=spec)
        try:
            assert beacon.call("INFO", timeout=5) == {
                "interface": "zv0", "address": a.address, "broadcast": "192.0.2.255", "port": PORT}
        finally:
            beacon.destroy()


def test_hears_the_other_side_and_never_itself(lab, beacons):
    a, b = lab.pair()
    ba, bb = beacons(a), beacons(b)
    ba.send("SUBSCRIBE", b"")
    assert ba.call("PUBLISH", b"beacon-A", timeout=5) is True
    assert bb.call("PUBLISH", b"beacon-B", timeout=5) is True
    for _ in range(5):
        assert next_beacon(ba) == (b.address, b"beacon-B")
    # A's own broadcasts did come back to it, and were dropped.
    wait_for(lambda: stats(ba).get("own", 0) >= 3, 10, "A to see (and drop) its own beacons")
    assert stats(ba).get("received") >= 5


def test_prefix_filter(lab, beacons):
    a, b = lab.pair()
    ba, bb = beacons(a), beacons(b)
    ba.send("SUBSCRIBE", b"ZRE")
    bb.call("PUBLISH", b"XRE-other", timeout=5)
    wait_for(lambda: stats(ba).get("filtered", 0) >= 3, 10, "filtered beacons")
    assert ba.recv_event(0) is None
    bb.call("PUBLISH", b"ZRE-wanted", timeout=5)
    assert next_beacon(ba) == (b.address, b"ZRE-wanted")
    ba.send("UNSUBSCRIBE")
    seen = stats(ba).get("received")
    wait_for(lambda: stats(bb).get("sent", 0) >= 10, 10, "more beacons sent")
    assert stats(ba).get("received") == seen


def test_send_errors_are_survived(lab, beacons):
    a, b = lab.pair()
    ba, bb = beacons(a), beacons(b)
    bb.send("SUBSCRIBE", b"")
    ba.call("PUBLISH", b"beacon-A", timeout=5)
    assert next_beacon(bb) == (a.address, b"beacon-A")
    a.link(up=False)  # no route: every broadcast fails
    wait_for(lambda: stats(ba).get("send_errors", 0) >= 3, 10, "failed sends to be counted")
    assert ba.alive
    a.link(up=True)
    while bb.recv_event(0) is not None:
        pass
    assert next_beacon(bb, timeout=10) == (a.address, b"beacon-A")
    assert ba.alive and stats(ba).get("sent", 0) >= 2


def test_bad_payload_is_refused_not_fatal(lab, beacons):
    a, _ = lab.pair()
    ba = beacons(a)
    with pytest.raises(Exception, match="payload must be"):
        ba.call("PUBLISH", b"x" * 300, timeout=5)
    assert ba.alive


def test_beacon_keeps_the_kernels_subscribe_and_drops_when_unread():
    # its SUBSCRIBE command must not hide Actor.subscribe (event fan-out)
    assert Beacon.subscribe is Actor.subscribe
    assert Beacon.events_policy == "drop"
