"""Embedding actors in a gevent web server: many handlers, one actor.

Every request handler runs in its own greenlet and calls the same actor;
the actor's pipe matches replies to callers by request id, so handlers never
wait for each other.  Run it with ``zactors web``, then::

    curl http://127.0.0.1:8080/hit/home
    curl http://127.0.0.1:8080/top

The server and the actor must live in the same OS thread (gevent's).
"""
import json
import logging
from collections import Counter

from gevent.pywsgi import WSGIServer

from zactors.actors import Actor, CommandError, command
from zactors.actors.errors import ActorExited, ActorTimeout

__all__ = ["Tally", "make_app", "serve"]

log = logging.getLogger(__name__)


class Tally(Actor):
    """Counts hits per key.

    Commands: ``HIT key`` -> new count (reply); ``TOP n`` -> [[key, count], ...]
    (reply); ``RESET`` (no reply).
    """

    def __init__(self):
        self.counts = Counter()

    @command(reply=True)
    def hit(self, key):
        if not isinstance(key, str) or not key or len(key) > 200:
            raise ValueError("key must be 1-200 characters")
        self.counts[key] += 1
        return self.counts[key]

    @command(reply=True)
    def top(self, n=10):
        return self.counts.most_common(int(n))

    @command
    def reset(self):
        self.counts.clear()


def make_app(tally, timeout=5.0, counted=None):
    """A WSGI app whose handlers talk to ``tally``.

    Paths are percent-decoded UTF-8 (``/hit/%E2%9C%93`` counts the key
    "\u2713"); ``counted.requests`` counts the requests handled.
    """
    counted = counted if counted is not None else _Counted()

    def app(environ, start_response):
        counted.requests += 1
        try:
            # WSGI gives the percent-decoded path as latin-1 characters, one per byte
            path = environ.get("PATH_INFO", "/").encode("latin-1").decode("utf-8")
        except UnicodeError:
            return _respond(start_response, "400 Bad Request", {"error": "the path is not UTF-8"})
        path = path.strip("/").split("/")
        try:
            if path[0] == "hit" and len(path) == 2:
                body = {"key": path[1], "count": tally.call("HIT", path[1], timeout=timeout)}
            elif path[0] == "top":
                body = {"top": tally.call("TOP", 10, timeout=timeout)}
            else:
                return _respond(start_response, "404 Not Found", {"error": "try /hit/KEY or /top"})
        except CommandError as exc:
            return _respond(start_response, "400 Bad Request", {"error": exc.message})
        except (ActorExited, ActorTimeout) as exc:  # stopping (Ctrl-C on the demo) or overloaded: try again later
            return _respond(start_response, "503 Service Unavailable", {"error": str(exc)})
        return _respond(start_response, "200 OK", body)

    return app


class _Counted:
    requests = 0


def _respond(start_response, status, body):
    data = json.dumps(body, ensure_ascii=False).encode()
    start_response(status, [("Content-Type", "application/json; charset=utf-8"), ("Content-Length", str(len(data)))])
    return [data]


def serve(host="127.0.0.1", port=8080, tally=None):
    """Start (not block on) a server; returns ``(server, tally)``.  Port 0 picks one.

    ``server.counted.requests`` counts the requests handled.  Raises
    ``OSError`` when the address cannot be bound (the tally is destroyed then).
    """
    tally = tally or Tally()
    counted = _Counted()
    server = WSGIServer((host, port), make_app(tally, counted=counted), log=None, error_log=log)
    server.counted = counted
    try:
        server.start()
    except BaseException:
        tally.destroy()
        raise
    return server, tally
