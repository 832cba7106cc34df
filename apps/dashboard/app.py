"""The dashboard as a plain WSGI application: pages, JSON API, Server-Sent Events, ``/metrics``.

::

    from zactors.apps.dashboard import Dashboard, sources
    dashboard = Dashboard([sources.Majordomo(broker), sources.Zeps(zeps)])
    gevent.pywsgi.WSGIServer(("127.0.0.1", 8765), dashboard).serve_forever()
    dashboard.close()

Routes (``GET`` unless said; ``/api/openapi.json`` describes the API):

``/``                      the page (one HTML shell; ``static/app.js`` draws every view)
``/static/NAME``           its script, style sheet and icon
``/api/status``            the last snapshot of every source (``zactors status`` prints it)
``/api/history``           the charted series, oldest first
``/api/events``            Server-Sent Events: a ``snapshot`` event per sampler tick
``/api/SOURCE``            one source's last sample
``/api/SOURCE/ACTION``     a source's action (``zeps/tail``, ``clone/keys``; ``POST clone/set``, ``clone/delete``)
``/metrics``               Prometheus text format

It works mounted under a prefix (``SCRIPT_NAME``): the page uses relative
addresses only.  Handlers run in the server's greenlets, in the thread that
made the actors; nothing here blocks the brokers.  See :mod:`.guard` for who
may call it.
"""
import json
import logging
import mimetypes
import os
from urllib.parse import parse_qsl

import gevent
from gevent.pool import Pool
from gevent.pywsgi import WSGIHandler, WSGIServer

from zactors.actors.errors import ActorError
from zactors.actors.router import fd_budget

from . import openapi
from .guard import HEADERS, LOOPBACK, Guard
from .metrics import CONTENT_TYPE, Metrics
from .sampler import Sampler
from .sources import ActionError

__all__ = ["Dashboard", "server"]

log = logging.getLogger(__name__)

_STATIC = os.path.join(os.path.dirname(__file__), "static")
_FILES = {name: os.path.join(_STATIC, name) for name in ("index.html", "app.js", "style.css", "icon.svg")}
#: bytes of a POST body read at most
MAX_BODY = 64 << 10
#: seconds a connection may wait for its request (and a page for its next write) before it is closed
IDLE = 10.0


def connection_budget():
    """HTTP connections a dashboard serves at once: a quarter of the open-file limit (10,000 without one)."""
    return fd_budget(0.25, 32) or 10000


class _Handler(WSGIHandler):
    """pywsgi's handler with a deadline on every read and write: an idle connection lets its place go."""

    def handle(self):
        self.socket.settimeout(self.server.idle)
        super().handle()


def server(dashboard, address, *, idle=IDLE, connections=None, error_log=None):
    """A gevent ``WSGIServer`` for ``dashboard`` on ``address`` (not started): at most ``connections``
    (default :func:`connection_budget`) at once, the next ones left in the kernel's backlog, taking no
    descriptor; a connection silent for ``idle`` seconds is closed."""
    wsgi = WSGIServer(address, dashboard, log=None, error_log=error_log, handler_class=_Handler,
                      spawn=Pool(connections or connection_budget()))
    wsgi.idle = idle
    return wsgi


