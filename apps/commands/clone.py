"""Clone commands: ``zactors clone server|get|set|del|watch|dump`` and the Clone part of the demo."""
import logging
import sys
import time

import gevent

from .mdp import _until_signal

ORDER = 40
log = logging.getLogger("zactors.clone")

DEFAULT_PORT = 5556


def register(sub):
    clone = sub.add_parser("clone", help="Clone (12/CHP): a shared key-value map, with Binary Star failover",
                           description="Clone: a cluster-wide key-value map (12/CHP) with snapshots, subtrees, "
                                       "ttls and a primary/backup server pair.")
    cmds = clone.add_subparsers(dest="clone_command", metavar="SUBCOMMAND")
    clone.set_defaults(func=lambda args: clone.print_help() or 2)

    server = cmds.add_parser("server", help="run a Clone server until Ctrl-C",
                             description="Serve snapshots on PORT, updates on PORT+1, collect on PORT+2; "
                                         "a pair also exchanges Binary Star state on PORT+3.")
    server.add_argument("--host", default="127.0.0.1", help="interface to bind, * for all (default: %(default)s)")
    server.add_argument("--port", type=int, default=DEFAULT_PORT, help="base port P (default: %(default)s)")
    role = server.add_mutually_exclusive_group()
    role.add_argument("--primary", action="store_true", help="primary of a Binary Star pair (needs --peer)")
    role.add_argument("--backup", action="store_true", help="backup of a Binary Star pair (needs --peer)")
    server.add_argument("--peer", metavar="tcp://HOST:PORT", help="the other server's base endpoint")
    server.add_argument("--hugz", type=float, default=0.2, help="seconds between HUGZ (default: %(default)s)")
    server.add_argument("--heartbeat", type=float, default=0.2,
                        help="seconds between Binary Star state messages (default: %(default)s)")
    server.add_argument("--dialect", choices=("spec", "guide"), default="spec",
                        help="how KVSYNC/HUGZ are filled: 'spec' or 'guide' (the Guide's clonecli6 clients)")
    server.add_argument("--curve", metavar="KEYFILE", help="serve CURVE with this secret certificate")
    server.add_argument("--stats", type=float, default=0, metavar="SECONDS",
                        help="log state, sequence and counters every SECONDS (default: never)")
    server.set_defaults(func=run_server)

    get = cmds.add_parser("get", help="print one key's value")
    get.add_argument("key")
    _client(get)
    get.set_defaults(func=run_get)

    set_ = cmds.add_parser("set", help="set a key and wait for the server to publish it")
    set_.add_argument("key")
    set_.add_argument("value")
    set_.add_argument("--ttl", type=float, help="seconds until the server deletes it")
    _client(set_)
    set_.set_defaults(func=run_set)

    delete = cmds.add_parser("del", help="delete a key")
    delete.add_argument("key")
    _client(delete)
    delete.set_defaults(func=run_del)

    watch = cmds.add_parser("watch", help="print every change until Ctrl-C")
    _client(watch, subtree=True)
    watch.set_defaults(func=run_watch)

    dump = cmds.add_parser("dump", help="print the whole map (or a subtree), one key=value a line")
    _client(dump, subtree=True)
    dump.set_defaults(func=run_dump)


def _client(parser, subtree=False):
    parser.add_argument("--connect", action="append", metavar="tcp://HOST:PORT",
                        help="server base endpoint; twice for a pair, primary first "
                             "(default: tcp://127.0.0.1:%d)" % DEFAULT_PORT)
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for a server (default: %(default)s)")
    parser.add_argument("--curve", metavar="KEYFILE", help="connect with CURVE, using this secret certificate")
    parser.add_argument("--curve-server", metavar="KEYFILE", help="with --curve: the servers' public certificate")
    if subtree:
        parser.add_argument("--subtree", default="", help="only keys under /this/ (default: all)")


def _peer_endpoints(text):
    from zactors.patterns.clone.server import endpoints

    head, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not head.startswith("tcp://"):
        raise ValueError("--peer must be tcp://HOST:PORT, got %r" % text)
    return endpoints(head[len("tcp://"):], int(port))


def run_server(args):
    from zactors.patterns.clone.server import CloneServer

    role = "primary" if args.primary else "backup" if args.backup else None
    if role and not args.peer:
        raise ValueError("--%s needs --peer tcp://HOST:PORT" % role)
    if args.peer and not role:
        raise ValueError("--peer needs --primary or --backup")
    keys = None
    if args.curve:
        from zactors.actors.auth import load_keypair
        keys = load_keypair(args.curve)
        if keys.secret is None:
            raise ValueError("%s holds no secret key (use the .key_secret file)" % args.curve)
    server = CloneServer(args.port, host=args.host, role=role, peer=_peer_endpoints(args.peer) if args.peer else None,
                         hugz=args.hugz, heartbeat=args.heartbeat, dialect=args.dialect, curve=keys)
    log.info("clone server (%s) on %s; Ctrl-C stops", role or "alone", ", ".join(e for e in server.endpoints if e))
    ticker = gevent.spawn(_log_stats, server, args.stats) if args.stats > 0 else None
    try:
        _until_signal()
    finally:
        if ticker is not None:
            ticker.kill()
        server.destroy()
    return 0


