"""``zactors peer``: Harmony (ZRE v2) peers: a group chat and a list of who is out there."""
import logging
import sys

import gevent

from zactors.apps import exitstatus, options
from zactors.apps.stopping import Interrupted
from zactors.apps.terminal import lines

__all__ = ["register", "demo", "ORDER"]

ORDER = 30

log = logging.getLogger("zactors.peer")


def register(subparsers):
    peer = subparsers.add_parser(
        "peer", help="Harmony peers that speak ZRE v2 (Zyre, pyre)",
        description="Join a ZRE peer network: UDP beacons on the LAN, and/or known endpoints where "
                    "broadcast is blocked (docker, cloud, VPN).")
    sub = peer.add_subparsers(dest="peer_command", metavar="COMMAND")
    peer.set_defaults(func=lambda args: peer.print_help() or exitstatus.USAGE)

    def discovery(parser):
        parser.add_argument("--interface", metavar="IF", help="beacon interface, by name or address "
                            "(default: the first broadcast-capable one)")
        parser.add_argument("--endpoint", metavar="ENDPOINT", action="append", default=[],
                            type=options.connect_endpoint,
                            help="a known node's endpoint, e.g. tcp://192.0.2.7:50123 (repeatable)")
        parser.add_argument("--no-beacon", dest="beacon", action="store_false",
                            help="no UDP beacons: discover through --endpoint only")
        parser.add_argument("--host", type=options.host, help="the address other nodes reach this one at "
                            "(default: the beacon interface's address, else 127.0.0.1)")
        parser.add_argument("--port", type=options.port_or_any, default=0,
                            help="the TCP port other nodes reach this one at, as --port is for every server "
                                 "(default: 0 or *, any free one)")
        parser.add_argument("--beacon-port", type=options.port, default=5670,
                            help="UDP beacon port (default: 5670)")

    chat = sub.add_parser(
        "chat", help="a group chat over SHOUT (type lines; Ctrl-D leaves)",
        description="Join a group chat: each line you type is SHOUTed to the peers in the group; what they "
                    "shout, and who comes and goes, is printed. Ctrl-D leaves (exit status 0), Ctrl-C too "
                    "(130). A line typed while nobody else is in the group is not sent, and you are told.")
    chat.add_argument("--name", required=True, help="your name on the network")
    chat.add_argument("--group", default="CHAT", help="the chat group (default: CHAT)")
    discovery(chat)
    chat.set_defaults(func=run_chat)

    listing = sub.add_parser(
        "list", help="listen for a while, then list the peers found",
        description="Listen for --wait seconds (beacons on the LAN and/or the nodes given with --endpoint), "
                    "then print each peer found: id, name, address and groups. Exit status 1 if none.")
    listing.add_argument("--wait", type=options.positive_float, default=3.0,
                         help="seconds to listen (default: 3)")
    discovery(listing)
    listing.set_defaults(func=run_list)


def _node(args, name):
    from zactors.patterns.harmony import Node
    return Node(name, interface=args.interface, port=args.beacon_port, beacon=args.beacon,
                endpoints=args.endpoint, host=args.host, tcp_port=args.port or None)


def run_chat(args):
    sys.stdout.reconfigure(line_buffering=True)  # a chat shows each line as it comes, even through a pipe
    node = _node(args, args.name).start()
    sent = received = 0
    try:
        node.join(args.group)
        print("%s at %s in group %s; type to talk, Ctrl-D to leave" % (args.name, node.endpoint, args.group))

        def show(event):
            nonlocal received
            if event.type == "SHOUT" and event.group == args.group:
                received += 1
                print("%s: %s" % (event.name, b" ".join(event.frames).decode(errors="replace")))
            elif event.type == "ENTER":
                print("* %s entered (%s)" % (event.name, event.address))
            elif event.type == "EXIT":
                print("* %s left" % event.name)
            elif event.type == "JOIN" and event.group == args.group:
                print("* %s joined %s" % (event.name, event.group))
            elif event.type == "WHISPER":
                received += 1
                print("%s (private): %s" % (event.name, b" ".join(event.frames).decode(errors="replace")))

        node.on(None, show)
        for line in lines(sys.stdin.fileno()):
            text = line.decode(errors="replace")
            if not text:
                continue
            if not node.peers_by_group(args.group):
                print("* nobody else is in %s yet: not sent" % args.group)
                continue
            node.shout(args.group, text)
            sent += 1
    finally:
        node.stop()
        print("%s left %s: %d line(s) sent, %d received" % (args.name, args.group, sent, received), file=sys.stderr)
    return exitstatus.OK


