"""The command line's shared vocabulary: option types that check what a person typed.

Every command builds its options from these, so that ``--bind``,
``--connect``, ``--curve``, ``--curve-server``, ``--curve-clients``,
``--timeout`` and counts mean the same and fail the same way everywhere: one
line that names the problem and the fix, exit status 2, no traceback.

* Argument types (``type=`` in argparse; they raise ``ArgumentTypeError``):
  :func:`bind_endpoint`, :func:`connect_endpoint`, :func:`positive_int`,
  :func:`count`, :func:`positive_float`, :func:`non_negative_float`,
  :func:`port`, :func:`secret_key_file`, :func:`public_key_file`,
  :func:`key_directory`, :func:`host`.
* :class:`UsageError`: raise it from a command for a wrong combination of
  options found after parsing; ``cli.main`` prints it like argparse does.
* :func:`curve_options` adds the CURVE options of a role, with one meaning:
  ``--curve SECRET`` is this program's own secret key file, ``--curve-server
  PUBLIC`` the server's public key file (connecting roles),
  ``--curve-clients DIR`` the accepted clients' public keys (binding roles).
* :func:`bind_error` turns libzmq's bind errors into that kind of line.
"""
import argparse
import errno
import ipaddress
import os
import re

import zmq

__all__ = ["UsageError", "bind_endpoint", "connect_endpoint", "positive_int", "count", "positive_float",
           "non_negative_float", "fsync_policy", "port", "port_or_any", "host", "secret_key_file", "public_key_file", "key_directory",
           "curve_options", "check_curve", "client_curve", "bind_error", "service_name", "writable_directory"]


class UsageError(ValueError):
    """A wrong option or combination of options: printed as one line, exit status 2."""


def _fail(message):
    raise argparse.ArgumentTypeError(message)


# -- numbers --------------------------------------------------------------------
def positive_int(text):
    """An int >= 1."""
    value = _number(int, text)
    if value < 1:
        _fail("%s: must be 1 or more" % text)
    return value


def count(text):
    """An int >= 0."""
    value = _number(int, text)
    if value < 0:
        _fail("%s: must be 0 or more" % text)
    return value


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def size(text):
    """A size in bytes > 0: 500, 64k, 16M, 10G (powers of 1024)."""
    match = re.fullmatch(r"(\d+)\s*([kmgt]?)i?b?", text.strip().lower())
    if not match or not int(match.group(1)):
        _fail("%r is not a size: say 500M or 10G" % text)
    return int(match.group(1)) * _UNITS[match.group(2)]


def fsync_policy(text):
    """A journal's fsync policy, the same for every command: ``never``, ``batch`` (after every write), or a
    period such as ``100ms`` or ``1s`` (a number alone is seconds); returned as the name or the seconds."""
    text = str(text).strip().lower()
    if text in ("never", "batch"):
        return text
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s)?", text)
    seconds = float(match.group(1)) * (0.001 if match.group(2) == "ms" else 1) if match else 0.0
    if not seconds > 0:
        _fail("%r: say never, batch, or a period such as 100ms or 1s" % text)
    return seconds


fsync_policy.__name__ = "fsync policy"


def positive_float(text):
    """A number of seconds > 0."""
    value = _number(float, text)
    if not value > 0 or value == float("inf"):
        _fail("%s: must be a number above 0" % text)
    return value


def non_negative_float(text):
    """A number >= 0."""
    value = _number(float, text)
    if not value >= 0 or value == float("inf"):
        _fail("%s: must be 0 or more" % text)
    return value


def port(text):
    """A TCP/UDP port, 1-65535."""
    value = _number(int, text)
    if not 1 <= value <= 65535:
        _fail("%s: a port is 1-65535" % text)
    return value


def port_or_any(text):
    """A port to listen on: 1-65535, or ``0`` or ``*`` for any free one (returned as 0)."""
    if text in ("0", "*"):
        return 0
    value = _number(int, text)
    if not 1 <= value <= 65535:
        _fail("%s: a port is 1-65535, or 0 or * for any free one" % text)
    return value


def _number(kind, text):
    try:
        return kind(text)
    except ValueError:
        _fail("%r is not %s" % (text, "a whole number" if kind is int else "a number"))


