"""Clone commands: ``zactors clone server|get|set|del|watch|dump`` and the Clone part of the demo."""
import logging
import sys
import time

import gevent
import zmq

from zactors.apps import contexts, exitstatus, options
from zactors.apps.stopping import serve, wait_until_stopped

ORDER = 40
log = logging.getLogger("zactors.clone")

DEFAULT_PORT = 5556
STATUS = ("Exit status: 0 done, 1 failed (no such key, not published in time), 2 wrong option, "
          "3 no server answered, 4 the server refused our key.")


def register(sub):
    clone = sub.add_parser("clone", help="Clone (12/CHP): a shared key-value map, with Binary Star failover",
                           description="Clone: a cluster-wide key-value map (12/CHP) with snapshots, subtrees, "
                                       "ttls and a primary/backup server pair.")
    cmds = clone.add_subparsers(dest="clone_command", metavar="SUBCOMMAND")
    clone.set_defaults(func=lambda args: clone.print_help() or exitstatus.USAGE)

    server = cmds.add_parser("server", help="run a Clone server until Ctrl-C",
                             description="Serve snapshots on PORT, updates on PORT+1, collect on PORT+2; "
                                         "a pair also exchanges Binary Star state on PORT+3. With --port 0 "
                                         "each is a free port; clients need only the snapshot endpoint (the "
                                         "server tells them the others). "
                                         "Ctrl-C or SIGTERM stops it (exit status 0).")
    server.add_argument("--host", default="127.0.0.1", type=options.host,
                        help="interface to bind, * for all (default: %(default)s)")
    server.add_argument("--port", type=options.port_or_any, default=DEFAULT_PORT,
                        help="base port P (P, P+1, P+2), 0 or * for free ones (default: %(default)s)")
    role = server.add_mutually_exclusive_group()
    role.add_argument("--primary", action="store_true", help="primary of a Binary Star pair (needs --peer)")
    role.add_argument("--backup", action="store_true", help="backup of a Binary Star pair (needs --peer)")
    server.add_argument("--peer", metavar="ENDPOINT", type=options.connect_endpoint,
                        help="the other server's base endpoint, tcp://HOST:PORT")
    server.add_argument("--hugz", type=options.positive_float, default=0.2,
                        help="seconds between HUGZ (default: %(default)s)")
    server.add_argument("--heartbeat", type=options.positive_float, default=0.2,
                        help="seconds between Binary Star state messages (default: %(default)s)")
    server.add_argument("--dialect", choices=("spec", "guide"), default="spec",
                        help="how KVSYNC/HUGZ are filled: 'spec' or 'guide' (the Guide's clonecli6 clients)")
    server.add_argument("--persist", metavar="DIR",
                        help="keep the map in a journal in DIR; a restarted server starts from it")
    server.add_argument("--fsync", type=options.fsync_policy, default="100ms", metavar="POLICY",
                        help="with --persist: 'never', 'batch' (after every write) or a period such as 100ms, as "
                             "for every journal (default: %(default)s)")
    server.add_argument("--ack", choices=("written", "synced"), default="written",
                        help="with --persist: publish an update once the journal holds it written (survives a "
                             "crash of the server) or synced (fsynced: survives a power loss; use with "
                             "--fsync batch) (default: %(default)s)")
    options.curve_options(server, "server")
    server.add_argument("--stats", type=options.non_negative_float, default=0, metavar="SECONDS",
                        help="log state, sequence and counters every SECONDS (default: never)")
    server.set_defaults(func=run_server)

    get = cmds.add_parser("get", help="print one key's value", description="Print KEY's value.", epilog=STATUS)
    get.add_argument("key")
    _client(get)
    get.set_defaults(func=run_get)

    set_ = cmds.add_parser("set", help="set a key and wait for the server to publish it",
                           description="Set KEY to VALUE and wait until the server publishes it.", epilog=STATUS)
    set_.add_argument("key")
    set_.add_argument("value")
    set_.add_argument("--ttl", type=options.positive_float, help="seconds until the server deletes it")
    _client(set_)
    set_.set_defaults(func=run_set)

    delete = cmds.add_parser("del", help="delete a key", description="Delete KEY and wait until the server "
                             "publishes the deletion; a KEY the map does not hold is an error (exit status 1).",
                             epilog=STATUS)
    delete.add_argument("key")
    _client(delete)
    delete.set_defaults(func=run_del)

    watch = cmds.add_parser("watch", help="print every change until Ctrl-C",
                            description="Print each change as 'SEQUENCE KEY=VALUE' or 'SEQUENCE KEY deleted' "
                                        "until Ctrl-C.", epilog=STATUS)
    _client(watch, subtree=True)
    watch.set_defaults(func=run_watch)

    dump = cmds.add_parser("dump", help="print the whole map (or a subtree), one key=value a line",
                           description="Print the map, or the keys under --subtree, as KEY=VALUE lines.",
                           epilog=STATUS)
    _client(dump, subtree=True)
    dump.set_defaults(func=run_dump)


