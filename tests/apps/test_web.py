"""The embedding example under concurrent HTTP load, with a real HTTP client."""
import json
import urllib.request

import gevent
import pytest

from zactors.apps.web import serve

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server():
    srv, tally = serve(port=0)
    yield "http://127.0.0.1:%d" % srv.server_port
    srv.stop()
    tally.destroy()


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_concurrent_requests_are_all_counted(server):
    # urllib blocks, so it runs in real OS threads while the gevent hub serves
    pool = gevent.get_hub().threadpool
    pool.maxsize = 16
    jobs = [pool.spawn(fetch, "%s/hit/k%d" % (server, i % 4)) for i in range(200)]
    results = [job.get(timeout=30) for job in jobs]
    assert all(status == 200 for status, _ in results)
    assert sorted(body["count"] for _, body in results if body["key"] == "k0") == list(range(1, 51))
    status, body = pool.spawn(fetch, server + "/top").get(timeout=30)
    assert status == 200
    assert sorted(body["top"]) == [["k0", 50], ["k1", 50], ["k2", 50], ["k3", 50]]


def test_errors_are_clear_json(server):
    pool = gevent.get_hub().threadpool
    assert pool.spawn(fetch, server + "/nowhere").get(timeout=30) == (404, {"error": "try /hit/KEY or /top"})
    status, body = pool.spawn(fetch, server + "/hit/" + "x" * 300).get(timeout=30)
    assert status == 400 and "1-200" in body["error"]


def test_percent_encoded_utf8_paths_are_decoded(server):
    pool = gevent.get_hub().threadpool
    status, body = pool.spawn(fetch, server + "/hit/%E2%9C%93").get(timeout=30)
    assert (status, body) == (200, {"key": "\u2713", "count": 1})
    status, body = pool.spawn(fetch, server + "/top").get(timeout=30)
    assert body["top"] == [["\u2713", 1]]
    status, body = pool.spawn(fetch, server + "/hit/%FF").get(timeout=30)
    assert status == 400 and "not UTF-8" in body["error"]


def test_a_request_while_the_tally_is_gone_gets_503_not_a_traceback():
    # Ctrl-C on the demo stops the tally while requests are in flight: they raised ActorExited in pywsgi
    srv, tally = serve(port=0)
    try:
        tally.destroy()
        status, body = gevent.get_hub().threadpool.spawn(
            fetch, "http://127.0.0.1:%d/hit/k" % srv.server_port).get(timeout=30)
        assert status == 503 and "exited" in body["error"]
    finally:
        srv.stop()
