"""The dashboard's JSON API, SSE and /metrics against a real node (real brokers, real sockets)."""
import json

import gevent
import pytest
from prometheus_client.parser import text_string_to_metric_families

from zactors.patterns.clone.client import Clone
from zactors.patterns.majordomo.client import Client as MdpClient
from zactors.patterns.majordomo.worker import Worker
from zactors.patterns.zeps import Publisher

from ...conftest import wait_for
from .helpers import EventStream, get_json, request, start

pytestmark = pytest.mark.timeout(60)


def status(node):
    return get_json(node.url + "api/status")


def test_status_shows_every_part(node):
    parts = status(node)["sources"]
    assert list(parts) == ["majordomo", "zeps", "clone", "harmony", "supervisor"]
    for name, part in parts.items():
        assert part["status"] == "ok", (name, part)
        assert part["data"] is not None
    assert parts["zeps"]["data"]["journal"].endswith("zeps")
    for name in parts:
        assert get_json(node.url + "api/" + name)["title"] == parts[name]["title"]


def test_rates_and_history_follow_traffic(node):
    with Publisher(node.zeps.endpoint, "orders") as pub:
        def traffic():
            while True:
                for i in range(50):
                    pub.publish(b"k%d" % i, b"v")
                pub.flush()
                gevent.sleep(0.05)
        publisher = gevent.spawn(traffic)
        try:
            wait_for(lambda: status(node)["sources"]["zeps"]["now"]["published"] > 0, 10, "a published rate")
        finally:
            publisher.kill()
    history = get_json(node.url + "api/history")
    assert len(history["times"]) == len(history["series"]["zeps"]["published"]) >= 2
    assert max(history["series"]["zeps"]["published"]) > 0


class Echo(Worker):
    service = b"echo"

    def handle(self, request):
        return request


def test_majordomo_page_counts_a_request(node):
    worker = Echo(node.broker.endpoint)
    client = MdpClient(node.broker.endpoint)
    try:
        assert client.request("echo", b"hi", timeout=5) == [[b"hi"]]
        wait_for(lambda: status(node)["sources"]["majordomo"]["data"]["counters"].get("replies") == 1, 10,
                 "the reply counted")
        services = get_json(node.url + "api/majordomo")["data"]["services"]
        assert services["echo"]["workers"] == 1
    finally:
        client.close()
        worker.destroy()


def test_metrics_are_prometheus_text(node):
    status_code, headers, body = request(node.url + "metrics")
    assert status_code == 200 and headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    up = {s.labels["pattern"]: s.value for s in families["zactors_up"].samples}
    assert up == {"majordomo": 1, "zeps": 1, "clone": 1, "harmony": 1, "supervisor": 1}
    assert "zactors_clone_keys" in families and "zactors_dashboard_sse_clients" in families


def test_openapi_describes_every_route(node):
    spec = get_json(node.url + "api/openapi.json")
    assert spec["openapi"].startswith("3.")
    for path in ("/api/status", "/api/events", "/api/zeps/tail", "/api/clone/keys", "/api/clone/set", "/metrics"):
        assert path in spec["paths"]
    assert "post" in spec["paths"]["/api/clone/delete"]


def test_server_sent_events_bring_snapshots_and_let_go(node):
    host, port = node.server.address[:2]
    stream = EventStream(host, port, "/api/events")
    try:
        assert stream.status == 200
        times = []
        for _ in range(3):
            name, data = stream.next_event()
            assert name == "snapshot"
            times.append(json.loads(data)["time"])
        assert times == sorted(times) and times[0] < times[-1]
        assert node.dashboard.clients == 1
    finally:
        stream.close()
    wait_for(lambda: node.dashboard.clients == 0, 10, "the closed client forgotten")


def test_stuck_clients_never_hold_the_sampler_back(node):
    host, port = node.server.address[:2]
    stuck = [EventStream(host, port, "/api/events") for _ in range(50)]  # connect, never read again
    try:
        wait_for(lambda: node.dashboard.clients == 50, 10, "50 clients")
        ticks = node.dashboard.sampler.call("HISTORY")["times"][-1]
        with Publisher(node.zeps.endpoint, "load") as pub:
            for i in range(2000):
                pub.publish(b"k", b"x" * 100)
            pub.flush(timeout=10)
        wait_for(lambda: status(node)["time"] > ticks + 1, 10, "the sampler going on")
        assert status(node)["sources"]["zeps"]["data"]["streams"]["load"]["last_seq"] == 2000
    finally:
        for client in stuck:
            client.close()
    wait_for(lambda: node.dashboard.clients == 0, 20, "the stuck clients gone")


