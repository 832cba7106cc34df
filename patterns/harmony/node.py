"""Harmony node: the application's handle on a ZRE v2 peer (see :mod:`.engine` for how it works).

:class:`Node` configures and starts a :class:`~.engine.NodeActor`, sends it
the commands of :mod:`.commands`, and turns its events into
:class:`~.events.NodeEvent` values.
"""
from __future__ import annotations

import logging
import time
import uuid as _uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Self

import gevent

from zactors.actors.errors import ActorError
from zactors.actors.heartbeat import Liveness
from zactors.actors.values import to_bytes

from . import commands as verbs
from .endpoints import peer_endpoint
from .engine import NodeActor
from .events import NodeEvent, convert, stop_event

__all__ = ["Node"]

log = logging.getLogger(__name__)


class Node:
    """A Harmony (ZRE v2) node.

    ``Node(name, headers, interface=None, port=5670, ...)`` configures;
    :meth:`start` joins the network (and returns the node); :meth:`stop`
    leaves it politely.  Options (keyword): ``beacon`` (UDP discovery on
    ``port``, default True), ``endpoints`` (known peers' endpoints),
    ``host`` (the address peers reach us at; default the beacon interface's
    address, else 127.0.0.1), ``interval`` (beacon seconds), ``evasive`` and
    ``expired`` (seconds: 5 and 30 as Zyre), ``gossip`` (True),
    ``beacon_refresh`` (False), ``hwm`` and ``backlog`` (per-peer queues),
    ``max_peers`` (1000: peers and probes at once), ``max_message`` (16 MiB:
    a peer sending a larger frame is disconnected unread; ``ZMQ_MAXMSGSIZE``), ``tcp_port`` (the
    port peers reach us at; default a free one in 49152-65535, as Zyre: give one for a stable
    endpoint, e.g. when peers know it without beacons).  ``endpoints`` must be
    ``tcp://host:port`` (ValueError otherwise).  ``uuid`` (16 bytes, 32 hex
    digits or a ``uuid.UUID``; default a new random one) is the node's
    identity: a node restarted with its predecessor's (and ``tcp_port``) is
    the same peer to the others, who see it leave (EXIT) and come back
    (ENTER) under the same id, as ``zactors up`` restarts its Harmony part.

    Every method may be called from many greenlets of the thread that
    started the node (as web handlers do), not from other OS threads.
    Events come from :meth:`recv` / :meth:`events` (an iterator), or, after
    :meth:`on`, to callbacks run in one dispatcher greenlet: use one or the
    other.  ``whisper``/``shout`` do not wait for the network; they block
    only while a slow peer's backlog is full (see the module docstring).
    """

    def __init__(self, name: str | None = None, headers: Mapping[str, str] | None = None,
                 interface: str | None = None, port: int = 5670, *, beacon: bool = True,
                 endpoints: Iterable[str] = (), host: str | None = None, interval: float = 1.0,
                 evasive: float = 5.0, expired: float = 30.0, gossip: bool = True, beacon_refresh: bool = False,
                 hwm: int = 10000, backlog: int = 100000, max_peers: int = 1000,
                 max_message: int = 16 << 20, tcp_port: int | None = None,
                 uuid: bytes | str | _uuid.UUID | None = None) -> None:
        self.uuid = _uuid.uuid4().bytes if uuid is None else _identity(uuid)
        self.id = self.uuid.hex().upper()
        self.name = name or self.id[:6]
        if len(self.name.encode()) > 255:
            raise ValueError("node name longer than 255 bytes")
        for endpoint in endpoints:
            peer_endpoint(endpoint)
        if backlog < 1 or max_peers < 1:
            raise ValueError("backlog and max_peers must be at least 1")
        self._config = dict(
            uuid=self.uuid, name=self.name, headers=dict(headers or {}), interface=interface, port=port,
            beacon=beacon, endpoints=list(endpoints), host=host, interval=interval, evasive=evasive,
            expired=expired, gossip=gossip, beacon_refresh=beacon_refresh, hwm=hwm, backlog=backlog,
            max_peers=max_peers, max_message=max_message, tcp_port=tcp_port)
        Liveness(evasive, expired)  # validates the timeouts now
        self.actor: NodeActor | None = None
        self.endpoint: str | None = None
        self._callbacks: dict[str | None, list[Callable[[NodeEvent], object]]] = {}
        self._dispatcher = None
        self._stopped = False
        self._said_stop = False

    # -- lifecycle ----------------------------------------------------------
    def start(self) -> Self:
        """Join the network; returns self.  Raises if the interface is unusable."""
        if self.actor is not None:
            raise RuntimeError("node %s is already started" % self.name)
        self.actor = NodeActor(self._config)
        self.endpoint = self.actor.endpoint
        return self

    def stop(self, timeout: float | None = 5.0) -> None:
        """Leave politely (port-0 beacon, goodbyes) and stop; idempotent."""
        if self.actor is not None:
            if self.actor.alive and self.actor.paused:
                log.warning("%s: stopping while a slow peer blocks sending; queued commands dropped", self.name)
            self.actor.destroy(timeout)
        self._stopped = True
        if self._dispatcher is not None:
            self._dispatcher.join(timeout)

    def __enter__(self) -> Self:
        return self.start() if self.actor is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def blocked(self) -> bool:
        """True while a slow peer's full backlog holds back ``whisper``/``shout`` (and every call)."""
        return self.actor is not None and self.actor.alive and self.actor.paused

    def _actor(self):
        if self.actor is None:
            raise RuntimeError("node %s is not started" % self.name)
        return self.actor

    # -- messaging ----------------------------------------------------------
    def _send(self, verb, *args):
        self._actor().send(verb, *args)  # blocks while a slow peer holds the pipe back

    def join(self, group: str) -> None:
        """Join ``group`` (at most 255 bytes of UTF-8, as ZRE strings are)."""
        if len(group.encode()) > 255:
            raise ValueError("group name longer than 255 bytes")
        self._send(verbs.JOIN, group)

    def leave(self, group: str) -> None:
        """Leave ``group``; peers are told with a LEAVE."""
        self._send(verbs.LEAVE, group)

    def whisper(self, peer: str | _uuid.UUID, *frames: bytes | str) -> None:
        """Send ``frames`` (bytes or str) to one peer (its id, or a ``uuid.UUID``)."""
        self._send(verbs.WHISPER, _peer_id(peer), [to_bytes(f, "a frame") for f in frames])

    def shout(self, group: str, *frames: bytes | str) -> None:
        """Send ``frames`` to every peer in ``group``."""
        self._send(verbs.SHOUT, group, [to_bytes(f, "a frame") for f in frames])

    def connect(self, endpoint: str) -> None:
        """Say HELLO to the node at ``endpoint``, ``tcp://host:port`` (discovery without broadcast)."""
        self._send(verbs.CONNECT, peer_endpoint(endpoint))

    # -- events -------------------------------------------------------------
    def recv(self, timeout: float | None = None) -> NodeEvent | None:
        """The next :class:`NodeEvent`, or None after ``timeout`` seconds / once stopped."""
        actor = self._actor()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                event = actor.recv_event(wait)
            except ActorError:  # the actor is gone and its events are drained
                return self._last_words()
            if event is None:
                return None
            converted = convert(event)
            if converted is not None:
                return converted

    def _last_words(self):
        if self._stopped and not self._said_stop:
            self._said_stop = True
            return stop_event(self.id, self.name)
        return None

    def events(self, timeout: float | None = None) -> Iterator[NodeEvent]:
        """Iterate over events until the node stops (or ``timeout`` passes with none)."""
        while True:
            event = self.recv(timeout)
            if event is None:
                return
            yield event

    def on(self, event_type: str | None, callback: Callable[[NodeEvent], object]) -> None:
        """Call ``callback(event)`` for each event of ``event_type`` (None: every event)."""
        self._callbacks.setdefault(event_type, []).append(callback)
        if self._dispatcher is None:
            self._dispatcher = gevent.spawn(self._dispatch)

    def _dispatch(self):
        for event in self.events():
            for callback in self._callbacks.get(event.type, []) + self._callbacks.get(None, []):
                try:
                    callback(event)
                except Exception:
                    log.exception("%s: %s callback failed", self.name, event.type)

    # -- state --------------------------------------------------------------
    def peers(self, timeout: float | None = 10.0) -> list[str]:
        """Hex ids of the peers that said HELLO."""
        return self._actor().call(verbs.PEERS, timeout=timeout)

    def peer(self, peer: str | _uuid.UUID, timeout: float | None = 10.0) -> dict[str, Any] | None:
        """``{id, name, headers, address, groups, backlog}`` of a peer, or None."""
        return self._actor().call(verbs.PEER, _peer_id(peer), timeout=timeout)

    def peer_name(self, peer: str | _uuid.UUID) -> str | None:
        """The name ``peer`` announced, or None for an unknown peer."""
        found = self.peer(peer)
        return None if found is None else found["name"]

    def peer_address(self, peer: str | _uuid.UUID) -> str | None:
        """The ZRE endpoint of ``peer`` (``tcp://host:port``), or None for an unknown peer."""
        found = self.peer(peer)
        return None if found is None else found["address"]

    def peer_headers(self, peer: str | _uuid.UUID) -> dict[str, str] | None:
        """Every header ``peer`` announced (a dict), or None for an unknown peer."""
        found = self.peer(peer)
        return None if found is None else found["headers"]

    def peer_header(self, peer: str | _uuid.UUID, key: str, default: str | None = None) -> str | None:
        """One header ``peer`` announced, or None."""
        headers = self.peer_headers(peer) or {}
        return headers.get(key, default)

    def peer_groups(self, peer: str | _uuid.UUID | None = None) -> list[str] | None:
        """Groups some peer is in; with ``peer``, that peer's groups."""
        if peer is None:
            return self._actor().call(verbs.PEER_GROUPS, timeout=10)
        found = self.peer(peer)
        return None if found is None else found["groups"]

    def peers_by_group(self, group: str) -> list[str]:
        """The ids of the peers in ``group``."""
        return self._actor().call(verbs.GROUP_PEERS, group, timeout=10)

    def own_groups(self) -> list[str]:
        """The groups this node has joined."""
        return self._actor().call(verbs.OWN_GROUPS, timeout=10)

    def stats(self) -> dict[str, int]:
        """Counters: malformed, unknown_message, status_mismatch, sequence_errors, ..."""
        return self._actor().call("$STATS", timeout=10)

    def __repr__(self) -> str:

        return "<Node %s %s>" % (self.name, self.endpoint or "stopped")



def _identity(value):
    """A node's 16-byte UUID from bytes, hex text or a ``uuid.UUID`` (ValueError otherwise)."""
    if isinstance(value, _uuid.UUID):
        return value.bytes
    if isinstance(value, str):
        try:
            return _uuid.UUID(value).bytes
        except ValueError:
            raise ValueError("a node uuid is 32 hex digits, not %r" % value) from None
    if isinstance(value, (bytes, bytearray)) and len(value) == 16:
        return bytes(value)
    raise ValueError("a node uuid is 16 bytes, 32 hex digits or a uuid.UUID, not %r" % (value,))


def _peer_id(peer):
    if type(peer) is str and len(peer) == 32:
        return peer.upper()
    if isinstance(peer, _uuid.UUID):
        return peer.hex.upper()
    return str(peer).replace("-", "").upper()


