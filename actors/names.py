"""Names: reach an actor by name, whichever incarnation of it is running now.

A :class:`Names` maps names to actors.  :data:`registry` is the process's
own; every :class:`~zactors.actors.supervisor.Supervisor` also keeps one
for its children, and registers a child in :data:`registry` too when its
spec says ``register=True``.  A supervisor that restarts a child puts the
new incarnation under the same name.

A :class:`Proxy` is a name that behaves like an actor: each ``call`` or
``send`` goes to the incarnation registered at that moment (and so do reads
of its public attributes, such as ``endpoint``).  A call in
flight when that incarnation dies raises :class:`~zactors.actors.ActorDied`
(its pipe fails every pending call); the next call waits for the restarted
one, up to the call's ``timeout`` (or the proxy's ``wait``), and then
reaches it.  A name nobody holds any more raises :class:`NoSuchName`.

Servers that bind endpoints rebind the same ones when restarted: they close
their sockets with linger 0 (the kernel's default) and bind through
:meth:`Actor.bind <zactors.actors.Actor.bind>`, which retries while the old
listener's port is still being released.  Clients connected to the old
incarnation reconnect by themselves (ZeroMQ reconnects); state that must
survive a restart lives in a journal the new incarnation recovers from.

Thread safety: a registry, its proxies and the actors in it belong to the
thread whose hub runs those actors (usually the main thread).  Lookups and
calls park only the calling greenlet.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gevent.event import Event as _Flag

from .errors import ActorError, ActorTimeout

if TYPE_CHECKING:
    from .actor import Actor
    from .events import Subscription

__all__ = ["Names", "Proxy", "NoSuchName", "registry"]

#: seconds a proxy waits for a restarting actor when the call gives no timeout
PROXY_WAIT = 5.0


class NoSuchName(ActorError, LookupError):
    """No actor is registered under this name (never was, or its holder gave it up)."""


class _Entry:
    __slots__ = ("actor", "changed")

    def __init__(self, actor: Actor | None) -> None:
        self.actor = actor  # None while its holder restarts it
        self.changed = _Flag()  # set (and replaced) at every change: what waiting lookups park on


class Names:
    """A name -> actor map whose lookups wait for a restarting actor.  See the module docstring."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def register(self, name: str, actor: Actor | None, replace: bool = False) -> None:
        """Hold ``name`` for ``actor`` (``None``: held while its holder restarts it).

        Raises ``ValueError`` if a live actor holds it already, or it is held
        for a restart, unless ``replace`` (what the holder itself passes).
        """
        entry = self._entries.get(name)
        if entry is None:
            self._entries[name] = _Entry(actor)
            return
        held = entry.actor
        if not replace and held is not actor and (held is None or held.alive):
            raise ValueError("the name %r is held by %s" % (name, "a restarting actor" if held is None else held))
        entry.actor = actor
        self._changed(entry)

    def unregister(self, name: str, actor: Actor | None = None) -> None:
        """Give ``name`` up (only if ``actor``, when given, holds it); waiting lookups raise :class:`NoSuchName`."""
        entry = self._entries.get(name)
        if entry is None or (actor is not None and entry.actor is not actor):
            return
        del self._entries[name]
        self._changed(entry)

    def whereis(self, name: str) -> Actor | None:
        """The live actor under ``name`` now, or ``None``.  Never blocks."""
        entry = self._entries.get(name)
        if entry is None or entry.actor is None or not entry.actor.alive:
            return None
        return entry.actor

    def lookup(self, name: str, timeout: float | None = PROXY_WAIT) -> Actor:
        """The live actor under ``name``, waiting up to ``timeout`` seconds while it restarts.

        Parks the calling greenlet.  Raises :class:`NoSuchName` if nobody
        holds the name, :class:`~zactors.actors.ActorTimeout` if no live
        actor holds it by the deadline.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            entry = self._entries.get(name)
            if entry is None:
                raise NoSuchName("no actor is registered as %r" % name)
            actor = entry.actor
            if actor is not None and actor.alive:
                return actor
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0 or not entry.changed.wait(remaining):
                raise ActorTimeout("%r is not running (restarting?) after %ss" % (name, timeout))

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def proxy(self, name: str, wait: float = PROXY_WAIT) -> Proxy:
        """A :class:`Proxy` for ``name`` in this registry."""
        return Proxy(self, name, wait)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _changed(entry: _Entry) -> None:
        flag, entry.changed = entry.changed, _Flag()
        flag.set()


class Proxy:
    """An actor reached by name: calls go to the incarnation running now.

    ``wait`` is how long a call or send waits for a restarting actor when
    it gives no ``timeout`` of its own.  Safe from many greenlets of the
    registry's thread.
    """

    __slots__ = ("names", "name", "wait")

    def __init__(self, names: Names, name: str, wait: float = PROXY_WAIT) -> None:
        self.names = names
        self.name = name
        self.wait = wait

    @property
    def actor(self) -> Actor:
        """The incarnation running now (waits up to ``wait`` while it restarts)."""
        return self.names.lookup(self.name, self.wait)

    def call(self, verb: str, *args: Any, timeout: float | None = None) -> Any:
        """``Actor.call`` on the incarnation running now.

        ``timeout`` covers both the wait for a restarting actor and the
        reply.  A call in flight when the actor dies raises
        :class:`~zactors.actors.ActorDied`.
        """
        if timeout is None:
            return self.names.lookup(self.name, self.wait).call(verb, *args)
        start = time.monotonic()
        actor = self.names.lookup(self.name, timeout)
        return actor.call(verb, *args, timeout=max(0.0, timeout - (time.monotonic() - start)))

    def send(self, verb: str, *args: Any) -> None:
        """``Actor.send`` to the incarnation running now."""
        self.names.lookup(self.name, self.wait).send(verb, *args)

    def subscribe(self, size: int | None = None, policy: str = "block",
                  max_bytes: int | None = None) -> Subscription:
        """The events of the incarnation running now (it ends with that incarnation)."""
        return self.actor.subscribe(size, policy, max_bytes)

    @property
    def alive(self) -> bool:
        return self.names.whereis(self.name) is not None

    def __getattr__(self, attr: str) -> Any:
        """Public attributes (``endpoint``, ...) read from the incarnation running now; never blocks.

        ``AttributeError`` while nobody runs under the name.
        """
        actor = None if attr.startswith("_") else self.names.whereis(self.name)
        if actor is None:
            raise AttributeError("%r has no attribute %r (no actor runs as %r now)" % (self, attr, self.name))
        return getattr(actor, attr)

    def __repr__(self) -> str:
        return "<Proxy %r -> %r>" % (self.name, self.names.whereis(self.name))


#: the process's registry (see :class:`Names`)
registry = Names()
