"""``zactors up`` (a whole node with its dashboard) and ``zactors status`` (what its dashboard shows)."""
import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request

import gevent

from zactors.apps import contexts, exitstatus, options
from zactors.apps.stopping import wait_until_stopped

ORDER = 90
log = logging.getLogger("zactors.up")

DEFAULT_URL = "http://127.0.0.1:8765/"
#: the environment variable a dashboard token may come from (argv is readable by every user: /proc/PID/cmdline)
TOKEN_ENV = "ZACTORS_TOKEN"


def register(sub):
    up = sub.add_parser(
        "up", help="run a whole node: Majordomo, ZEPS, Clone, Harmony and the web dashboard",
        description="Run a Majordomo broker, a ZEPS broker (journal under --data), a Clone server, a Harmony "
                    "node and the web dashboard in one process, on 127.0.0.1 unless told otherwise.  Prints "
                    "where each part listens; Ctrl-C or SIGTERM stops it cleanly, the ZEPS journal synced "
                    "(exit status 0).  A config file (TOML, --config) sets the same things; options win.  "
                    "A dashboard bound off loopback needs a token: --token-file, $%s, or one is generated "
                    "and printed." % TOKEN_ENV)
    up.add_argument("--config", metavar="FILE", help="TOML config file (see docs/operations.md)")
    up.add_argument("--data", metavar="DIR", help="data directory, one node's at a time: the ZEPS journal "
                                                  "goes to DIR/zeps, the Clone map to DIR/clone (default: "
                                                  "./zactors-data)")
    up.add_argument("--mdp", type=options.bind_endpoint, metavar="ENDPOINT",
                    help="Majordomo endpoint (default: tcp://127.0.0.1:5555)")
    up.add_argument("--zeps", type=options.bind_endpoint, metavar="ENDPOINT",
                    help="ZEPS endpoint (default: tcp://127.0.0.1:5570)")
    up.add_argument("--fsync", metavar="POLICY", help="ZEPS journal: 'never', 'batch' or a period such as 100ms")
    up.add_argument("--ack", choices=("written", "synced"),
                    help="ZEPS: acknowledge (PING-OK, delivery) once a message is written (survives a crash; "
                         "default) or synced (fsynced: survives a power loss)")
    up.add_argument("--clone-port", metavar="PORT", type=options.port_or_any,
                    help="Clone base port P: snapshot P, publisher P+1, collector P+2; 0 or * for any free ones "
                         "(default: 5556)")
    up.add_argument("--clone-host", type=options.host, metavar="HOST", help="Clone address (default: 127.0.0.1)")
    up.add_argument("--name", metavar="NAME", help="Harmony node name (default: from its UUID)")
    up.add_argument("--beacon", action="store_true", help="Harmony: discover peers by UDP beacon (default: off)")
    up.add_argument("--interface", metavar="IFACE", help="Harmony: beacon interface")
    up.add_argument("--peer", action="append", type=options.connect_endpoint, metavar="ENDPOINT",
                    help="Harmony: a known peer's tcp://HOST:PORT (may be repeated)")
    up.add_argument("--group", action="append", metavar="GROUP", help="Harmony: join GROUP (may be repeated)")
    up.add_argument("--web", metavar="HOST:PORT",
                    help="dashboard address (default: 127.0.0.1:8765; port 0 or * for any free one)")
    _token_options(up, "dashboard token, at least 16 characters (required off 127.0.0.1/::1/localhost; "
                        "generated if not given)")
    up.add_argument("--intensity", type=options.count, metavar="N",
                    help="restarts of parts the node allows within --period; one more and it stops, exit "
                         "status 1 (default: 5)")
    up.add_argument("--period", type=options.positive_float, metavar="SECONDS",
                    help="the window --intensity counts restarts in (default: 10)")
    up.add_argument("--demo", action="store_true",
                    help="drive demo traffic through the node (Majordomo echo, ZEPS orders and sensors, "
                         "Clone /demo/ keys) to see the dashboard move")
    for part in ("mdp", "zeps", "clone", "harmony", "web"):
        up.add_argument("--no-" + part, action="store_true", help="do not run the %s part" % part)
    up.set_defaults(func=run_up)

    status = sub.add_parser(
        "status", help="print what a node's dashboard shows (its JSON API)",
        description="Ask a running `zactors up` (its dashboard) for the state of every part and print it: "
                    "one line per part, then its rates.  Exit status 0; 3 if nothing answers at --url.")
    status.add_argument("--url", metavar="URL", type=dashboard_url,
                        help="dashboard address (default: the context's dashboard, else %s)" % DEFAULT_URL)
    contexts.context_option(status, "dashboard", "url", DEFAULT_URL)
    _token_options(status, "the dashboard's token, if it has one")
    status.add_argument("--json", action="store_true", help="print the API's JSON as it is")
    status.add_argument("--timeout", type=options.positive_float, default=5.0,
                        help="seconds to wait for the answer (default: %(default)s)")
    status.set_defaults(func=run_status)


