"""CURVE with per-stream permissions: unauthorised publish and subscribe are refused."""
import pytest

from zactors.actors.auth import Authenticator, create_keypair, generate_keypair, load_keypair
from zactors.patterns.zeps import Publisher, Subscriber, ZepsError
from zactors.patterns.zeps.permissions import Permissions, PermissionsError

from ...conftest import wait_for

pytestmark = pytest.mark.timeout(60)


def test_permissions_file(tmp_path):
    create_keypair(str(tmp_path), "alice")
    alice = load_keypair(str(tmp_path / "alice.key")).public.decode()
    bob = "a#b" + generate_keypair().public.decode()[3:]  # z85 keys may hold '#'; comments follow a space
    path = tmp_path / "perms"
    path.write_text("# comment\n"
                    "alice.key  publish            orders.*   # trailing comment\n"
                    "%s  publish,subscribe  *\n"
                    "*          subscribe          public.*\n" % bob)
    perms = Permissions.load(str(path))
    assert perms.allows(alice, "publish", b"orders.eu")
    assert not perms.allows(alice, "subscribe", b"orders.eu")
    assert not perms.allows(alice, "publish", b"other")
    assert perms.allows(alice, "subscribe", b"public.news")
    assert not perms.allows(None, "subscribe", b"public.news")  # '*' is any authenticated key
    assert perms.allows(bob, "subscribe", b"anything")
    assert perms.may_attach(alice, b"orders.x") and not perms.may_attach(alice, b"secret")
    for bad, reason in (("a b\n", "expected KEY ACTIONS STREAMS"), ("* read s\n", "subscribe and/or create"),
                        ("nokey publish s\n", "neither a z85 key")):
        path.write_text(bad)
        with pytest.raises(PermissionsError, match=reason):
            Permissions.load(str(path))


def test_unauthorised_publish_and_subscribe_are_refused(journal_dir):
    from zactors.patterns.zeps.broker import Broker
    server, alice, bob, carol = (generate_keypair() for _ in range(4))
    perms = Permissions([(alice.public, "publish,create", "orders.*"), (bob.public, "subscribe", "orders.*")])
    auth = Authenticator(curve="*")
    broker = Broker(journal_dir, curve=server, permissions=perms)
    made = []
    try:
        def curve(keys):
            return (server.public, keys)

        with pytest.raises(ZepsError, match="may not use stream"):
            Publisher(broker.endpoint, "orders.eu", curve=curve(carol))
        with pytest.raises(ZepsError, match="not allowed to subscribe"):
            Subscriber(broker.endpoint, "orders.eu", curve=curve(alice))
        pub = Publisher(broker.endpoint, "orders.eu", curve=curve(alice))
        made.append(pub)
        sub = Subscriber(broker.endpoint, "orders.eu", curve=curve(bob))
        made.append(sub)
        sneaky = Publisher(broker.endpoint, "orders.eu", curve=curve(bob))  # may attach (it may subscribe)
        made.append(sneaky)
        sneaky.publish(b"k", b"forged")
        with pytest.raises(ZepsError, match="not allowed to publish"):
            sneaky.flush()
        for i in range(100):
            pub.publish(b"k", b"%d" % i)
        pub.flush()
        got = [sub.get(10) for _ in range(100)]
        assert [m.body for m in got] == [b"%d" % i for i in range(100)]
        assert sub.get(timeout=0.1) is None  # the forged message never went in
        wait_for(lambda: broker.call("$STATS").get("refused", 0) >= 3, what="3 refusals counted")
        assert broker.call("INFO")["streams"]["orders.eu"]["last_seq"] == 100
        with pytest.raises(ZepsError):  # no CURVE at all: the handshake never completes
            Publisher(broker.endpoint, "orders.eu", timeout=0.5)
    finally:
        for thing in made:
            (thing.close if isinstance(thing, Publisher) else thing.destroy)()
        broker.destroy()
        auth.destroy()


def test_permissions_need_curve(journal_dir):
    from zactors.patterns.zeps.broker import Broker
    with pytest.raises(ValueError, match="need CURVE"):
        Broker(journal_dir, permissions=Permissions())


def test_a_new_stream_needs_the_create_permission(journal_dir):
    """Defect 6: with permissions, ATTACH created any stream the key could use; now only with ``create``."""
    from zactors.patterns.zeps.broker import Broker
    server, alice, bob = (generate_keypair() for _ in range(3))
    perms = Permissions([(alice.public, "publish", "s.*"), (bob.public, "publish,create", "s.*")])
    auth = Authenticator(curve="*")
    broker = Broker(journal_dir, curve=server, permissions=perms, streams=["s.old"])
    made = []
    try:
        made.append(Publisher(broker.endpoint, "s.old", curve=(server.public, alice)))  # it exists: used
        with pytest.raises(ZepsError, match="may not create stream s.new"):
            Publisher(broker.endpoint, "s.new", curve=(server.public, alice))
        assert "s.new" not in broker.call("INFO")["streams"]
        made.append(Publisher(broker.endpoint, "s.new", curve=(server.public, bob)))
        assert "s.new" in broker.call("INFO")["streams"]
        assert broker.call("$STATS")["refused"] == 1
    finally:
        for thing in made:
            thing.close()
        broker.destroy()
        auth.destroy()
