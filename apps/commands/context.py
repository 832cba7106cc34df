"""``zactors context add|list|show|remove|select``: named endpoints and keys for the client commands.

See :mod:`zactors.apps.contexts` for where they are kept and how a client
command picks one.
"""
import os
import sys

from zactors.apps import contexts, exitstatus, options
from zactors.apps.commands.up import dashboard_url

ORDER = 90  # no demo part

_FIELDS = (("mdp", "Majordomo broker"), ("zeps", "ZEPS broker"), ("clone", "Clone server"), ("dashboard", "dashboard"),
           ("curve_server", "server public key"), ("curve", "own secret key"))


def register(sub):
    context = sub.add_parser(
        "context", help="name a node's endpoints and keys once, use them with --context",
        description="Keep a node's endpoints and CURVE key files under a name, so that client commands "
                    "(mdp worker|request|mmi, zeps publish|subscribe|streams, clone get|set|del|watch|dump, "
                    "status) need neither --connect (--url) nor the key options. A command takes each setting from its own "
                    "option, else from --context NAME, else from $%s, else from the selected context, else "
                    "its built-in default. Stored in %s (mode 0600)."
                    % (contexts.ENVIRONMENT, contexts.store_path()))
    cmds = context.add_subparsers(dest="context_command", metavar="SUBCOMMAND")
    context.set_defaults(func=lambda args: context.print_help() or exitstatus.USAGE)

    add = cmds.add_parser("add", help="add (or with --force replace) a context",
                          description="Add context NAME. Give at least one endpoint. Endpoints and key files "
                                      "are checked now (key files are kept as absolute paths).",
                          epilog="Exit status: 0 added, 1 the contexts file cannot be written, 2 wrong option "
                                 "or NAME exists.")
    add.add_argument("name", type=contexts.check_name, help="the context's name")
    add.add_argument("--mdp", metavar="ENDPOINT", type=options.connect_endpoint,
                     help="the Majordomo broker, as mdp commands' --connect")
    add.add_argument("--zeps", metavar="ENDPOINT", type=options.connect_endpoints,
                     help="the ZEPS broker (a pair: tcp://A:P,tcp://B:P), as zeps commands' --connect")
    add.add_argument("--clone", metavar="ENDPOINT", action="append", type=options.connect_endpoint,
                     help="the Clone server, as clone commands' --connect (twice for a pair, primary first)")
    add.add_argument("--dashboard", metavar="URL", type=dashboard_url,
                     help="the node's dashboard, as status's --url")
    add.add_argument("--curve", metavar="SECRET", type=_key_path(options.secret_key_file),
                     help="our own secret key file (NAME.key_secret), as the client commands' --curve")
    add.add_argument("--curve-server", metavar="PUBLIC", type=_key_path(options.public_key_file),
                     help="the servers' public key file (NAME.key), as the client commands' --curve-server")
    add.add_argument("--select", action="store_true", help="also make it the selected context")
    add.add_argument("--force", action="store_true", help="replace a context of that name")
    add.set_defaults(func=run_add)

    listing = cmds.add_parser("list", help="list the contexts, the selected one marked *",
                              description="Print one context a line: a * for the selected one, its name and "
                                          "endpoints.")
    listing.set_defaults(func=run_list)

    show = cmds.add_parser("show", help="print a context's settings",
                           description="Print NAME's settings, one 'setting: value' a line (default: the "
                                       "context client commands would use now).",
                           epilog="Exit status: 0 shown, 1 no context in use, 2 no such context.")
    show.add_argument("name", nargs="?", type=contexts.check_name, help="a context (default: the one in use)")
    show.set_defaults(func=run_show)

    remove = cmds.add_parser("remove", help="delete a context", description="Delete context NAME.")
    remove.add_argument("name", type=contexts.check_name)
    remove.set_defaults(func=run_remove)

    select = cmds.add_parser("select", help="make a context the default of client commands",
                             description="Make NAME the context client commands use without --context "
                                         "($%s still wins); --none: no default context."
                                         % contexts.ENVIRONMENT)
    which = select.add_mutually_exclusive_group(required=True)
    which.add_argument("name", nargs="?", type=contexts.check_name)
    which.add_argument("--none", action="store_true", help="select no context")
    select.set_defaults(func=run_select)


def _key_path(check):
    """An argparse type: ``check`` the key file, keep its absolute path."""
    def key_path(path):
        check(path)
        return os.path.abspath(path)
    key_path.__name__ = check.__name__
    return key_path


def run_add(args):
    settings = {"mdp": args.mdp, "zeps": args.zeps, "clone": args.clone, "dashboard": args.dashboard,
                "curve": args.curve, "curve_server": args.curve_server}
    if not (args.mdp or args.zeps or args.clone or args.dashboard):
        raise options.UsageError("give at least one address: --mdp, --zeps, --clone or --dashboard")
    if args.curve and not args.curve_server:
        raise options.UsageError("--curve needs --curve-server (the server's public key file, NAME.key)")
    contexts.add(args.name, settings, replace=args.force, make_selected=args.select)
    print("context %r %s%s" % (args.name, "saved" if args.force else "added",
                               " and selected" if args.select else ""), file=sys.stderr)
    return exitstatus.OK


def _endpoints(context):
    parts = []
    for pattern in contexts.PATTERNS:
        value = context.get(pattern)
        if value:
            parts.append("%s=%s" % (pattern, ",".join(value) if isinstance(value, list) else value))
    if context.get("curve_server"):
        parts.append("curve")
    return " ".join(parts)


def run_list(args):
    data = contexts.load()
    if not data["contexts"]:
        print("no contexts yet: 'zactors context add NAME --mdp ENDPOINT ...' adds one", file=sys.stderr)
        return exitstatus.OK
    width = max(len(name) for name in data["contexts"])
    for name in sorted(data["contexts"]):
        mark = "*" if name == data["selected"] else " "
        print("%s %-*s  %s" % (mark, width, name, _endpoints(data["contexts"][name])))
    return exitstatus.OK


def run_show(args):
    name = args.name or os.environ.get(contexts.ENVIRONMENT) or contexts.selected()
    if name is None:
        print("zactors context show: error: no context in use (give NAME, set $%s, or 'zactors context select "
              "NAME')" % contexts.ENVIRONMENT, file=sys.stderr)
        return exitstatus.FAILED
    context = contexts.get(name)
    print("name: %s" % name)
    for field, _ in _FIELDS:
        value = context.get(field)
        if value:
            print("%s: %s" % (field, " ".join(value) if isinstance(value, list) else value))
    return exitstatus.OK


def run_remove(args):
    contexts.remove(args.name)
    print("context %r removed" % args.name, file=sys.stderr)
    return exitstatus.OK


def run_select(args):
    contexts.select(None if args.none else args.name)
    print("no context selected" if args.none else "context %r selected" % args.name, file=sys.stderr)
    return exitstatus.OK