class Dashboard:
    """A WSGI app over ``sources``; ``close()`` stops its sampler and the sources' helpers.

    ``token``: required on every request when given (see :mod:`.guard`);
    ``local``: without one, the networks whose peer addresses may call (loopback);
    ``keys``: ``{token: client public key}``, tokens that see only what that key's permissions allow.
    ``interval``: seconds between samples; ``history``: points per chart.
    ``max_clients``: Server-Sent-Events clients at once (then 503, counted in ``refused``; default 1000,
    or half the :func:`connection_budget` when that is less);
    ``queue``: snapshots a slow client may have pending before it loses some.
    """

    def __init__(self, sources, *, token=None, local=LOOPBACK, keys=None, interval=1.0, history=180,
                 max_clients=None, queue=4):
        self.sources = list(sources)
        self.by_name = {s.name: s for s in self.sources}
        if len(self.by_name) != len(self.sources):
            raise ValueError("two sources share a name")
        self.guard = Guard(token, local, keys)
        self.max_clients = max_clients or min(1000, connection_budget() // 2)
        self.queue = queue
        self.clients = 0
        self.dropped = 0
        self.refused = 0    # live pages refused (max_clients)
        self._static = {}
        for name, path in _FILES.items():
            with open(path, "rb") as f:
                self._static[name] = f.read()
        self.sampler = Sampler(self.sources, interval, history)
        self._encoded = self.sampler.call("LATEST")
        self._decoded = None
        self._views = {}    # key -> the last snapshot as that key sees it (encoded), cleared each tick
        self._reader = gevent.spawn(self._read)
        self.metrics = Metrics(self)

    # -- the snapshot ---------------------------------------------------------
    def _read(self):
        """Keep the last snapshot; drain the sampler's default queue so it never fills."""
        for event in self.sampler.events():
            if event.name == "SNAPSHOT":
                self._encoded = event.args[0]
                self._decoded = None
                self._views.clear()

    def latest(self):
        """The last snapshot as a dict (decoded once per tick)."""
        if self._decoded is None:
            self._decoded = json.loads(self._encoded)
        return self._decoded

    def view(self, viewer, snapshot=None):
        """``snapshot`` (default: the last one, a dict) as ``viewer`` may see it: all of it for the operator
        (None), else each source's :meth:`~.sources.Source.visible` part for that key."""
        snapshot = self.latest() if snapshot is None else snapshot
        if viewer is None:
            return snapshot
        parts = {}
        for source in self.sources:
            part = snapshot["sources"].get(source.name)
            if part is not None:
                part = source.visible(part, viewer)
                if part is not None:
                    parts[source.name] = part
        return dict(snapshot, sources=parts)

    def _encoded_for(self, viewer, encoded=None):
        """The snapshot ``encoded`` (default: the last one) as JSON bytes for ``viewer``."""
        if viewer is None:
            return self._encoded if encoded is None else encoded
        if encoded is not None and encoded is not self._encoded:
            return json.dumps(self.view(viewer, json.loads(encoded)), separators=(",", ":")).encode()
        view = self._views.get(viewer)
        if view is None:
            view = self._views[viewer] = json.dumps(self.view(viewer), separators=(",", ":")).encode()
        return view

    def visible_sources(self, viewer):
        """The sources ``viewer`` may see at all."""
        return self.sources if viewer is None else [s for s in self.sources if s.visible_to(viewer)]

    def close(self):
        for source in self.sources:
            try:
                source.close()
            except Exception:
                log.exception("closing the %s source", source.name)
        self.sampler.destroy()
        self._reader.kill(block=False)

    # -- WSGI -----------------------------------------------------------------
    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "/")
        method = environ["REQUEST_METHOD"]
        base = environ.get("SCRIPT_NAME", "")
        page = path == "/"
        if not path:  # mounted at /prefix, asked for /prefix: the page lives at /prefix/
            return _respond(start_response, "308 Permanent Redirect", b"", "text/plain",
                            [("Location", base + "/")])
        query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        if page and "token" in query and self.guard.has_tokens:
            if not self.guard.query_token(query["token"]):
                return _error(start_response, "401 Unauthorized", "wrong token")
            return _respond(start_response, "303 See Other", b"", "text/plain",
                            [("Location", (base or "") + "/"), self.guard.cookie((base or "") + "/", query["token"])])
        refused, viewer = self.guard.check(environ, page)
        if refused is not None:
            return _error(start_response, *refused)
        try:
            if page:
                return self._file(start_response, "index.html", method)
            if path.startswith("/static/"):
                return self._file(start_response, path[8:], method)
            if path == "/metrics":
                return _respond(start_response, "200 OK", self.metrics.render(viewer), CONTENT_TYPE)
            if not path.startswith("/api/"):
                return _error(start_response, "404 Not Found", "no such page")
            return self._api(environ, start_response, method, path[5:].strip("/").split("/"), query, viewer)
        except ActionError as exc:
            return _error(start_response, exc.status, str(exc))
        except ActorError as exc:
            return _error(start_response, "503 Service Unavailable", "the pattern did not answer: %s" % exc)

    def _file(self, start_response, name, method):
        body = self._static.get(name)
        if body is None:
            return _error(start_response, "404 Not Found", "no such file")
        if method not in ("GET", "HEAD"):
            return _error(start_response, "405 Method Not Allowed", "GET only")
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind.endswith("javascript"):
            kind += "; charset=utf-8"
        return _respond(start_response, "200 OK", body, kind)

    def _api(self, environ, start_response, method, parts, query, viewer):
        head = parts[0]
        sources = {s.name: s for s in self.visible_sources(viewer)}
        if len(parts) == 1 and method == "GET":
            if head == "status":
                return _respond(start_response, "200 OK", self._encoded_for(viewer), "application/json")
            if head == "history":
                history = self.sampler.call("HISTORY", timeout=5)
                if viewer is not None:
                    history["series"] = {name: s for name, s in history["series"].items() if name in sources}
                return _json(start_response, history)
            if head == "events":
                return self._events(start_response, viewer)
            if head == "openapi.json":
                return _json(start_response, openapi.describe(list(sources.values())))
            if head in sources:
                part = self.view(viewer)["sources"].get(head)
                return _json(start_response, part)
        source = sources.get(head)
        if source is None or len(parts) != 2:
            return _error(start_response, "404 Not Found", "no such API path; see api/openapi.json")
        body = {}
        if method == "POST":
            if not environ.get("CONTENT_TYPE", "").startswith("application/json"):
                return _error(start_response, "415 Unsupported Media Type", "POST a JSON body")
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                return _error(start_response, "413 Request Entity Too Large", "a body is at most %d bytes" % MAX_BODY)
            try:
                body = json.loads(environ["wsgi.input"].read(length) or b"{}")
            except ValueError:
                return _error(start_response, "400 Bad Request", "the body is not JSON")
            if not isinstance(body, dict):
                return _error(start_response, "400 Bad Request", "the body is a JSON object")
        elif method != "GET":
            return _error(start_response, "405 Method Not Allowed", "GET or POST")
        if viewer is not None and not source.allows(viewer, parts[1], method, query):
            return _error(start_response, "403 Forbidden", "this key's permissions do not allow %s %s"
                          % (method, "/".join(parts)))
        result = source.action(parts[1], method, query, body)
        if hasattr(result, "__next__"):  # a stream of Server-Sent Events
            start_response("200 OK", [("Content-Type", "text/event-stream"), ("Cache-Control", "no-store"),
                                      ("X-Accel-Buffering", "no")] + HEADERS)
            return result
        return _json(start_response, result)

    def _events(self, start_response, viewer):
        if self.clients >= self.max_clients:
            self.refused += 1
            return _error(start_response, "503 Service Unavailable",
                          "too many live pages open (%d)" % self.max_clients)
        sub = self.sampler.subscribe(size=self.queue, policy="drop")
        self.clients += 1
        start_response("200 OK", [("Content-Type", "text/event-stream"), ("Cache-Control", "no-store"),
                                  ("X-Accel-Buffering", "no")] + HEADERS)
        return self._stream(sub, self._encoded_for(viewer), viewer)

    def _stream(self, sub, first, viewer):
        """SSE: the snapshot at once, then each one the sampler emits; a comment every 15 s of quiet."""
        try:
            yield b"retry: 3000\n\nevent: snapshot\ndata: " + first + b"\n\n"
            while True:
                try:
                    event = sub.recv(timeout=15)
                except ActorError:  # the sampler is gone: the dashboard is closing
                    return
                if event is None:
                    yield b": idle\n\n"
                elif event.name == "SNAPSHOT":
                    yield b"event: snapshot\ndata: " + self._encoded_for(viewer, event.args[0]) + b"\n\n"
        finally:
            self.clients -= 1
            self.dropped += sub.dropped
            sub.close()


def _respond(start_response, status, body, kind, extra=()):
    start_response(status, [("Content-Type", kind), ("Content-Length", str(len(body))),
                            ("Cache-Control", "no-store")] + list(extra) + HEADERS)
    return [body]


def _json(start_response, value, status="200 OK"):
    return _respond(start_response, status, json.dumps(value, separators=(",", ":")).encode(), "application/json")


def _error(start_response, status, message):
    return _json(start_response, {"error": message}, status)
