"""Per-stream permissions for a CURVE broker: which client keys may publish or subscribe where.

A permissions file has one grant per line; ``#`` at the start of a line or
after a space starts a comment (z85 keys may contain ``#``)::

    # KEY                                       ACTIONS            STREAMS
    rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7     publish            orders.*
    clients/alice.key                           publish,subscribe  *
    *                                           subscribe          public.*

``KEY`` is a client's public key (40 z85 characters), a certificate file
(``.key`` or ``.key_secret``, relative to the permissions file), or ``*``
for any client the broker's authenticator accepted.  ``ACTIONS`` is
``publish``, ``subscribe``, ``create`` (a new stream by ATTACH: without it
a key uses only the streams that exist) and ``consume`` (join, create and
delete consumer groups), comma-separated.  ``STREAMS`` is a shell
glob of stream names.  Grants add up; what no line grants is refused (the
broker answers INVALID and counts ``refused``).

The broker learns a peer's key from the ZAP ``User-Id`` of its ATTACH, so an
:class:`~zactors.actors.auth.Authenticator` must run in the broker's process
(``CURVE dir`` or ``CURVE_ANY``; pyzmq's policy makes the User-Id the z85
public key).  libzmq gives message properties only to a ``copy=False``
receive, so a broker with permissions reads its ROUTER through a zero-copy
reader of the reactor (``add_reader(..., copy=False)``), somewhat slower
than its C receive.
"""
import fnmatch
import logging
import os
import re

from zactors.actors.auth import load_public_key

__all__ = ["Permissions", "PermissionsError", "ACTIONS"]

log = logging.getLogger(__name__)

ACTIONS = ("publish", "subscribe", "create", "consume")
_COMMENT = re.compile(r"(^|\s)#.*")
_Z85 = re.compile(r"[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}\Z")


class PermissionsError(ValueError):
    """A permissions file that cannot be used; the message names the line."""


class Permissions:
    """Grants of (key or ``*``, actions, stream glob).  Plain object; see the module docstring."""

    __slots__ = ("grants",)

    def __init__(self, grants=()):
        self.grants = []
        for key, actions, streams in grants:
            self.grant(key, actions, streams)

    def grant(self, key, actions, streams):
        """Allow ``key`` (z85 str/bytes, or ``*``) the ``actions`` on streams matching the glob ``streams``."""
        if isinstance(key, bytes):
            key = key.decode("ascii")
        if key != "*" and not _Z85.match(key):
            raise PermissionsError("not a z85 public key: %r" % key)
        if isinstance(actions, str):
            actions = [a.strip() for a in actions.split(",") if a.strip()]
        bad = [a for a in actions if a not in ACTIONS]
        if bad or not actions:
            raise PermissionsError("actions must be publish, consume, subscribe and/or create, got %r" % (actions,))
        if isinstance(streams, str):
            streams = streams.encode()
        regex = re.compile(fnmatch.translate(streams.decode("latin-1")).encode("latin-1"), re.DOTALL)
        self.grants.append((key, frozenset(actions), regex.match))

    @classmethod
    def load(cls, path):
        """Read a permissions file; :class:`PermissionsError` (naming the line) if it is wrong."""
        base = os.path.dirname(os.path.abspath(path))
        perms = cls()
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = _COMMENT.sub("", line).strip()  # a z85 key may hold '#': comments follow a space
                if not line:
                    continue
                fields = line.split()
                if len(fields) != 3:
                    raise PermissionsError("%s:%d: expected KEY ACTIONS STREAMS, got %d field(s)"
                                           % (path, number, len(fields)))
                key, actions, streams = fields
                if key != "*" and not _Z85.match(key):
                    try:
                        key = load_public_key(os.path.join(base, key)).decode("ascii")
                    except (OSError, ValueError) as exc:
                        raise PermissionsError("%s:%d: %s is neither a z85 key nor a readable certificate (%s)"
                                               % (path, number, fields[0], exc)) from None
                try:
                    perms.grant(key, actions, streams)
                except PermissionsError as exc:
                    raise PermissionsError("%s:%d: %s" % (path, number, exc)) from None
        return perms

    def allows(self, key, action, stream):
        """True if ``key`` (z85 str, or None when unknown) may do ``action`` on ``stream`` (bytes)."""
        for who, actions, match in self.grants:
            if action in actions and (who == "*" or who == key) and match(stream):
                if who == "*" and not key:
                    continue  # '*' means any authenticated client, not an unauthenticated one
                return True
        return False

    def may_attach(self, key, stream):
        """True if ``key`` may do anything at all on ``stream``."""
        return any(self.allows(key, action, stream) for action in ACTIONS)
