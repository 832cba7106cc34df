"""Kernel commands: ``zactors web`` (embedding example) and the actors part of the demo."""
import logging
import sys
import time

import gevent

from zactors.apps import exitstatus, options
from zactors.apps.stopping import wait_until_stopped

from zactors.actors import Actor, command
from zactors.actors.heartbeat import Heartbeat

ORDER = 10
log = logging.getLogger("zactors.web")


def register(sub):
    web = sub.add_parser("web", help="serve the embedding example: a gevent web server whose handlers call an actor",
                         description="Serve apps/web.py: GET /hit/KEY counts a hit in a Tally actor, GET /top "
                                     "lists the counts. Ctrl-C or SIGTERM stops it (exit status 0).")
    web.add_argument("--host", default="127.0.0.1", type=options.host,
                     help="address to listen on (default: %(default)s)")
    web.add_argument("--port", type=options.port_or_any, default=8080,
                     help="port to listen on, 0 or * for any free one (default: %(default)s)")
    web.set_defaults(func=run_web)


def run_web(args):
    from zactors.apps.web import serve

    try:
        server, tally = serve(args.host, args.port)
    except OSError as exc:
        raise options.bind_error("%s:%d" % (args.host, args.port), exc, "--port 0 or * for any free one") from None
    log.info("serving on http://%s:%d/  (try /hit/home and /top; Ctrl-C stops)", args.host, server.server_port)
    try:
        wait_until_stopped()
    finally:
        server.stop()
        tally.destroy()
        print("web server stopped after %d request(s)" % server.counted.requests, file=sys.stderr)
    return exitstatus.OK


class _Echo(Actor):
    @command(reply=True)
    def echo(self, value):
        return value


def demo(out, node):
    """Actors at work: concurrent calls, events, liveness, an embedded web server"""
    echo = _Echo()
    try:
        calls = [gevent.spawn(echo.call, "ECHO", i, timeout=10) for i in range(1000)]
        gevent.joinall(calls, raise_error=True)
        out("1000 greenlets called one actor at once; each got its own reply: %s"
            % (sorted(g.value for g in calls) == list(range(1000))))
        n, started = 5000, time.perf_counter()
        for i in range(n):
            echo.call("ECHO", i)
        out("pipe round trips, one caller: %.0f/s" % (n / (time.perf_counter() - started)))
    finally:
        echo.destroy()

    hb = Heartbeat(evasive=0.2, expired=0.5)
    try:
        hb.send("TOUCH", "peer-7")
        out("heartbeat: touched peer-7 once, then silence...")
        for _ in range(2):
            event = hb.recv_event(timeout=5)
            out("  %-8s %s" % (event.name, event.args[0]))
    finally:
        hb.destroy()

    from gevent.socket import create_connection
    from zactors.apps.web import serve

    server, tally = serve(port=0)
    try:
        def get(path):
            conn = create_connection(("127.0.0.1", server.server_port))
            conn.sendall(b"GET %s HTTP/1.0\r\nHost: demo\r\n\r\n" % path.encode())
            data = conn.makefile("rb").read()
            conn.close()
            return data.split(b"\r\n\r\n", 1)[1].decode()

        gevent.joinall([gevent.spawn(get, "/hit/%s" % ("home", "about")[i % 2]) for i in range(100)], raise_error=True)
        out("web: 100 concurrent requests through one actor -> %s" % get("/top"))
    finally:
        server.stop()
        tally.destroy()
