"""The dashboard against hostile callers (issue 20): ReDoS through the tail, who counts as local, tokens."""
import json
import time

import gevent
import pytest

from zactors.patterns.zeps import Publisher

from ...conftest import wait_for
from .helpers import EventStream, get_json, request

pytestmark = pytest.mark.timeout(60)


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


def _post_from(source, host, port, path, body, headers):
    """A real POST over TCP from the loopback address ``source``: ``(status, body)``."""
    import http.client

    def run():
        conn = http.client.HTTPConnection(host, port, timeout=10, source_address=(source, 0))
        try:
            conn.request("POST", path, json.dumps(body), dict({"Content-Type": "application/json"}, **headers))
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()
    return gevent.get_hub().threadpool.apply(run)


def test_local_means_the_peer_address_never_the_host_header(node):
    """Issue 20, defect 8: a token-less dashboard served off loopback took a remote ``Host: 127.0.0.1`` as local.

    Tests stay on loopback, so "remote" is played by another loopback address: this dashboard trusts only
    127.0.0.1 (``local``), is served on 127.0.0.2, and the caller connects from 127.0.0.3 (its source address,
    which is what the server sees as the peer) while its Host header says 127.0.0.1.
    """
    from gevent.pywsgi import WSGIServer

    from zactors.apps.dashboard import Dashboard, sources
    dashboard = Dashboard([sources.Clone(node.clone)], local=["127.0.0.1/32"])
    server = WSGIServer(("127.0.0.2", 0), dashboard, log=None)
    server.start()
    try:
        port = server.address[1]
        local_host = {"Host": "127.0.0.1:%d" % port}
        status, body = _post_from("127.0.0.3", "127.0.0.2", port, "/api/clone/set", {"key": "/x", "value": "remote"},
                                  local_host)
        assert status == 403 and b"local" in body, body
        status, body = _post_from("127.0.0.1", "127.0.0.2", port, "/api/clone/set", {"key": "/x", "value": "proxied"},
                                  dict(local_host, **{"X-Forwarded-For": "198.51.100.7"}))
        assert status == 403, body                       # through a proxy everyone looks local: not trusted
        assert node.clone.call("GET", b"/x") is None     # nothing changed the map
        status, body = _post_from("127.0.0.1", "127.0.0.2", port, "/api/clone/set", {"key": "/x", "value": "local"},
                                  local_host)
        assert status == 200, body
        assert node.clone.call("GET", b"/x") == b"local"
    finally:
        server.stop()
        dashboard.close()


def test_openapi_declares_metrics_as_prometheus_text(node):
    """Issue 20: the OpenAPI document declared /metrics as JSON."""
    content = get_json(node.url + "api/openapi.json")["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(content) == ["text/plain"]
    status, headers, _ = request(node.url + "metrics")
    assert status == 200 and headers["Content-Type"].split(";")[0] == "text/plain"


def test_closed_tails_let_go_at_once_and_never_fill_the_tail_places(node):
    """Issue 20: a closed tail lingered 15 s, so 8 closed tails made every tail answer 503 for that long."""
    host, port = node.server.address[:2]
    with Publisher(node.zeps.endpoint, "quiet") as pub:
        pub.publish(b"k", b"v")
        pub.flush()
    zeps = node.dashboard.by_name["zeps"]
    for _ in range(2):                    # twice the places, each batch closed before the next opens
        tails = [EventStream(host, port, "/api/zeps/tail?stream=quiet") for _ in range(zeps.max_tails)]
        assert [t.status for t in tails] == [200] * zeps.max_tails
        assert zeps.tails == zeps.max_tails
        for tail in tails:
            tail.close()
        started = time.monotonic()
        wait_for(lambda: zeps.tails == 0, 5, "the closed tails let go")
        assert time.monotonic() - started < 3.0
    tail = EventStream(host, port, "/api/zeps/tail?stream=quiet")
    try:
        assert tail.status == 200
    finally:
        tail.close()
