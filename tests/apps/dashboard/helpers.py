"""HTTP for the dashboard tests, from inside a gevent test: blocking clients run on the hub's threadpool."""
import json
import urllib.error
import urllib.request

import gevent
import gevent.socket

from zactors.apps.up import DEFAULTS, Up, merge


def config(tmp_path, **parts):
    """A node config on ephemeral loopback ports under ``tmp_path``."""
    given = {"data": str(tmp_path / "data"), "majordomo": {"bind": "tcp://127.0.0.1:*"},
             "zeps": {"bind": "tcp://127.0.0.1:*"}, "clone": {"port": 0},
             "dashboard": {"bind": "127.0.0.1:0", "interval": 0.2}}
    for part, values in parts.items():
        given.setdefault(part, {}).update(values)
    return merge(DEFAULTS, given)


def start(tmp_path, **parts):
    return Up(config(tmp_path, **parts)).start()


def request(url, method="GET", body=None, headers=None, timeout=10):
    """``(status, headers, body bytes)``; never raises for an HTTP status."""
    data = None
    headers = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=headers)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    def run():
        try:
            with urllib.request.build_opener(NoRedirect).open(req, timeout=timeout) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()
    return gevent.get_hub().threadpool.apply(run)


def get_json(url, **kwargs):
    status, _, body = request(url, **kwargs)
    assert status == 200, (status, body)
    return json.loads(body)


class EventStream:
    """A raw Server-Sent-Events client on a gevent socket: ``next_event(timeout)`` -> (name, data)."""

    def __init__(self, url_host, port, path, headers=""):
        self.sock = gevent.socket.create_connection((url_host, port))
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nAccept: text/event-stream\r\n%s\r\n"
                           % (path, url_host, port, headers)).encode())
        self.buffer = b""
        head = self._until(b"\r\n\r\n", 10)
        self.status = int(head.split(b" ", 2)[1])

    def _until(self, mark, timeout):
        with gevent.Timeout(timeout, AssertionError("no %r within %ss" % (mark, timeout))):
            while mark not in self.buffer:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise AssertionError("connection closed")
                self.buffer += chunk
        head, self.buffer = self.buffer.split(mark, 1)
        return head

    def next_event(self, timeout=10):
        """The next event (chunked framing lines are skipped): ``(name, data str)``."""
        while True:
            block = self._until(b"\n\n", timeout)
            name, data = "message", []
            for line in block.split(b"\n"):
                line = line.strip(b"\r")
                if line.startswith(b"event: "):
                    name = line[7:].decode()
                elif line.startswith(b"data: "):
                    data.append(line[6:].decode())
            if data:
                return name, "\n".join(data)

    def close(self):
        self.sock.close()