# -- names and endpoints --------------------------------------------------------
def service_name(text):
    """A Majordomo service name: 1-255 bytes of UTF-8."""
    if not text:
        _fail("a service name cannot be empty")
    if len(text.encode()) > 255:
        _fail("a service name is at most 255 bytes")
    return text


def _resolves(name):
    from gevent.socket import getaddrinfo  # the hub's resolver: parks, never blocks the loop
    try:
        getaddrinfo(name, None)
        return True
    except OSError:
        return False


def host(text):
    """An address or a host name that resolves."""
    if not text:
        _fail("the host cannot be empty")
    if not _is_ip(text) and not _resolves(text):
        _fail("cannot resolve host %r: check the name, or give an IP address" % text)
    return text


def _is_ip(text):
    try:
        ipaddress.ip_address(text.strip("[]"))
        return True
    except ValueError:
        return False


def _split(text, role):
    """``(transport, address)`` of an endpoint, after the checks every endpoint gets."""
    if "://" not in text:
        hint = "tcp://" + text if ":" in text else "tcp://127.0.0.1:" + text if text.isdigit() else None
        _fail("%r has no transport: write %s" % (text, hint or "tcp://HOST:PORT, ipc://PATH"))
    transport, address = text.split("://", 1)
    if transport == "inproc":
        _fail("%s: inproc:// works only inside one process; use tcp:// or ipc://" % text)
    if transport not in ("tcp", "ipc"):
        _fail("%s: unknown transport %r; use tcp://HOST:PORT or ipc://PATH" % (text, transport))
    if not address:
        _fail("%s: the address is missing" % text)
    return transport, address


def _host_port(text, address, bind):
    host_part, sep, port_text = address.rpartition(":")
    if not sep or not host_part:
        _fail("%s: give a host and a port, e.g. tcp://127.0.0.1:5555" % text)
    if bind and port_text in ("*", "0"):
        return host_part, None
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        _fail("%s: port %r is not 1-65535%s" % (text, port_text, " (or 0 or * for any free one)" if bind else ""))
    return host_part, int(port_text)


def bind_endpoint(text):
    """An endpoint to bind: ``tcp://HOST:PORT`` (PORT may be ``*``), ``ipc://PATH``."""
    transport, address = _split(text, "bind")
    if transport == "tcp":
        host_part, _ = _host_port(text, address, bind=True)
        if host_part != "*" and not _is_ip(host_part) and not _local_name(host_part):
            _fail("%s: %r is neither an address, a host name nor a network interface of this machine; "
                  "use tcp://127.0.0.1:PORT (this machine) or tcp://*:PORT (every interface)" % (text, host_part))
    return text


def _local_name(name):
    try:
        import psutil
        if name in psutil.net_if_addrs():
            return True
    except Exception:  # psutil without interface support: fall back on names
        pass
    return _resolves(name)


def client_endpoint(endpoint):
    """The endpoint a client on this machine connects to for a bound ``endpoint``: a wildcard host
    (``*``, ``0.0.0.0``, ``[::]``) becomes loopback; anything else is returned as it is."""
    return re.sub(r"^tcp://(\*|0\.0\.0\.0|\[::\]|::)(?=:\d+$)", "tcp://127.0.0.1", endpoint)


def connect_endpoint(text):
    """An endpoint to connect to: ``tcp://HOST:PORT`` (a host that resolves), ``ipc://PATH``."""
    transport, address = _split(text, "connect")
    if transport == "tcp":
        host_part, _ = _host_port(text, address, bind=False)
        if host_part == "*":
            _fail("%s: * means every interface, for --bind; to connect, name the host" % text)
        if not _is_ip(host_part) and not _resolves(host_part):
            _fail("%s: cannot resolve host %r; check the name, or give an IP address" % (text, host_part))
    return text


def connect_endpoints(text):
    """One endpoint to connect to, the two of a pair (``tcp://a:5570,tcp://b:5570``), or a cluster map: pairs
    separated by ``;``."""
    for pair in text.split(";"):
        for one in pair.split(","):
            connect_endpoint(one.strip())
    return text


