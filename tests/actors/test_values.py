"""One value model: bytes-like as is, str as UTF-8, anything else refused naming the argument."""
import pytest

from zactors.actors.values import to_bytes
from zactors.patterns.majordomo import Broker, Client

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("value,expected", [
    (b"raw", b"raw"), (bytearray(b"ba"), b"ba"), (memoryview(b"mv"), b"mv"), ("h\u00e9", b"h\xc3\xa9"), ("", b""),
])
def test_bytes_like_and_str_are_taken(value, expected):
    assert to_bytes(value) == expected and type(to_bytes(value)) is bytes


@pytest.mark.parametrize("value", [5, 0, None, 1.5, {"a": 1}, [b"x"], object()])
def test_anything_else_is_refused_naming_the_argument(value):
    with pytest.raises(TypeError) as raised:
        to_bytes(value, "body")
    assert str(raised.value) == "body must be bytes or str, not %s" % type(value).__name__


def test_majordomo_client_follows_the_rule():
    with Broker() as broker, Client(broker.endpoint, timeout=0.2, retries=1) as client:
        with pytest.raises(TypeError, match="^a request frame must be bytes or str, not int$"):
            client.request("echo", 5)
        with pytest.raises(TypeError, match="^service must be bytes or str, not NoneType$"):
            client.request(None, b"x")


def test_zeps_publisher_follows_the_rule(tmp_path):
    from zactors.patterns.zeps import Broker as ZepsBroker, Publisher, Subscriber
    with ZepsBroker(str(tmp_path / "journal")) as broker:
        with Publisher(broker.endpoint, "s") as pub:
            pub.publish("k\u00e9", "b\u00e9")                       # str: UTF-8
            pub.publish(b"k", bytearray(b"raw"))
            with pytest.raises(TypeError, match="^body must be bytes or str, not int$"):
                pub.publish("k", 5)
            with pytest.raises(TypeError, match="^key must be bytes or str, not int$"):
                pub.publish(5, b"x")
            pub.flush()
        sub = Subscriber(broker.endpoint, "s", from_seq=1)
        try:
            got = [sub.get(10) for _ in range(2)]
        finally:
            sub.destroy()
        assert [(m.key, m.body) for m in got] == [(b"k\xc3\xa9", b"b\xc3\xa9"), (b"k", b"raw")]


def test_clone_client_follows_the_rule():
    from zactors.patterns.clone.client import Clone
    from zactors.patterns.clone.server import CloneServer
    server = CloneServer()                                   # free loopback ports
    try:
        client = Clone([tuple(server.endpoints[:3])])
        try:
            assert client.wait_synced(5)
            with pytest.raises(TypeError, match="^value must be bytes or str, not int$"):
                client.set("k", 5)                           # not five NUL bytes
            with pytest.raises(TypeError, match="^key must be bytes or str, not int$"):
                client.set(5, b"v")
            client.set("k\u00e9", "v\u00e9", wait=5)
            assert client.get("k\u00e9") == b"v\xc3\xa9" == server.call("GET", "k\u00e9".encode())
        finally:
            client.destroy()
    finally:
        server.destroy()


def test_harmony_node_follows_the_rule():
    # the README names Harmony among the clients of the one value model; no test said so
    from zactors.patterns.harmony import Node
    with Node("a", beacon=False) as a, Node("b", beacon=False, endpoints=[a.endpoint]) as b:
        for node in (a, b):
            node.join("g")
        with __import__("gevent").Timeout(10):
            for event in a.events():                            # a knows b is in g: a shout reaches it
                if event.type == "JOIN" and event.group == "g":
                    break
        with pytest.raises(TypeError, match="^a frame must be bytes or str, not int$"):
            a.shout("g", 5)
        with pytest.raises(TypeError, match="^a frame must be bytes or str, not NoneType$"):
            a.whisper(b.uuid, None)
        a.shout("g", "h\u00e9")                                  # str: UTF-8
        with __import__("gevent").Timeout(10):
            for event in b.events():
                if event.type == "SHOUT":
                    break
        assert event.frames == [b"h\xc3\xa9"]