def _log_stats(server, every):
    while True:
        gevent.sleep(every)
        info = server.call("INFO", timeout=5)
        log.info("%s sequence=%d keys=%d pending=%d | %s", info["state"], info["sequence"], info["keys"],
                 info["pending"], " ".join("%s=%d" % kv for kv in sorted(info["counters"].items())))


def _open(args):
    from zactors.patterns.clone.client import Clone

    servers = args.connect or ["tcp://127.0.0.1:%d" % DEFAULT_PORT]
    curve = server_public = None
    if args.curve:
        if not args.curve_server:
            raise ValueError("--curve needs --curve-server (the servers' public key file)")
        from zactors.actors.auth import load_keypair, load_public_key
        curve, server_public = load_keypair(args.curve), load_public_key(args.curve_server)
    clone = Clone(servers, subtree=getattr(args, "subtree", "") or "", timeout=min(args.timeout, 1.0),
                  curve=curve, server_public=server_public, name="clone-cli")
    if not clone.wait_synced(args.timeout):
        clone.destroy()
        raise ValueError("no snapshot from %s within %ss (is a server running there?)" % (", ".join(servers),
                                                                                          args.timeout))
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
        print("zactors: %s: no such key" % args.key, file=sys.stderr)
        return 1
    print(_text(value))
    return 0


def run_set(args):
    clone = _open(args)
    try:
        seq = clone.set(args.key, args.value, ttl=args.ttl, wait=args.timeout)
    finally:
        clone.destroy()
    log.info("%s set at sequence %d", args.key, seq)
    return 0


def run_del(args):
    clone = _open(args)
    try:
        seq = clone.delete(args.key, wait=args.timeout)
    finally:
        clone.destroy()
    log.info("%s deleted at sequence %d", args.key, seq)
    return 0


def run_dump(args):
    clone = _open(args)
    try:
        for key, value in sorted(clone.items()):
            print("%s=%s" % (_text(key), _text(value)))
    finally:
        clone.destroy()
    return 0


def run_watch(args):
    clone = _open(args)
    clone.on_change(lambda key, value, seq: print("%d %s=%s" % (seq, _text(key), _text(value)) if value
                                                  else "%d %s deleted" % (seq, _text(key)), flush=True))
    try:
        _until_signal()
    finally:
        clone.destroy()
    return 0


def demo(out):
    """Clone (12/CHP): two clients share a map, a key expires, a Binary Star pair fails over"""
    from zactors.patterns.clone.client import Clone
    from zactors.patterns.clone.server import CloneServer

    primary = CloneServer(role="primary", name="primary")
    backup = CloneServer(role="backup", name="backup", peer=primary.endpoints)
    snapshot, publisher, _collector, state = backup.endpoints
    primary.call("PEER", snapshot, publisher, state)
    servers = [primary.endpoints[:3], backup.endpoints[:3]]
    alice = Clone(servers, name="alice")
    bob = Clone(servers, name="bob")
    try:
        alice.wait_synced(5); bob.wait_synced(5)
        alice.set("/demo/colour", "blue", wait=5)
        _wait(lambda: bob.get("/demo/colour") == b"blue")
        out("alice set /demo/colour=blue; bob sees %s" % _text(bob.get("/demo/colour", b"?")))
        bob.set("/demo/session", "token", ttl=0.5, wait=5)
        out("bob set /demo/session with a 0.5 s ttl; alice sees it: %s" % ("/demo/session" in alice))
        _wait(lambda: "/demo/session" not in alice and "/demo/session" not in bob)
        out("0.5 s later the primary expired it, and both clients dropped it: %s" % ("/demo/session" not in alice))
        _wait(lambda: backup.call("INFO")["sequence"] == primary.call("INFO")["sequence"])
        for i in range(100):
            alice.set("/demo/n", str(i))
        alice.set("/demo/n", "100", wait=5)
        started = time.monotonic()
        primary.destroy()
        out("primary stopped at sequence %d; ..." % alice.sequence)
        _wait(lambda: backup.call("INFO")["state"] == "active" and alice.server == servers[1][0], 10)
        bob.set("/demo/after", "failover")  # bob may still be re-syncing: its snapshot will carry it
        _wait(lambda: alice.get("/demo/after") == b"failover" == bob.get("/demo/after"), 5)
        out("backup took over in %.2f s; alice and bob agree on %d keys, /demo/n=%s"
            % (time.monotonic() - started, len(alice), _text(alice.get("/demo/n", b"?"))))
    finally:
        alice.destroy(); bob.destroy(); backup.destroy(); primary.destroy()


def _wait(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("clone demo: timed out")
        gevent.sleep(0.01)