def test_too_many_live_pages_are_refused(tmp_path):
    up = start(tmp_path, dashboard={"max_clients": 2})
    try:
        host, port = up.server.address[:2]
        first, second = EventStream(host, port, "/api/events"), EventStream(host, port, "/api/events")
        third = EventStream(host, port, "/api/events")
        assert (first.status, second.status, third.status) == (200, 200, 503)
        for s in (first, second, third):
            s.close()
    finally:
        up.stop()


def test_zeps_tail_streams_matching_keys(node):
    host, port = node.server.address[:2]
    with Publisher(node.zeps.endpoint, "orders") as pub:
        pub.publish(b"a0", b"before")
        pub.flush()
        tail = EventStream(host, port, "/api/zeps/tail?stream=orders&key=a")
        try:
            assert tail.status == 200
            seen = []

            def feed():
                for i in range(100):
                    pub.publish(b"b%d" % i, b"other")
                    pub.publish(b"a%d" % i, b"<b>%d</b>" % i)
                    pub.flush()
                    gevent.sleep(0.05)
            feeder = gevent.spawn(feed)
            try:
                while len(seen) < 3:
                    name, data = tail.next_event()
                    assert name == "messages"
                    seen.extend(json.loads(data)["messages"])
            finally:
                feeder.kill()
            assert all(m["key"]["text"].startswith("a") for m in seen)
            assert all(m["body"]["text"] != "before" for m in seen)  # new messages only
            assert seen[0]["body"]["text"].startswith("<b>")          # shown as text, the page escapes it
        finally:
            tail.close()
    status_code, _, body = request(node.url + "api/zeps/tail?stream=orders&key=re:(")
    assert status_code == 400 and b"error" in body
    assert request(node.url + "api/zeps/tail")[0] == 400
    assert request(node.url + "api/zeps/tail?stream=made-up")[0] == 404  # a GET never creates a stream
    assert "made-up" not in node.zeps.call("INFO")["streams"]


def test_harmony_page_shows_a_peer_with_its_groups_and_headers(node):
    from zactors.patterns.harmony.node import Node
    peer = Node("visitor", {"X-Role": "<script>tester</script>"}, beacon=False, host="127.0.0.1",
                endpoints=[node.harmony.endpoint]).start()
    try:
        peer.join("ops")
        wait_for(lambda: [p["name"] for p in get_json(node.url + "api/harmony")["data"]["peers"]] == ["visitor"],
                 15, "the peer listed")
        wait_for(lambda: get_json(node.url + "api/harmony")["data"]["peers"][0]["groups"] == ["ops"], 15,
                 "its group")
        shown = get_json(node.url + "api/harmony")["data"]["peers"][0]
        assert shown["headers"]["X-Role"] == "<script>tester</script>" and shown["state"] == "alive"
        assert "ops" in get_json(node.url + "api/harmony")["data"]["groups"]
    finally:
        peer.stop()


