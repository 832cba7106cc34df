"""CURVE keys and a ZAP authenticator actor: secure any pattern with one option.

Keys are z85-encoded 40-byte strings, stored in pyzmq's certificate format
(``NAME.key`` holds the public key, ``NAME.key_secret`` both keys), the format
``zmq.auth`` and CZMQ read.  :func:`create_keypair` writes one pair,
:func:`load_keypair` reads either file.

Securing sockets (call before ``bind``/``connect``)::

    server = generate_keypair()            # or load_keypair("server.key_secret")
    curve_server(sock, server)             # the server side: encrypts, asks ZAP
    curve_client(sock, client, server.public)

A CURVE server accepts every client holding its public key unless a ZAP
handler decides otherwise: :class:`Authenticator` is that handler, an actor
owning the REP socket bound on ``inproc://zeromq.zap.01`` of
:func:`actors.context` (one per context; creating a second one fails with a
clear error).  Its decisions are pyzmq's ``zmq.auth.Authenticator`` ones.

Authenticator commands (all reply ``None`` unless said):

=====================  ==================================================
``ALLOW addr...``      only these client IP addresses may connect
``DENY addr...``       these client IP addresses may not (not with ALLOW)
``CURVE dir``          CURVE clients whose public key is a ``*.key`` file
                       in ``dir`` (reply: the number of keys loaded)
``CURVE_ANY``          any CURVE client that knows the server key
``PLAIN {user: pw}``   PLAIN users and passwords (replaces the set)
``$STATS``             counters: ``allowed``, ``denied``, ``malformed``
=====================  ==================================================

The handle is an actor handle: safe from many greenlets of the thread that
created it, not across OS threads.  ZAP requests come from libzmq's own I/O
threads, so every socket of the context is served.
"""
from __future__ import annotations

import hmac
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from typing import NamedTuple, TypeVar

import zmq
import zmq.auth
from zmq.auth.base import Authenticator as _ZmqAuthenticator

from .actor import Actor, command
from .sockets import context

__all__ = [
    "Keypair", "generate_keypair", "create_keypair", "load_keypair", "load_public_key",
    "curve_server", "curve_client", "plain_server", "plain_client",
    "Authenticator", "ZAP_ENDPOINT",
]

log = logging.getLogger(__name__)

_S = TypeVar("_S", bound=zmq.Socket)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"

class Keypair(NamedTuple):
    """A CURVE keypair: ``public`` and ``secret`` z85 bytes (``secret`` may be None)."""

    public: bytes
    secret: bytes | None


def _require_curve():
    if not zmq.has("curve"):
        raise RuntimeError("this libzmq was built without CURVE support")


def generate_keypair() -> Keypair:
    """A fresh :class:`Keypair` (in memory)."""
    _require_curve()
    return Keypair(*zmq.curve_keypair())


def create_keypair(directory: str | os.PathLike[str], name: str) -> tuple[str, str]:
    """Write ``name.key`` (public, mode 0644) and ``name.key_secret`` (both keys, mode 0600).

    Creates ``directory`` (mode 0700) if needed; refuses to overwrite
    existing files (``FileExistsError``).  Returns ``(public_path,
    secret_path)``.  The process-wide umask is left alone (safe with other
    threads): the files are written in a private (0700) directory made
    inside ``directory``, given their modes there, then linked into place.
    """
    _require_curve()
    directory = os.fspath(directory)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    base = os.path.join(directory, name)
    public_path, secret_path = base + ".key", base + ".key_secret"
    for path in (public_path, secret_path):
        if os.path.exists(path):
            raise FileExistsError("%s already exists; choose another name or remove it" % path)
    private = tempfile.mkdtemp(prefix=".keypair-", dir=directory)   # 0700: no one else reads what is in it
    try:
        made_public, made_secret = zmq.auth.create_certificates(private, name)
        os.chmod(made_secret, 0o600)
        os.chmod(made_public, 0o644)
        os.link(made_public, public_path)        # link: fails rather than replace a file made meanwhile
        try:
            os.link(made_secret, secret_path)
        except BaseException:
            os.unlink(public_path)
            raise
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return public_path, secret_path


def load_keypair(path: str | os.PathLike[str]) -> Keypair:
    """The :class:`Keypair` in a certificate file (``secret`` is None for a ``.key``)."""
    return Keypair(*zmq.auth.load_certificate(path))


def load_public_key(path: str | os.PathLike[str]) -> bytes:
    """The public key (z85 bytes) of a certificate file."""
    return load_keypair(path).public


def _secret_of(keys):
    secret = keys.secret if isinstance(keys, Keypair) else keys
    if isinstance(secret, str):
        secret = secret.encode("ascii")
    if not secret or len(secret) != 40:
        raise ValueError("a CURVE secret key is 40 z85 characters")
    return secret


def curve_server(sock: _S, keys: Keypair | bytes | str, domain: str | None = None) -> _S:
    """Make ``sock`` a CURVE server with ``keys`` (a Keypair or the secret key).

    ``domain`` is the ZAP domain the authenticator sees (the authenticator's
    settings cover the default, empty, domain).  Call before bind.
    """
    _require_curve()
    secret = _secret_of(keys)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, zmq.curve_public(secret))
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    if domain:
        sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())
    return sock


