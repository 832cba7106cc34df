"""CURVE with per-stream permissions: unauthorised publish and subscribe are refused."""
import pytest

from zactors.actors.auth import Authenticator, create_keypair, generate_keypair, load_keypair
from zactors.patterns.zeps import HandshakeFailed, Publisher, Subscriber, ZepsError
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
        pub = Publisher(broker.endpoint, "orders.eu", curve=curve(alice))
        made.append(pub)
        with pytest.raises(ZepsError, match="not allowed to subscribe"):
            Subscriber(broker.endpoint, "orders.eu", curve=curve(alice))
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
        with pytest.raises(HandshakeFailed, match="it uses CURVE"):  # no CURVE at all: said at once
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


def test_query_shows_a_key_only_the_streams_it_may_use(journal_dir):
    """Issue 20, defect 7: a key allowed public.* saw secret.* streams, their subscribers' patterns, the journal."""
    from zactors.patterns.zeps import query
    from zactors.patterns.zeps.broker import Broker
    server, public, admin = (generate_keypair() for _ in range(3))
    perms = Permissions([(public.public, "publish,subscribe", "public.*"),
                         (admin.public, "publish,subscribe", "*")])
    auth = Authenticator(curve="*")
    broker = Broker(journal_dir, curve=server, permissions=perms, streams=["public.news", "secret.plans"])
    made = []
    try:
        secret_sub = Subscriber(broker.endpoint, "secret.plans", b"re:launch-codes", curve=(server.public, admin))
        made.append(secret_sub)
        public_sub = Subscriber(broker.endpoint, "public.news", b"sport", curve=(server.public, public))
        made.append(public_sub)
        wait_for(lambda: all(broker.call("INFO")["streams"][s]["subscribers"] for s in ("public.news", "secret.plans")),
                 what="both subscribers in INFO")
        seen = query(broker.endpoint, curve=(server.public, public))
        assert list(seen["streams"]) == ["public.news"]
        assert seen["streams"]["public.news"]["subscribers"][0]["patterns"] == ["sport"]
        assert "journal" not in seen
        text = str(seen)
        assert "secret" not in text and "launch-codes" not in text and journal_dir not in text
        everything = query(broker.endpoint, curve=(server.public, admin))
        assert sorted(everything["streams"]) == ["public.news", "secret.plans"]
        assert everything["streams"]["secret.plans"]["subscribers"][0]["patterns"] == ["re:launch-codes"]
        local = broker.call("INFO")          # the owner, in process: everything
        assert local["journal"] == broker.journal_dir and len(local["streams"]) == 2
    finally:
        for thing in made:
            thing.destroy()
        broker.destroy()
        auth.destroy()


def test_refusals_are_counted_logged_once_and_say_they_are_refusals(journal_dir, caplog):
    """Issue 20: each refused PUBLISH logged an INFO line (10,000 forged, 10,000 lines), and a subscriber refused
    by the permissions was told "SUBSCRIBE before ATTACH"."""
    import logging

    from zactors.patterns.zeps import protocol as p
    from zactors.patterns.zeps.broker import Broker
    from zactors.patterns.zeps.client import _dealer
    server, alice, bob = (generate_keypair() for _ in range(3))
    perms = Permissions([(alice.public, "publish", "orders.*"), (bob.public, "subscribe", "orders.*")])
    auth = Authenticator(curve="*")
    broker = Broker(journal_dir, curve=server, permissions=perms, streams=["orders.eu"])  # nobody may create
    forger = None
    try:
        with pytest.raises(ZepsError, match="refused by the broker's permissions: this key may not use stream secret"):
            Subscriber(broker.endpoint, "secret", curve=(server.public, alice))
        with pytest.raises(ZepsError, match="refused by the broker's permissions: .* not allowed to subscribe"):
            Subscriber(broker.endpoint, "orders.eu", curve=(server.public, alice))
        caplog.clear()
        caplog.set_level(logging.INFO, logger="zactors.patterns.zeps.broker")
        forger = _dealer(broker.endpoint, (server.public, bob), 4096)   # may subscribe, not publish
        forger.send(p.attach(b"orders.eu"))
        assert forger.wait(1, 5)
        assert type(p.decode(forger.recv_frames()[0])) is p.AttachOk
        for i in range(10000):
            forger.send(p.publish(b"k", b"forged %d" % i))
        wait_for(lambda: broker.call("$STATS").get("refused_publish", 0) == 10000, timeout=30,
                 what="10,000 refused publishes counted")
        counters = broker.call("INFO")["counters"]
        assert counters["refused_attach"] == 1 and counters["refused_subscribe"] == 1
        lines = [r for r in caplog.records if "refused" in r.getMessage()]
        assert len(lines) <= 1, [r.getMessage() for r in lines[:3]]
        assert broker.call("INFO")["streams"]["orders.eu"]["last_seq"] == 0
    finally:
        if forger is not None:
            forger.close(0)
        broker.destroy()
        auth.destroy()


def test_zeps_streams_prints_what_the_key_may_see(journal_dir, tmp_path, capsys):
    from zactors.apps.cli import main
    from zactors.patterns.zeps.broker import Broker
    create_keypair(str(tmp_path / "keys"), "server")
    create_keypair(str(tmp_path / "keys"), "me")
    server = load_keypair(str(tmp_path / "keys" / "server.key_secret"))
    me = load_keypair(str(tmp_path / "keys" / "me.key")).public
    auth = Authenticator(curve="*")
    broker = Broker(journal_dir, curve=server, permissions=Permissions([(me, "subscribe", "public.*")]),
                    streams=["public.news", "secret.plans"])
    try:
        capsys.readouterr()
        assert main(["-q", "zeps", "streams", "--connect", broker.endpoint,
                     "--curve", str(tmp_path / "keys" / "me.key_secret"),
                     "--curve-server", str(tmp_path / "keys" / "server.key")]) == 0
        out = capsys.readouterr().out
        assert "journal not shown to this key" in out and "stream public.news" in out and "secret" not in out
    finally:
        broker.destroy()
        auth.destroy()


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