def _client(parser, subtree=False):
    contexts.connect_options(parser, "clone", "tcp://127.0.0.1:%d" % DEFAULT_PORT, role="the server's snapshot",
                             many=True)
    parser.add_argument("--timeout", type=options.positive_float, default=3.0,
                        help="seconds to wait for a server (default: %(default)s)")
    if subtree:
        parser.add_argument("--subtree", default="", help="only keys under /this/ (default: all)")


def _base(endpoint):
    """``(host, port)`` of a tcp://HOST:PORT base endpoint."""
    if not endpoint.startswith("tcp://"):
        raise options.UsageError("%s: Clone servers take tcp://HOST:PORT (P, P+1, P+2 are its ports)" % endpoint)
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    if int(port) > 65532:
        raise options.UsageError("%s: a Clone server uses ports P to P+3; choose P <= 65532" % endpoint)
    return host, int(port)


def run_server(args):
    from zactors.patterns.clone.server import CloneServer, endpoints

    role = "primary" if args.primary else "backup" if args.backup else None
    if role and not args.peer:
        raise options.UsageError("--%s needs --peer tcp://HOST:PORT (the other server)" % role)
    if args.peer and not role:
        raise options.UsageError("--peer needs --primary or --backup")
    options.check_curve(args, "server")
    auth = None
    if args.curve_clients:
        from zactors.actors.auth import Authenticator
        auth = Authenticator(curve=args.curve_clients)
    try:
        server = CloneServer(args.port or None, host=args.host, role=role,
                             peer=endpoints(*_base(args.peer)) if args.peer else None, hugz=args.hugz,
                             heartbeat=args.heartbeat, dialect=args.dialect, curve=args.curve,
                             persist=args.persist, fsync=args.fsync, ack=args.ack)
    except BaseException as exc:
        if auth is not None:
            auth.destroy()
        if isinstance(exc, zmq.ZMQError):
            raise options.bind_error("tcp://%s:%d-%d" % (args.host, args.port, args.port + 3), exc,
                                     "another --port") from None
        raise
    log.info("clone server (%s) on %s; Ctrl-C stops", role or "alone", ", ".join(e for e in server.endpoints if e))
    def summary(info):
        counters = info.get("counters", {})
        return "clone server stopped: %s at sequence %d, %d key(s), %d update(s), %d snapshot(s)" % (
            info.get("state", "?"), info.get("sequence", 0), info.get("keys", 0),
            counters.get("updates", 0), counters.get("snapshots", 0))

    return serve(server, summary, describe=_describe, every=args.stats, cleanup=(auth,))


def _describe(info):
    """One line of the server's INFO, for --stats."""
    return "%s sequence=%d keys=%d pending=%d | %s" % (
        info["state"], info["sequence"], info["keys"], info["pending"],
        " ".join("%s=%d" % kv for kv in sorted(info["counters"].items())))


class _NoServer(RuntimeError):
    exit_status = exitstatus.NO_ANSWER


def _open(args):
    from zactors.actors.auth import curve_client
    from zactors.actors.monitor import probe
    from zactors.patterns.clone.client import Clone
    from zactors.patterns.clone.protocol import check_subtree

    servers = args.connect  # snapshot endpoints: the client learns the others from each server
    try:
        subtree = check_subtree(getattr(args, "subtree", "") or "")
    except ValueError as exc:
        raise options.UsageError("--subtree: %s" % exc) from None
    curve = options.client_curve(args)
    secure = None if curve is None else (lambda sock: curve_client(sock, curve[1], curve[0]))
    if not any(probe(s, secure, timeout=min(1.0, args.timeout), peer="the server at %s" % s) for s in servers):
        raise _NoServer("no server answered at %s" % ", ".join(servers))
    clone = Clone(servers, subtree=subtree, timeout=min(args.timeout, 1.0), name="clone-cli",
                  curve=None if curve is None else curve[1], server_public=None if curve is None else curve[0])
    if not clone.wait_synced(args.timeout):
        clone.destroy()
        raise RuntimeError("no snapshot from %s within %ss (a passive backup only answers after a failover)"
                           % (", ".join(servers), args.timeout))
    return clone


def _text(value):
    try:
        return value.decode()
    except UnicodeDecodeError:
        return repr(value)


def run_get(args):
    clone = _open(args)
    try:
        value = clone.get(args.key)
    finally:
        clone.destroy()
    if value is None:
        print("zactors clone get: error: %s: no such key" % args.key, file=sys.stderr)
        return exitstatus.FAILED
    print(_text(value))
    return exitstatus.OK


