"""One Clone shared by many greenlets, and by the handlers of a gevent WSGI server."""
import gevent
import pytest
from gevent.pywsgi import WSGIServer
from gevent.socket import create_connection

from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.server import CloneServer
from tests.patterns.clone.conftest import client_of

pytestmark = pytest.mark.timeout(60)


def test_many_greenlets_set_and_wait(make):
    server = make(CloneServer)
    clone = make(Clone, [client_of(server)])
    assert clone.wait_synced(5)
    jobs = [gevent.spawn(clone.set, "g%d" % i, str(i), wait=10) for i in range(200)]
    gevent.joinall(jobs, raise_error=True)
    assert sorted(j.value for j in jobs) == list(range(1, 201))
    assert len(clone) == 200 and all(clone.get("g%d" % i) == str(i).encode() for i in range(200))


def test_wsgi_handlers(make):
    server = make(CloneServer)
    clone = make(Clone, [client_of(server)])
    assert clone.wait_synced(5)

    def app(environ, start_response):
        key = environ["PATH_INFO"].strip("/")
        if environ["REQUEST_METHOD"] == "PUT":
            body = environ["wsgi.input"].read()
            seq = clone.set(key, body, wait=5)
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"%d" % seq]
        value = clone.get(key)
        start_response("200 OK" if value is not None else "404 Not Found", [("Content-Type", "text/plain")])
        return [value or b""]

    web = WSGIServer(("127.0.0.1", 0), app, log=None)
    web.start()
    try:
        def request(method, key, body=b""):
            conn = create_connection(("127.0.0.1", web.server_port))
            try:
                conn.sendall(b"%s /%s HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (method, key, len(body), body))
                data = b""
                while True:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            finally:
                conn.close()
            head, _, payload = data.partition(b"\r\n\r\n")
            return int(head.split()[1]), payload
        puts = [gevent.spawn(request, b"PUT", b"k%d" % i, b"v%d" % i) for i in range(50)]
        gevent.joinall(puts, raise_error=True)
        assert all(p.value[0] == 200 for p in puts)
        gets = [gevent.spawn(request, b"GET", b"k%d" % i) for i in range(50)]
        gevent.joinall(gets, raise_error=True)
        assert [g.value for g in gets] == [(200, b"v%d" % i) for i in range(50)]
        assert request(b"GET", b"missing")[0] == 404
    finally:
        web.stop()