def _token_options(parser, what):
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--token-file", metavar="FILE",
                       help="%s: read from FILE (its first line; keep it mode 0600), or set $%s" % (what, TOKEN_ENV))
    given.add_argument("--token", metavar="TOKEN",
                       help="the same on the command line, where every user of the machine can read it "
                            "(ps, /proc/PID/cmdline): prefer --token-file or $%s" % TOKEN_ENV)


def token_from(args):
    """The token: ``--token-file``, ``--token`` or ``$ZACTORS_TOKEN``, in that order; None if none is given."""
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise options.UsageError("cannot read the token file %s: %s" % (args.token_file, exc)) from None
        if not token:
            raise options.UsageError("the token file %s is empty" % args.token_file)
        return token
    if args.token is not None:
        return args.token
    return os.environ.get(TOKEN_ENV) or None


def _warn_argv_token(args):
    if args.token is not None:
        log.warning("--token is readable by every user of this machine (ps, /proc/PID/cmdline); "
                    "use --token-file FILE or $%s", TOKEN_ENV)


def dashboard_url(text):
    """An http(s)://HOST[:PORT][/PATH] URL (argparse type)."""
    import argparse
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as exc:
        raise argparse.ArgumentTypeError("%r is not a URL: %s" % (text, exc)) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError("%r is not a dashboard URL: write http://HOST:PORT/ (e.g. %s)"
                                         % (text, DEFAULT_URL))
    return text


def config_from(args):
    """DEFAULTS, then --config, then the options given."""
    from zactors.apps.up import DEFAULTS, load_config, merge
    config = load_config(args.config) if args.config else merge(DEFAULTS, {})
    given = {}

    def put(part, key, value):
        if value is not None:
            given.setdefault(part, {})[key] = value
    if args.data is not None:
        given["data"] = args.data
    put("node", "intensity", args.intensity)
    put("node", "period", args.period)
    put("majordomo", "bind", args.mdp)
    put("zeps", "bind", args.zeps)
    put("zeps", "fsync", args.fsync)
    put("zeps", "ack", args.ack)
    put("clone", "port", args.clone_port)
    put("clone", "host", args.clone_host)
    put("harmony", "name", args.name)
    put("harmony", "beacon", True if args.beacon else None)
    put("harmony", "interface", args.interface)
    put("harmony", "endpoints", args.peer)
    put("harmony", "groups", args.group)
    put("dashboard", "bind", args.web)
    put("dashboard", "token", token_from(args))
    for flag, part in (("no_mdp", "majordomo"), ("no_zeps", "zeps"), ("no_clone", "clone"),
                       ("no_harmony", "harmony"), ("no_web", "dashboard")):
        if getattr(args, flag):
            put(part, "enabled", False)
    return merge(config, given)