class _Refused(RuntimeError):
    exit_status = exitstatus.REFUSED


def _update(args, value, ttl=None, must_exist=False):
    """Publish KEY=value, wait for its KVPUB: its sequence (one clear line if the server refuses it); None
    when ``must_exist`` and the synced map has no such key."""
    from zactors.patterns.clone.client import UpdateRefused

    clone = _open(args)
    try:
        if must_exist and args.key not in clone:
            return None
        return clone.set(args.key, value, ttl=ttl, wait=args.timeout)
    except UpdateRefused as exc:
        raise _Refused("%s: the server refused the update: %s" % (args.key, exc)) from None
    finally:
        clone.destroy()


def run_set(args):
    seq = _update(args, args.value, args.ttl)
    log.info("%s set at sequence %d", args.key, seq)
    return exitstatus.OK


def run_del(args):
    seq = _update(args, b"", must_exist=True)
    if seq is None:  # the synced map holds no such key: nothing to delete
        print("zactors clone del: error: %s: no such key" % args.key, file=sys.stderr)
        return exitstatus.FAILED
    log.info("%s deleted at sequence %d", args.key, seq)
    return exitstatus.OK


def run_dump(args):
    clone = _open(args)
    try:
        for key, value in sorted(clone.items()):
            print("%s=%s" % (_text(key), _text(value)))
    finally:
        clone.destroy()
    return exitstatus.OK


def run_watch(args):
    clone = _open(args)
    seen = [0]

    def show(key, value, seq):
        seen[0] += 1
        print("%d %s=%s" % (seq, _text(key), _text(value)) if value else "%d %s deleted" % (seq, _text(key)),
              flush=True)
    clone.on_change(show)
    signum = None
    try:
        signum = wait_until_stopped()
    finally:
        clone.destroy()
        print("watch stopped: %d change(s)" % seen[0], file=sys.stderr)
    return 128 + signum if signum else exitstatus.OK


def demo(out, node):
    """Clone (12/CHP): two clients share the node's map, a key expires; a Binary Star pair fails over"""
    from zactors.apps.options import client_endpoint
    from zactors.patterns.clone.client import Clone
    from zactors.patterns.clone.server import CloneServer

    servers = [tuple(client_endpoint(e) for e in node.clone.endpoints[:3])]
    alice = Clone(servers, name="alice")
    bob = Clone(servers, name="bob")
    try:
        alice.wait_synced(5); bob.wait_synced(5)
        out("the node's Clone server on %s" % " ".join(servers[0]))
        alice.set("/demo/colour", "blue", wait=5)
        _wait(lambda: bob.get("/demo/colour") == b"blue")
        out("alice set /demo/colour=blue; bob sees %s" % _text(bob.get("/demo/colour", b"?")))
        bob.set("/demo/session", "token", ttl=0.5, wait=5)
        out("bob set /demo/session with a 0.5 s ttl; alice sees it: %s" % ("/demo/session" in alice))
        _wait(lambda: "/demo/session" not in alice and "/demo/session" not in bob)
        out("0.5 s later the node's server expired it, and both clients dropped it: %s"
            % ("/demo/session" not in alice))
    finally:
        alice.destroy(); bob.destroy()

    primary = CloneServer(role="primary", name="primary")
    backup = CloneServer(role="backup", name="backup", peer=primary.endpoints)
    snapshot, publisher, _collector, state = backup.endpoints
    primary.call("PEER", snapshot, publisher, state)
    servers = [primary.endpoints[:3], backup.endpoints[:3]]
    carol = Clone(servers, name="carol")
    dave = Clone(servers, name="dave")
    try:
        carol.wait_synced(5); dave.wait_synced(5)
        out("a Binary Star pair of its own (primary %s, backup %s); carol and dave use it"
            % (servers[0][0], servers[1][0]))
        _wait(lambda: backup.call("INFO")["state"] == "passive")
        for i in range(100):
            carol.set("/demo/n", str(i))
        carol.set("/demo/n", "100", wait=5)
        _wait(lambda: backup.call("INFO")["sequence"] == primary.call("INFO")["sequence"])
        started = time.monotonic()
        primary.destroy()
        out("primary stopped at sequence %d; ..." % carol.sequence)
        _wait(lambda: backup.call("INFO")["state"] == "active" and carol.server == servers[1][0], 10)
        dave.set("/demo/after", "failover", wait=5)
        _wait(lambda: carol.get("/demo/after") == b"failover", 5)
        out("backup took over in %.2f s; carol and dave agree on %d keys, /demo/n=%s"
            % (time.monotonic() - started, len(carol), _text(carol.get("/demo/n", b"?"))))
    finally:
        carol.destroy(); dave.destroy(); backup.destroy(); primary.destroy()


def _wait(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("clone demo: timed out")
        gevent.sleep(0.01)