def test_clone_browse_set_and_delete(node):
    client = Clone([tuple(node.clone.endpoints[:3])], subtree=b"/app/")
    try:
        assert client.wait_synced(5)
        for key, value in ((b"/app/a", b"1"), (b"/app/b", b"\x00\xff"), (b"/app/sub/c", b"3")):
            client.set(key, value, wait=5)  # confirmed: a PUB drops what it sends before it connects
        client.set(b"/other/d", b"4")
        wait_for(lambda: node.clone.call("GET", b"/other/d") == b"4", 5, "the key outside the subtree")
        wait_for(lambda: len(client) == 3, 5, "the keys set")
        listing = get_json(node.url + "api/clone/keys?prefix=/app/")
        assert [k["key"]["text"] for k in listing["keys"]] == ["/app/a", "/app/b"]
        assert listing["keys"][1]["value"] == {"hex": "00ff", "size": 2, "truncated": False}
        assert [(s["prefix"]["text"], s["keys"]) for s in listing["subtrees"]] == [("/app/sub/", 1)]
        assert [k["ttl"] for k in listing["keys"]] == [None, None]

        client.set(b"/app/lease", b"held", ttl=30, wait=5)
        client.set(b"/app/long", b"v" * 1000, wait=5)
        listing = {k["key"]["text"]: k for k in get_json(node.url + "api/clone/keys?prefix=/app/")["keys"]}
        assert 0 < listing["/app/lease"]["ttl"] <= 30 and listing["/app/a"]["ttl"] is None
        assert listing["/app/long"]["value"] == {"text": "v" * 256, "size": 1000, "truncated": True}
        ttl = get_json(node.url + "api/openapi.json")["components"]["schemas"]["CloneKeys"]["properties"]["keys"]
        assert ttl["items"]["properties"]["ttl"]["type"] == ["number", "null"]
        root = get_json(node.url + "api/clone/keys")
        assert [s["prefix"]["text"] for s in root["subtrees"]] == ["/app/", "/other/"]

        status_code, _, body = request(node.url + "api/clone/set", "POST", {"key": "/app/web", "value": "from the page"})
        assert status_code == 200 and json.loads(body)["confirmed"] is True, body
        wait_for(lambda: client.get(b"/app/web") == b"from the page", 5, "the set reaching a Clone client")
        assert request(node.url + "api/clone/delete", "POST", {"key": "/app/web"})[0] == 200
        wait_for(lambda: b"/app/web" not in client, 5, "the delete reaching a Clone client")
    finally:
        client.destroy()


@pytest.mark.parametrize("method, body, headers, expected", [
    ("GET", None, {}, 404),                                               # a change is never a GET
    ("POST", None, {"Content-Type": "text/plain"}, 415),                  # a cross-site form cannot send JSON
    ("POST", {"key": "/k", "value": "v"}, {"Sec-Fetch-Site": "cross-site"}, 403),
    ("POST", {"key": "/k", "value": "v"}, {"Origin": "http://evil.example"}, 403),
    ("POST", {"key": "/k", "value": "v"}, {"Host": "evil.example"}, 403),  # DNS rebinding
    ("POST", {"key": "", "value": "v"}, {}, 400),
    ("POST", {"key": "/k", "value": 5}, {}, 400),
    ("POST", {"key": "/k", "value": "v", "ttl": -1}, {}, 400),
])
def test_changes_refuse_what_they_should(node, method, body, headers, expected):
    status_code, response_headers, text = request(node.url + "api/clone/set", method, body, headers)
    assert status_code == expected, text
    assert "Access-Control-Allow-Origin" not in response_headers
    assert json.loads(text)["error"]


def test_every_response_has_safe_headers(node):
    for path in ("", "static/app.js", "api/status", "nope"):
        _, headers, _ = request(node.url + path)
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"


def test_a_token_guards_every_request(tmp_path):
    token = "t" * 24
    up = start(tmp_path, dashboard={"token": token})
    try:
        assert request(up.url + "api/status")[0] == 401
        assert request(up.url)[0] == 401
        assert request(up.url + "metrics")[0] == 401
        assert request(up.url + "api/status", headers={"Authorization": "Bearer " + "x" * 24})[0] == 401
        assert request(up.url + "api/status", headers={"Authorization": "Bearer " + token})[0] == 200
        status_code, headers, _ = request(up.url + "?token=" + token)
        assert status_code == 303 and "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]
        cookie = headers["Set-Cookie"].split(";")[0]
        assert request(up.url + "api/status", headers={"Cookie": cookie})[0] == 200
        assert request(up.url + "?token=wrong")[0] == 401
    finally:
        up.stop()


def test_a_stopped_part_shows_down_and_comes_back_in_metrics(node):
    node.tree.call("STOP_CHILD", "clone")  # stopped, not restarted: a dead part would be back at once
    wait_for(lambda: status(node)["sources"]["clone"]["status"] == "down", 10, "clone down")
    body = request(node.url + "metrics")[2].decode()
    assert 'zactors_up{pattern="clone"} 0.0' in body
    node.tree.call("RESTART_CHILD", "clone")
    wait_for(lambda: 'zactors_up{pattern="clone"} 1.0' in request(node.url + "metrics")[2].decode(), 10,
             "clone back")