def run_up(args):
    from zactors.apps.up import ConfigError, Up, parse_ack, parse_period, split_host_port
    config = config_from(args)
    parse_period(config["zeps"]["fsync"])  # wrong settings fail before anything starts
    parse_ack(config["zeps"]["ack"])
    if config["dashboard"]["enabled"]:
        split_host_port(config["dashboard"]["bind"])
    token = config["dashboard"]["token"]
    if token is not None and len(token) < 16:
        raise ConfigError("a dashboard token is at least 16 characters")
    _warn_argv_token(args)
    node = Up(config).start()
    started = time.monotonic()
    demo = None
    served = None
    try:
        if args.demo:
            from zactors.apps.dashboard.demo import DemoTraffic
            demo = DemoTraffic(node)
        for part, address in node.listening():
            print("%-10s %s" % (part, address), flush=True)
        print("up: Ctrl-C stops", flush=True)
        wait_until_stopped(node.failed)  # a signal, or the supervision tree gave up
    finally:
        if demo is not None:
            demo.stop()
        try:
            served = node.summary()
        finally:
            node.stop()
            print("up: stopped after %.0f s%s" % (time.monotonic() - started, "; served: %s" % served if served else ""),
                  file=sys.stderr)
    if node.failure is not None:
        print("zactors: error: %s" % node.failure, file=sys.stderr)
        return exitstatus.FAILED
    return exitstatus.OK


def demo(out, node):
    """Supervision: a part of the node is killed, and the node's supervisor brings it back"""
    from zactors.actors.testkit import crash
    events = node.tree.subscribe(policy="drop")
    library = logging.getLogger("zactors")
    quiet = library.getEffectiveLevel() >= logging.WARNING  # not -v: the death and restart are told here
    saved = library.level
    if quiet:  # the killed actor's traceback, and the node's warning about it, are no news in the demo
        library.setLevel(logging.CRITICAL)
    try:
        keys = node.clone.call("INFO", timeout=5)["keys"]
        crash(node.clone, "killed by the demo")
        killed = time.monotonic()
        out("killed the node's Clone server (holding %d key(s)) as a bug in it would" % keys)
        deadline = killed + 10
        while True:  # the supervisor says when the new incarnation has started (its map recovered)
            event = events.recv(max(0.0, deadline - time.monotonic()))
            if event is None:
                raise TimeoutError("the Clone server was not restarted within 10 s")
            if event.name == "CHILD_STARTED" and event.args[0] == "clone":
                break
        back = node.tree.proxy("clone").call("INFO", timeout=5)
        out("the supervisor restarted it: serving again %.0f ms after its death, its %d key(s) recovered "
            "from its journal" % ((time.monotonic() - killed) * 1000, back["keys"]))
    finally:
        library.setLevel(saved)
        events.close()


def fetch_status(url, token=None, timeout=5.0):
    """The ``api/status`` JSON of the dashboard at ``url`` (blocks; urllib)."""
    request = urllib.request.Request(url.rstrip("/") + "/api/status")
    if token:
        request.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def _fetch_interruptibly(url, token, timeout):
    """:func:`fetch_status` on the hub's threadpool: urllib blocks the whole process, so Ctrl-C would wait
    for ``timeout``; here only this greenlet waits, and the signal interrupts it."""
    def fetch():
        try:
            return fetch_status(url, token, timeout), None
        except Exception as exc:  # raised below, in this greenlet (the pool would print it)
            return None, exc

    snapshot, error = gevent.get_hub().threadpool.apply(fetch)
    if error is not None:
        raise error
    return snapshot


def run_status(args):
    _warn_argv_token(args)
    try:
        snapshot = _fetch_interruptibly(args.url, token_from(args), args.timeout)
    except urllib.error.HTTPError as exc:
        try:
            reason = json.load(exc).get("error", exc.reason)
        except ValueError:
            reason = exc.reason
        print("zactors status: error: %s answered %d: %s" % (args.url, exc.code, reason), file=sys.stderr)
        return exitstatus.REFUSED if exc.code in (401, 403) else exitstatus.FAILED
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        print("zactors status: error: no dashboard answered at %s (%s); is `zactors up` running?" % (args.url, reason),
              file=sys.stderr)
        return exitstatus.NO_ANSWER
    if args.json:
        print(json.dumps(snapshot, indent=2))
        return exitstatus.OK
    for name, part in snapshot["sources"].items():
        print("%-10s %-5s %s" % (name, part["status"], part["summary"]))
        rates = ", ".join("%s %s" % (_number(part["now"].get(key, 0)), label)
                          for key, label in part.get("charted", {}).items())
        if rates:
            print("%-10s       %s" % ("", rates))
    return exitstatus.OK


def _number(x):
    return ("%d" % x) if float(x).is_integer() else ("%.1f" % x)