def curve_client(sock: _S, keys: Keypair | bytes | str, server_public: bytes | str) -> _S:
    """Make ``sock`` a CURVE client with its ``keys`` talking to ``server_public``."""
    _require_curve()
    secret = _secret_of(keys)
    if isinstance(server_public, str):
        server_public = server_public.encode("ascii")
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, zmq.curve_public(secret))
    return sock


def plain_server(sock: _S, domain: str | None = None) -> _S:
    """Make ``sock`` a PLAIN server (clear-text passwords: loopback/trusted nets only)."""
    sock.setsockopt(zmq.PLAIN_SERVER, 1)
    if domain:
        sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())
    return sock


def plain_client(sock: _S, username: str, password: str) -> _S:
    """Make ``sock`` a PLAIN client."""
    sock.setsockopt(zmq.PLAIN_USERNAME, username.encode())
    sock.setsockopt(zmq.PLAIN_PASSWORD, password.encode())
    return sock


class _Policy(_ZmqAuthenticator):
    """pyzmq's ZAP decisions, counted; passwords never logged."""

    def __init__(self, stats):
        super().__init__(context(), log=log)
        self.stats = stats
        self.replied = False

    def _send_zap_reply(self, request_id, status_code, status_text, user_id="anonymous"):
        self.stats["allowed" if status_code == b"200" else "denied"] += 1
        if status_code != b"200":
            log.info("ZAP denied a connection: %s", status_text.decode(errors="replace"))
        super()._send_zap_reply(request_id, status_code, status_text, user_id)
        self.replied = True

    def _authenticate_plain(self, domain, username, password):
        users = self.passwords.get(domain or "*") or self.passwords.get("*")
        if not users:
            return False, b"No passwords defined"
        expected = users.get(username)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            return False, b"Invalid username or password"
        return True, b"OK"


class Authenticator(Actor):
    """The ZAP handler of :func:`actors.context`.  See the module docstring.

    ``curve`` (a directory of public keys or ``"*"`` for any), ``allow``,
    ``deny`` and ``passwords`` configure it at creation; the commands change
    it later.
    """

    def __init__(self, curve: str | None = None, allow: Iterable[str] = (), deny: Iterable[str] = (),
                 passwords: Mapping[str, str] | None = None) -> None:
        self._config = (curve, tuple(allow), tuple(deny), passwords)

    def setup(self) -> None:
        self.policy = _Policy(self.stats)
        self.zap = self.socket(zmq.REP)
        try:
            self.zap.bind(ZAP_ENDPOINT)
        except zmq.ZMQError as exc:
            raise RuntimeError("cannot serve ZAP on %s (%s): another authenticator already runs "
                               "in this context" % (ZAP_ENDPOINT, exc)) from None
        self.policy.zap_socket = self.zap
        curve, allow, deny, passwords = self._config
        if allow:
            self.allow(*allow)
        if deny:
            self.deny(*deny)
        if curve == "*":
            self.curve_any()
        elif curve is not None:
            self.curve(curve)
        if passwords:
            self.plain(passwords)
        self.add_reader(self.zap, self._on_zap)

    def teardown(self) -> None:
        # Closing releases the inproc name only later, in the reaper; unbind
        # now so that a new authenticator can start at once.
        try:
            self.zap.unbind(ZAP_ENDPOINT)
        except (AttributeError, zmq.ZMQError):  # setup failed before or at bind
            pass

    def _on_zap(self, frames):
        policy = self.policy
        policy.replied = False
        try:
            # pyzmq's decision is a coroutine only so that key callbacks may
            # await; ours never do, so it completes on the first step.
            step = policy.handle_zap_message(frames)
            try:
                step.send(None)
            except StopIteration:
                pass
            else:
                step.close()
                raise RuntimeError("ZAP decision did not complete synchronously")
        except Exception as exc:
            self.stats["malformed"] += 1
            log.warning("ZAP request rejected: %s", exc)
            if not policy.replied:
                policy._send_zap_reply(frames[1] if len(frames) > 1 else b"", b"500", b"Internal error")
        if not policy.replied:  # pyzmq sends nothing for < 2 frames, but REP must answer
            self.stats["malformed"] += 1
            policy._send_zap_reply(b"", b"400", b"Not enough frames")

    # -- commands -------------------------------------------------------------
    @command(reply=True)
    def allow(self, *addresses: str) -> None:
        self.policy.allow(*addresses)

    @command(reply=True)
    def deny(self, *addresses: str) -> None:
        self.policy.deny(*addresses)

    @command(reply=True)
    def curve(self, directory: str) -> int:
        if not os.path.isdir(directory):
            raise ValueError("no such directory of public keys: %s" % directory)
        self.policy.configure_curve("*", directory)
        return len(self.policy.certs.get("*", ()))

    @command(reply=True)
    def curve_any(self) -> None:
        self.policy.configure_curve("*", zmq.auth.CURVE_ALLOW_ANY)

    @command(reply=True)
    def plain(self, passwords: Mapping[str, str]) -> None:

        if not isinstance(passwords, dict):
            raise TypeError("PLAIN takes a map of user -> password")
        self.policy.passwords = {"*": {str(k): str(v) for k, v in passwords.items()}}