def test_snapshots_stay_bounded_with_many_streams(node):
    node.dashboard.by_name["zeps"].max_streams = 2
    with Publisher(node.zeps.endpoint, "a") as a, Publisher(node.zeps.endpoint, "b") as b, \
            Publisher(node.zeps.endpoint, "c") as c:
        for pub in (a, b, c):
            pub.publish(b"k", b"v")
            pub.flush()
        wait_for(lambda: status(node)["sources"]["zeps"]["data"].get("streams_not_shown") == 1, 10,
                 "the third stream left out")
    assert len(status(node)["sources"]["zeps"]["data"]["streams"]) == 2


@pytest.mark.parametrize("body, expected", [
    (b"[1, 2]", 400), (b"{not json", 400), (b'{"key": {"$gt": ""}, "value": "v"}', 400),
    (b'{"key": "/k", "value": "' + b"v" * (70 << 10) + b'"}', 413),
])
def test_hostile_bodies_are_refused(node, body, expected):
    status_code, _, text = request_raw(node.url + "api/clone/set", body)
    assert status_code == expected, text


def request_raw(url, body):
    import urllib.request
    import urllib.error

    def run():
        req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as response:
                return response.status, None, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, None, exc.read()
    return gevent.get_hub().threadpool.apply(run)


@pytest.mark.slow
def test_a_thousand_pages_connect_and_leave_and_the_brokers_go_on(processes, tmp_path):
    # the node in its own process, as `zactors up` runs; 1000 raw SSE clients from here
    from ..cli_helpers import read_until, start as start_cli
    proc = start_cli(processes, "up", "--data", str(tmp_path / "d"), "--no-mdp", "--no-clone", "--no-harmony",
                     "--zeps", "tcp://127.0.0.1:*", "--web", "127.0.0.1:0")
    lines = read_until(proc.stdout, "up: Ctrl-C stops")
    where = {line.split()[0]: line.split()[1] for line in lines if not line.startswith("up:")}
    host, port = where["dashboard"].split("//")[1].rstrip("/").split(":")
    pages = []
    try:
        for _ in range(1000):
            pages.append(EventStream(host, int(port), "/api/events"))
        assert {page.status for page in pages} == {200}
        for page in pages[::50]:
            assert page.next_event()[0] == "snapshot"
        with Publisher(where["zeps"], "busy") as pub:
            for i in range(5000):
                pub.publish(b"k", b"x" * 100)
            pub.flush(timeout=15)
        metrics = request(where["dashboard"] + "metrics")[2].decode()
        assert "zactors_dashboard_sse_clients 1000.0" in metrics
    finally:
        for page in pages:
            page.close()

    def clients():
        body = request(where["dashboard"] + "metrics")[2].decode()
        return [line for line in body.splitlines() if line.startswith("zactors_dashboard_sse_clients ")]
    wait_for(lambda: clients() == ["zactors_dashboard_sse_clients 0.0"], 30, "every page gone")
    proc.terminate()
    assert proc.wait(timeout=30) == 0


def test_consumer_groups_show_in_the_api_and_metrics(node):
    from zactors.patterns.zeps.consumer import Consumer

    pub = Publisher(node.zeps.endpoint, "orders")
    for n in range(3):
        pub.publish(b"k", b"%d" % n)
    pub.flush()
    pub.close()
    with Consumer(node.zeps.endpoint, "orders", "billing", window=20) as c:  # credit for one (20 B), two left
        wait_for(lambda: c.pending == 1, 10, "one message held")

        def group():
            groups = get_json(node.url + "api/zeps")["data"].get("groups", [])
            return groups[0] if groups and groups[0]["pending"] == 1 else None

        wait_for(group, 10, "the group in the API")
        g = group()
        assert (g["stream"], g["group"], g["lag"], g["members"]) == ("orders", "billing", 2, 1)
        wait_for(lambda: 'zactors_zeps_group_pending{group="billing",stream="orders"} 1.0'
                 in request(node.url + "metrics")[2].decode(), 10, "the group in /metrics")
        body = request(node.url + "metrics")[2].decode()
        for name in ("lag", "oldest_pending_seconds", "members", "redelivered", "dead_letters"):
            assert "zactors_zeps_group_%s{" % name in body, name