def run_list(args):
    if not args.beacon and not args.endpoint:
        raise options.UsageError("--no-beacon without --endpoint cannot find anyone: give a known node "
                                 "with --endpoint tcp://HOST:PORT, or keep beacons on")
    found = []
    with _node(args, "zactors-list") as node:
        try:
            gevent.sleep(args.wait)  # listening time asked for by the user
        except Interrupted:
            print("zactors peer list: interrupted; %d peer(s) seen so far" % len(node.peers()), file=sys.stderr)
            raise
        found = [node.peer(p) for p in node.peers()]
    peers = [p for p in found if p]
    if not peers:
        print("no peers found in %gs%s" % (args.wait, "" if args.beacon else " at %s" % ", ".join(args.endpoint)))
        return exitstatus.FAILED
    print("%-32s  %-16s  %-28s  %s" % ("ID", "NAME", "ADDRESS", "GROUPS"))
    for p in sorted(peers, key=lambda p: p["name"]):
        print("%-32s  %-16s  %-28s  %s" % (p["id"], p["name"], p["address"], ",".join(p["groups"])))
    return exitstatus.OK


def demo(out, node):
    """Harmony: ZRE peers join the node by endpoint (gossip), join a group, shout and whisper"""
    from zactors.patterns.harmony import Node

    hub = node.harmony
    # Loopback only, beacons off: no UDP broadcast leaves this machine.
    alice = Node("alice", beacon=False, endpoints=[hub.endpoint]).start()
    bob = Node("bob", beacon=False, endpoints=[alice.endpoint]).start()
    carol = Node("carol", beacon=False, endpoints=[bob.endpoint]).start()
    nodes = (alice, bob, carol)
    try:
        out("the node's Harmony at %s; alice knows the node, bob knows alice, carol knows bob" % hub.endpoint)
        with gevent.Timeout(5, False):
            while not all(len(n.peers()) >= 3 for n in nodes + (hub,)):
                gevent.sleep(0.01)
        for each in (hub,) + nodes:
            out("  %-5s sees %s" % (each.name, ", ".join(sorted(each.peer_name(p) or "?" for p in each.peers()))))
        alice.join("news")
        carol.join("news")
        with gevent.Timeout(5, False):
            while len(hub.peers_by_group("news")) < 2:
                gevent.sleep(0.01)
        hub.shout("news", b"hello, news readers")
        for each in (alice, carol):
            event = _next(each, "SHOUT")
            out("  %s got SHOUT from %s in %s: %s" % (each.name, event.name, event.group, event.frames[0].decode()))
        alice.whisper(carol.id, b"just for you", b"(two frames)")
        event = _next(carol, "WHISPER")
        out("  carol got WHISPER from %s: %s" % (event.name, b" ".join(event.frames).decode()))
        bob.stop()
        event = _next(alice, "EXIT")
        out("  bob stopped; alice saw %s %s at once" % (event.type, event.name))
    finally:
        for each in nodes:
            each.stop()


def _next(node, kind, timeout=5):
    with gevent.Timeout(timeout, False):
        for event in node.events():
            if event.type == kind:
                return event
    raise RuntimeError("%s: no %s event within %ss" % (node.name, kind, timeout))
