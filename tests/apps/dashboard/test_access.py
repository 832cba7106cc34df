"""The dashboard against hostile callers (issue 20): ReDoS through the tail, who counts as local, tokens."""
import json
import time

import gevent
import pytest

from zactors.patterns.zeps import Publisher

from .helpers import EventStream, get_json, request, start

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def node(tmp_path):
    up = start(tmp_path)
    yield up
    up.stop()


def test_a_redos_tail_does_not_freeze_the_node(node):
    host, port = node.server.address[:2]
    with Publisher(node.zeps.endpoint, "orders") as pub:
        pub.publish(b"k", b"v")
        pub.flush()
        tail = EventStream(host, port, "/api/zeps/tail?stream=orders&key=re:(a%7Ca)*%24")  # re:(a|a)*$
        try:
            assert tail.status == 200
            gevent.sleep(0)
            started = time.monotonic()
            pub.publish(b"a" * 30 + b"!", b"evil")
            pub.publish(b"aaaa", b"good")
            pub.flush(timeout=5)
            assert get_json(node.url + "api/status", timeout=5)["sources"]["zeps"]["status"] == "ok"
            assert request(node.url + "api/zeps/tail?stream=made-up", timeout=5)[0] == 404  # asks the broker
            name, data = tail.next_event(timeout=5)
            assert name == "messages"
            assert [m["body"]["text"] for m in json.loads(data)["messages"]] == ["good"]
            assert time.monotonic() - started < 1.0
        finally:
            tail.close()


def test_a_tail_pattern_re2_refuses_is_a_400_with_the_reason(node):
    status, _, body = request(node.url + "api/zeps/tail?stream=orders&key=re:(a)%5C1")   # re:(a)\1
    assert status == 400
    assert "RE2 syntax" in json.loads(body)["error"]
