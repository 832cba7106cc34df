"""Connection contexts: named sets of endpoints and CURVE key files, as the NATS CLI keeps them.

A context names where a node's brokers listen (``mdp``, ``zeps``, ``clone``),
its dashboard (``dashboard``, for ``zactors status``) and which key files to use (``curve_server``, the server's public key file;
``curve``, our own secret key file), so that a user stops repeating them::

    zactors context add prod --mdp tcp://10.0.0.5:5555 --zeps tcp://10.0.0.5:5570 --select
    zactors zeps publish orders new '{"id": 1}'        # uses prod's --connect
    zactors mdp request --context dev echo hello        # or ZACTORS_CONTEXT=dev

A client command takes each setting from, first to last: its own option
(``--connect``, ``--curve``, ``--curve-server``); the context named by
``--context``, else by ``ZACTORS_CONTEXT``, else the selected one; the
command's built-in default.  A context that lacks the endpoint a command
needs is an error naming the context, never a silent fallback.

The store is one JSON file, ``$XDG_CONFIG_HOME/zactors/contexts.json``
(``~/.config/zactors`` without it), mode 0600 in a 0700 directory, replaced
atomically on every change.  Key files are kept as absolute paths, not
copied.  Plain functions; they block on small file reads and writes; not
safe for two processes changing the store at the same instant (the last
write wins, the file is never torn).
"""
import argparse
import json
import os
import re
import tempfile

from .options import UsageError

__all__ = ["PATTERNS", "KEYS", "ContextError", "store_path", "load", "save", "names", "get", "add", "remove",
           "select", "selected", "connect_options", "resolve"]

#: the parts a context holds an address for (clone: a list, primary first; dashboard: a URL)
PATTERNS = ("mdp", "zeps", "clone", "dashboard")
#: the key-file settings, named as the client options that take them
KEYS = ("curve", "curve_server")
ENVIRONMENT = "ZACTORS_CONTEXT"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


class ContextError(RuntimeError):
    """The contexts file cannot be read or written (exit status 1)."""