def bind_error(endpoint, exc, any_port="port 0 or * for any free one"):
    """A :class:`UsageError` (or a RuntimeError) with words for a failed bind of ``endpoint``.

    ``any_port`` says how this command asks for any free port.
    """
    number = getattr(exc, "errno", None)
    if number == errno.EADDRINUSE:
        return UsageError("cannot bind %s: the address is in use (another program listens there); choose "
                          "another port, or %s" % (endpoint, any_port))
    if number == errno.EADDRNOTAVAIL:
        return UsageError("cannot bind %s: that address is not one of this machine's; use 127.0.0.1 "
                          "or * (every interface)" % endpoint)
    if number in (errno.EACCES, errno.EPERM):
        return UsageError("cannot bind %s: permission denied (ports below 1024 need root; ipc:// paths "
                          "need a writable directory)" % endpoint)
    if number == errno.ENODEV:
        return UsageError("cannot bind %s: no such network interface or address on this machine" % endpoint)
    return RuntimeError("cannot bind %s: %s" % (endpoint, exc))


def writable_directory(path, what="data"):
    """Make ``path`` (mode 0700) if missing and check that this user can write there; UsageError if not."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError("%s is a file, not a directory: give a directory for the %s (made if missing)"
                         % (path, what))
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise UsageError("cannot make the %s directory %s: %s" % (what, path, exc.strerror or exc)) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError("cannot write in the %s directory %s: permission denied" % (what, path))
    return path


# -- CURVE key files ------------------------------------------------------------
def _certificate(path, what):
    if not path:
        _fail("%s: the file name is empty" % what)
    if os.path.isdir(path):
        _fail("%s is a directory: give the key file inside it (%s)" % (
            path, "NAME.key_secret" if what == "secret" else "NAME.key"))
    if not os.path.exists(path):
        _fail("%s: no such file (make a keypair with 'zactors keygen')" % path)
    try:
        from zactors.actors.auth import load_keypair
        return load_keypair(path)
    except (OSError, ValueError, zmq.ZMQError) as exc:
        _fail("%s is not a CURVE certificate ('zactors keygen' writes them): %s" % (path, exc))


def secret_key_file(path):
    """A ``.key_secret`` certificate file: returns its Keypair (secret included)."""
    keys = _certificate(path, "secret")
    if keys.secret is None:
        _fail("%s holds only a public key: give the secret key file (%s_secret)" % (path, path))
    return keys


def public_key_file(path):
    """A certificate file (``.key`` or ``.key_secret``): returns its public key (z85 bytes)."""
    return _certificate(path, "public").public


def key_directory(path):
    """A directory of public key files (``*.key``): returns its path."""
    if not os.path.exists(path):
        _fail("%s: no such directory (put the clients' .key files in one)" % path)
    if not os.path.isdir(path):
        _fail("%s is a file: give the directory that holds the clients' .key files" % path)
    if not any(name.endswith(".key") for name in os.listdir(path)):
        _fail("%s holds no .key file: no client could connect (copy the clients' NAME.key files there)" % path)
    return path


def curve_options(parser, role):
    """Add the CURVE options of a ``role``: "server" (binds) or "client" (connects)."""
    parser.add_argument("--curve", metavar="SECRET", type=secret_key_file,
                        help="use CURVE with this secret key file (NAME.key_secret from 'zactors keygen')")
    if role == "server":
        parser.add_argument("--curve-clients", metavar="DIR", type=key_directory,
                            help="with --curve: accept only peers whose public key file (*.key) is in DIR "
                                 "(default: any peer that knows our public key)")
    else:
        parser.add_argument("--curve-server", metavar="PUBLIC", type=public_key_file,
                            help="use CURVE: the server's public key file (NAME.key); our own key is --curve, "
                                 "else a fresh one (for servers that accept any key)")


def check_curve(args, role):
    """The combination checks of :func:`curve_options`; raises :class:`UsageError`."""
    if role == "server":
        if args.curve_clients and not args.curve:
            raise UsageError("--curve-clients needs --curve (the server's own secret key file)")
    else:
        if args.curve and not args.curve_server:
            raise UsageError("--curve needs --curve-server (the server's public key file, NAME.key)")


def client_curve(args):
    """``(server_public, own_keys)`` from a connecting role's options, or None without CURVE."""
    check_curve(args, "client")
    if not args.curve_server:
        return None
    from zactors.actors.auth import generate_keypair
    return args.curve_server, args.curve or generate_keypair()