def store_path():
    """The contexts file's path (it may not exist yet)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "zactors", "contexts.json")


def load():
    """The whole store: ``{"selected": NAME or None, "contexts": {NAME: {...}}}``."""
    path = store_path()
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {"selected": None, "contexts": {}}
    except (OSError, ValueError) as exc:
        raise ContextError("cannot read %s: %s (fix or remove that file)" % (path, exc)) from None
    if not isinstance(data, dict) or not isinstance(data.get("contexts", {}), dict):
        raise ContextError("cannot read %s: not a zactors contexts file (fix or remove it)" % path)
    data.setdefault("contexts", {})
    data.setdefault("selected", None)
    return data


def save(data):
    """Write the store atomically: 0600 file in a 0700 directory."""
    path = store_path()
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
        fd, temporary = tempfile.mkstemp(prefix=".contexts.", dir=folder)  # mkstemp makes it 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=2, sort_keys=True)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as exc:
        raise ContextError("cannot write %s: %s" % (path, exc.strerror or exc)) from None


def names():
    return sorted(load()["contexts"])


def check_name(text):
    """A context name (argparse type): letters, digits, ``_.-``, at most 64."""
    if not _NAME.match(text):
        raise argparse.ArgumentTypeError("%r is not a context name: use letters, digits, '_', '.' and '-' "
                                         "(at most 64, starting with a letter or digit)" % text)
    return text


def _missing(name, where):
    known = names()
    return UsageError("no context %r%s (%s)" % (
        name, where, "known: %s" % ", ".join(known) if known else "add one with 'zactors context add %s ...'" % name))


def get(name):
    """The settings of context ``name``; UsageError if there is none."""
    context = load()["contexts"].get(name)
    if context is None:
        raise _missing(name, "")
    return context


def add(name, settings, replace=False, make_selected=False):
    """Store context ``name`` (``settings``: PATTERNS and KEYS to values); UsageError if it exists."""
    data = load()
    if name in data["contexts"] and not replace:
        raise UsageError("context %r exists: add --force to replace it, or 'zactors context remove %s'"
                         % (name, name))
    data["contexts"][name] = {k: v for k, v in settings.items() if v}
    if make_selected:
        data["selected"] = name
    save(data)


def remove(name):
    """Delete context ``name`` (and the selection, if it was selected)."""
    data = load()
    if name not in data["contexts"]:
        raise _missing(name, "")
    del data["contexts"][name]
    if data["selected"] == name:
        data["selected"] = None
    save(data)


def select(name):
    """Make ``name`` the context client commands use by default (None: no default)."""
    data = load()
    if name is not None and name not in data["contexts"]:
        raise _missing(name, "")
    data["selected"] = name
    save(data)


def selected():
    return load()["selected"]


# -- client commands ------------------------------------------------------------
def connect_options(parser, pattern, default, role="the broker", many=False, pair=False):
    """Add ``--connect``, ``--context`` and the client CURVE options of ``pattern`` to ``parser``.

    ``default``: the built-in endpoint.  ``many``: ``--connect`` may repeat
    (args.connect is then a list).  ``pair``: it may name a pair, ``A,B``.
    :func:`resolve` fills them in after parsing.
    """
    from . import options
    parser.add_argument("--connect", action="append" if many else "store", metavar="ENDPOINT",
                        type=options.connect_endpoints if pair else options.connect_endpoint,
                        help="%s endpoint%s (default: the context's %s endpoint, else %s)"
                             % (role, "; repeat for a pair, primary first" if many else
                                "; a pair: PRIMARY,BACKUP; pairs: P1,B1;P2,B2" if pair else "", pattern, default))
    context_option(parser, pattern, "connect", [default] if many else default)
    options.curve_options(parser, "client")


def context_option(parser, pattern, dest, default):
    """Add ``--context``: :func:`resolve` then fills ``args.<dest>`` (when not given) from the context's
    ``pattern`` address, else ``default``."""
    parser.add_argument("--context", metavar="NAME", type=check_name,
                        help="take addresses and keys from this context ('zactors context list'; "
                             "default: $%s, else the selected one)" % ENVIRONMENT)
    parser.set_defaults(context_pattern=pattern, context_dest=dest, connect_default=default)


def resolve(args):
    """Fill the connect and CURVE options a command was not given from its context; returns its name.

    Does nothing for commands without :func:`connect_options`.  Raises
    UsageError for an unknown context or one without this pattern's endpoint.
    """
    pattern = getattr(args, "context_pattern", None)
    if pattern is None:
        return None
    name, where = args.context, ""
    if name is None and os.environ.get(ENVIRONMENT):
        name, where = os.environ[ENVIRONMENT], " (from $%s)" % ENVIRONMENT
    data = load()
    if name is None:
        name, where = data["selected"], " (the selected one)"
    dest = args.context_dest
    if name is None:
        if getattr(args, dest) is None:
            setattr(args, dest, args.connect_default)
        return None
    context = data["contexts"].get(name)
    if context is None:
        raise _missing(name, where)
    if getattr(args, dest) is None:
        address = context.get(pattern)
        if isinstance(args.connect_default, list) and isinstance(address, str):
            address = [address]
        if not address:
            raise UsageError("context %r%s has no %s address: give --%s, or re-add the context with "
                             "--%s ('zactors context add %s --force ...' replaces it)" % (name, where, pattern, dest,
                                                                                        pattern, name))
        setattr(args, dest, address)
    if hasattr(args, "curve_server"):
        _keys(args, context, name)
    return name


def _keys(args, context, name):
    from . import options
    if args.curve_server is None and args.curve is None and context.get("curve_server"):
        try:
            args.curve_server = options.public_key_file(context["curve_server"])
            if context.get("curve"):
                args.curve = options.secret_key_file(context["curve"])
        except argparse.ArgumentTypeError as exc:
            raise UsageError("context %r: %s" % (name, exc)) from None
