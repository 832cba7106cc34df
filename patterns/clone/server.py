"""The Clone server (12/CHP), alone or as one of a Binary Star pair.

::

    server = CloneServer(port=5556)                      # alone: always active
    primary = CloneServer(port=5556, role="primary", peer=endpoints("127.0.0.1", 5566))
    backup = CloneServer(port=5566, role="backup", peer=endpoints("127.0.0.1", 5556))
    server.call("INFO")                                  # role, state, sequence, keys, counters
    server.destroy()

Sockets (the spec's ports; each endpoint can be given on its own): snapshot
ROUTER at P, publisher PUB at P+1, collector SUB at P+2, and for a pair the
Binary Star state PUB at P+3.

Behaviour, and where it improves on the Guide's Clone model 6:

- One sequence, strictly increasing: every set, delete and ttl expiry takes
  the next number and is published as a KVPUB (the KVSET's UUID and
  properties pass through; ttl stays relative seconds on the wire).
- ttl is kept as a deadline on this server's monotonic clock.  Only the
  active server expires keys (a bounded batch per tick, in deadline order;
  a million ttl keys cost one heap entry each), then publishes the delete.
- Snapshots are cooperative tasks: a consistent cut of the map (a dict copy
  at the request's sequence), sent in chunks only while the client's
  backlog in the ROUTER is under ``window`` messages, so a snapshot never
  drops an entry however large the map or slow the client, and HUGZ, the
  pair's heartbeats and other clients keep flowing.  KTHXBAI is queued
  after the last KVSYNC.  A client that disappears (unroutable) or stops
  reading for ``snapshot_timeout`` seconds costs nothing more.
- HUGZ every ``hugz`` seconds from the active server, from a reactor timer
  that nothing can starve (reactor rounds run due timers every round).
- Binary Star (:mod:`.bstar`): state heartbeats on their own sockets.  The
  passive server tracks the active's KVPUB stream (a SUB on its publisher),
  checks every sequence, and re-syncs by snapshot from the active on a gap,
  on a lost tail (the heartbeats carry the active's sequence), and whenever
  it becomes passive, so it never silently falls behind.  Client KVSETs are
  kept as *pending* by UUID until the active's stream shows them.  On
  takeover (a client's ICANHAZ? while the active is silent) the pending
  updates are applied and published *before* that snapshot is answered.
  Split brain: the primary wins; the backup yields, logs and re-syncs.
  A server re-syncs through the peer's snapshot port with the routing id
  :data:`PEER_IDENTITY`: those snapshots (a zactors extension, invisible to
  clients) carry each entry's sequence, UUID and properties, with ttl as
  the seconds left, so the backup can expire keys after a takeover.
- Malformed messages on any socket are dropped and counted (``malformed``).
- ``persist=DIR`` keeps the map in the kernel's Journal (see :mod:`.persist`):
  a restarted server starts from it, at the same sequence.
- ``curve=keys`` (an ``actors.auth`` Keypair or secret key) makes every
  socket CURVE; peers use ``peer_public`` (default: our own public key).

Commands: ``INFO`` (reply: dict), ``GET key`` (reply: value or None),
``KEYS prefix limit [preview [delimiter]]`` (reply: sorted keys; with ``preview``
each with its value's first bytes, size and ttl left; with ``delimiter`` one
level of the map: keys and subtrees; see :meth:`CloneServer.keys`),
``DUMP prefix limit`` (reply: {key: value}), ``PEER snapshot publisher state``
(connect to the peer's endpoints, for pairs on ephemeral ports), ``$STATS``,
``$TERM``.  The handle is an actor handle: safe from many greenlets of its
thread, not across OS threads.
"""
from __future__ import annotations

import heapq
import os
import logging
import time
import uuid as _uuid
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import zmq

from zactors.actors.actor import Actor, command
from zactors.actors.auth import Keypair, curve_client, curve_server
from zactors.actors.router import Router
from zactors.actors.speedups import send_message

from . import bstar
from .bstar import BinaryStar, decode_state, encode_state
from .persist import MapJournal
from .protocol import (HUGZ, Dialect, KTHXBAI, MAX_KEY, RESERVED_KEYS, SPEC, ProtocolError, decode_icanhaz, decode_kvmsg, decode_kvset,
                       decode_properties, dialect as _dialect, encode_icanhaz, encode_kthxbai, encode_properties,
                       pack_sequence, parse_ttl)

__all__ = ["CloneServer", "endpoints", "PEER_IDENTITY"]

log = logging.getLogger(__name__)

_monotonic = time.monotonic

#: routing id a server's snapshot DEALER uses with its peer: its snapshots carry UUIDs and relative ttls
PEER_IDENTITY = b"zactors.clone.peer"


def endpoints(host: str = "127.0.0.1", port: int = 5556, transport: str = "tcp") -> tuple[str, ...]:
    """``(snapshot, publisher, collector, state)`` endpoints of a server at base ``port``."""
    return tuple("%s://%s:%d" % (transport, host, port + i) for i in range(4))


class _Entry:
    __slots__ = ("value", "sequence", "uuid", "properties", "deadline")

    def __init__(self, value, sequence, uuid, properties, deadline):
        self.value = value
        self.sequence = sequence
        self.uuid = uuid
        self.properties = properties
        self.deadline = deadline


def _with_ttl(properties, ttl_text):
    props = decode_properties(properties)
    props["ttl"] = ttl_text
    return encode_properties(props)


class _Cut:
    """A copy of the map at one sequence, shared by the snapshots started while nothing changed."""

    __slots__ = ("entries", "sequence", "__weakref__")

    def __init__(self, entries, sequence):
        self.entries = entries
        self.sequence = sequence


class _SnapshotRouter(Router):
    """The snapshot ROUTER: a peer at its HWM is retried within 5 ms, not 50, so a fast reader never idles."""

    retry_max = 0.005


class CloneServer(Actor):
    """A Clone server actor; see the module docstring."""

    def __init__(self, port: int | None = None, *, host: str = "127.0.0.1", snapshot: str | None = None,
                 publisher: str | None = None, collector: str | None = None, state: str | None = None,
                 role: str | None = None, peer: Sequence[str] | None = None, hugz: float = 0.2,
                 heartbeat: float = 0.2, dialect: str | Dialect = SPEC, window: int = 2000, chunk: int = 100,
                 snapshot_timeout: float = 30.0, snapshot_hwm: int = 20000, expire_batch: int = 10000,
                 max_pending: int = 1000000, curve: Keypair | bytes | str | None = None,
                 peer_public: bytes | str | None = None, persist: str | os.PathLike[str] | None = None,
                 fsync: str = "interval", name: str | None = None) -> None:
        if role not in (None, "primary", "backup"):
            raise ValueError("role must be None (alone), 'primary' or 'backup'")
        if port is not None:
            defaults = endpoints(host, port)
        else:
            defaults = tuple("tcp://%s:*" % host for _ in range(4))
        self.endpoints: list[str | None] = [snapshot or defaults[0], publisher or defaults[1], collector or defaults[2],
                          state or defaults[3]]
        self.role = role
        self.peer = tuple(peer) if peer else None
        self.hugz = hugz
        self.heartbeat = heartbeat
        self.dialect = _dialect(dialect) if isinstance(dialect, str) else dialect
        self.window = window
        self.chunk = chunk
        self.snapshot_timeout = snapshot_timeout
        self.snapshot_hwm = snapshot_hwm
        self.expire_batch = expire_batch
        self.max_pending = max_pending
        self.curve = curve
        self.peer_public = peer_public
        self.persist = persist
        self.fsync = fsync
        self.name = name or "clone-%s" % (role or "server")

    # -- setup ----------------------------------------------------------------
    def setup(self) -> None:
        self.map: dict[bytes, _Entry] = {}
        self.sequence = 0
        self._ttl: list[tuple[float, int, bytes]] = []            # heap of (deadline, sequence, key)
        self.store = None
        if self.persist is not None:
            self.store = MapJournal(self, self.persist, fsync=self.fsync)
            self._restore(*self.store.recover())
        self._snapshots: dict[bytes, Any] = {}      # identity -> task
        self._cut_ref = None      # weak reference to the newest _Cut
        self._pending: OrderedDict[bytes, Any] = OrderedDict()  # uuid -> (KVMsg, ttl): client updates the active has not published yet
        self._seen: OrderedDict[bytes, Any] = OrderedDict()     # uuids the active published before their KVSET reached us
        self._syncing = None      # while re-syncing from the peer: dict being built
        self._sync_buffer: list[Any] = []
        self._sync_socket = None
        self._sync_deadline = 0.0
        self._peer_seq = self._peer_seq_prev = 0
        self._feed_progress = False
        curve = self.curve
        self._stalled: dict[bytes, float] = {}        # identity -> when its snapshot was held by backpressure
        self.router = _SnapshotRouter(self, self._on_snapshot, backlog=self.window + self.chunk + 16, high=self.window,
                             on_held=self._on_held, on_drained=self._on_drained,
                             on_unroutable=self._on_unroutable, router_handover=1, sndhwm=self.snapshot_hwm,
                             heartbeat_ivl=1000, heartbeat_timeout=5000)
        self.pub = self.socket(zmq.PUB, sndhwm=100000)
        self.collector = self.socket(zmq.SUB, rcvhwm=100000)
        self.collector.setsockopt(zmq.SUBSCRIBE, b"")
        for sock in (self.router.socket, self.pub, self.collector):
            if curve is not None:
                curve_server(sock, curve)
        self.endpoints[0] = self.router.bind(self.endpoints[0])  # type: ignore[arg-type]  # None only for a lone server's state
        # Actor.bind: a restarted server rebinds its endpoints while the old ports are being released
        self.endpoints[1] = self.bind(self.pub, self.endpoints[1])  # type: ignore[arg-type]  # None only for a lone server's state
        self.endpoints[2] = self.bind(self.collector, self.endpoints[2])  # type: ignore[arg-type]  # None only for a lone server's state
        self.add_reader(self.collector, self._on_collect)
        now = _monotonic()
        if self.role is None:
            self.fsm = None
            self.endpoints[3] = None
        else:
            self.fsm = BinaryStar(self.role == "primary", self.heartbeat, now, self._on_state_change)
            self.state_pub = self.socket(zmq.PUB)
            if curve is not None:
                curve_server(self.state_pub, curve)
            self.endpoints[3] = self.bind(self.state_pub, self.endpoints[3])  # type: ignore[arg-type]  # None only for a lone server's state
            self.state_sub = self.feed = None
            self.call_every(self.heartbeat, self._send_state)
            if self.peer:
                self._connect_peer(self.peer)
        self.call_every(self.hugz, self._send_hugz)
        self.call_every(0.05, self._expire)
        self.call_every(min(1.0, self.snapshot_timeout / 2), self._housekeeping)

    def _peer_socket(self, kind, **options):
        sock = self.socket(kind, **options)
        if self.curve is not None:
            secret = getattr(self.curve, "secret", self.curve)
            curve_client(sock, self.curve, self.peer_public or zmq.curve_public(secret))
        return sock

    def _connect_peer(self, peer):
        snapshot, publisher, _collector, state = peer
        self.peer = (snapshot, publisher, _collector, state)
        self.state_sub = self._peer_socket(zmq.SUB)
        self.state_sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.state_sub.connect(state)
        self.add_reader(self.state_sub, self._on_state)
        self.feed = self._peer_socket(zmq.SUB, rcvhwm=100000)
        self.feed.setsockopt(zmq.SUBSCRIBE, b"")
        self.feed.connect(publisher)
        self.add_reader(self.feed, self._on_feed)

    def _restore(self, entries, sequence):
        now, wall = _monotonic(), time.time()
        for key, (seq, uid, props, value, expires) in entries.items():
            deadline = None if expires is None else now + (expires - wall)
            self.map[key] = _Entry(value, seq, uid, props, deadline)
            if deadline is not None:
                self._ttl.append((deadline, seq, key))
        heapq.heapify(self._ttl)
        self.sequence = sequence

    def _expires(self, entry):
        """An entry's deadline as wall-clock time (for the journal), or None."""
        return None if entry.deadline is None else time.time() + (entry.deadline - _monotonic())

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()

    @property
    def active(self) -> bool:
        return self.fsm is None or self.fsm.state == bstar.ACTIVE

    # -- commands ---------------------------------------------------------------
    @command(reply=True)
    def info(self) -> dict[str, Any]:
        fsm = self.fsm
        return {
            "name": self.name,
            "role": self.role or "alone",
            "state": "active" if fsm is None else fsm.name,
            "sequence": self.sequence,
            "keys": len(self.map),
            "ttl_keys": sum(1 for e in self.map.values() if e.deadline is not None) if len(self.map) < 100000 else None,
            "clients_syncing": len(self._snapshots),
            "pending": len(self._pending),
            "syncing": self._syncing is not None,
            "peer_state": bstar.STATES.get(fsm.peer_state) if fsm else None,
            "peer_silent": fsm.peer_silent(_monotonic()) if fsm else None,
            "endpoints": list(self.endpoints),
            "dialect": self.dialect.name,
            "persist": None if self.store is None else {"directory": self.store.directory,
                                                        "generation": self.store.generation,
                                                        "compactions": self.store.compactions},
            "counters": dict(self.stats),
        }

    @command(reply=True)
    def get(self, key: bytes | str) -> bytes | None:
        entry = self.map.get(key if isinstance(key, bytes) else key.encode())
        return None if entry is None else entry.value

    @command(reply=True)
    def keys(self, prefix: bytes | str = b"", limit: int = 1000, preview: int | None = None,
             delimiter: bytes | str | None = None) -> Any:
        """The sorted keys starting with ``prefix``, at most ``limit``.

        ``preview=N``: each item is ``[key, value[:N], len(value), ttl]``
        instead, ``ttl`` the seconds left before the key expires (None if it
        has no ttl).  ``delimiter`` (e.g. ``b"/"``) lists one level, as a
        browser does: the reply is ``{"keys": [...], "subtrees": [[subtree,
        key count], ...], "truncated": bool}``, where a key whose rest after
        ``prefix`` holds the delimiter (past its first byte, and not as its
        last) counts under ``prefix + rest`` up to that delimiter instead of
        being listed.  At most ``limit`` keys and ``limit`` subtrees.
        """
        prefix = prefix if isinstance(prefix, bytes) else prefix.encode()
        if preview is not None and preview < 0:
            raise ValueError("preview is a number of bytes >= 0")
        found = sorted(k for k in self.map if k.startswith(prefix))
        if delimiter is None:
            return [self._listed(k, preview) for k in found[:limit]]
        delimiter = delimiter if isinstance(delimiter, bytes) else delimiter.encode()
        if not delimiter:
            raise ValueError("a delimiter is at least one byte")
        subtrees: dict[bytes, int] = {}
        keys: list[Any] = []
        truncated = False
        skip, width = len(prefix), len(delimiter)
        for key in found:
            cut = key.find(delimiter, skip + 1)
            if cut >= 0 and cut + width < len(key):
                subtree = key[:cut + width]
                if subtree in subtrees:
                    subtrees[subtree] += 1
                elif len(subtrees) < limit:
                    subtrees[subtree] = 1
                else:
                    truncated = True
            elif len(keys) < limit:
                keys.append(self._listed(key, preview))
            else:
                truncated = True
        return {"keys": keys, "subtrees": [[sub, n] for sub, n in subtrees.items()], "truncated": truncated}

    def _listed(self, key, preview):
        if preview is None:
            return key
        entry = self.map[key]
        ttl = None if entry.deadline is None else max(0.0, round(entry.deadline - _monotonic(), 3))
        return [key, entry.value[:preview], len(entry.value), ttl]

    @command(reply=True)
    def dump(self, prefix: bytes | str = b"", limit: int = 100000) -> dict[bytes, bytes]:

        """``{key: value}`` for keys starting with ``prefix`` (at most ``limit``)."""
        prefix = prefix if isinstance(prefix, bytes) else prefix.encode()
        out = {}
        for key, entry in self.map.items():
            if key.startswith(prefix):
                out[key] = entry.value
                if len(out) >= limit:
                    break
        return out

    @command("PEER", reply=True)
    def _set_peer(self, snapshot, publisher, state):
        if self.fsm is None:
            raise ValueError("a server without a role has no peer")
        if self.state_sub is not None:
            raise ValueError("peer already set")
        self._connect_peer((snapshot, publisher, None, state))
        return True

    # -- the map ----------------------------------------------------------------
    def _store(self, key, value, sequence, uuid, properties, ttl, now):
        """Apply one update at ``sequence`` (already assigned)."""
        if value:
            deadline = None
            if ttl is not None:
                deadline = now + ttl
                heapq.heappush(self._ttl, (deadline, sequence, key))
            self.map[key] = _Entry(value, sequence, uuid, properties, deadline)
        else:
            self.map.pop(key, None)
        if self.store is not None:
            self.store.record(key, sequence, uuid, properties, value,
                              None if ttl is None or not value else time.time() + ttl)

    def _apply(self, msg, ttl, now):
        """Active: give a client update the next sequence, store it and publish it."""
        self.sequence = seq = self.sequence + 1
        self._store(msg.key, msg.value, seq, msg.uuid, msg.properties, ttl, now)
        pub = self.pub
        send_message(pub, pub.handle, (msg.key, pack_sequence(seq), msg.uuid, msg.properties, msg.value))
        self.stats["updates"] += 1

    def _on_collect(self, frames):
        # The hot path: an active server, a KVSET without properties (so no ttl to parse).
        if (len(frames) == 5 and not frames[3] and self.active and self.store is None and 0 < len(frames[0]) <= MAX_KEY
                and len(frames[1]) == 8 and len(frames[2]) in (0, 16) and frames[0] not in RESERVED_KEYS):
            key, _seq, uid, props, value = frames
            self.sequence = seq = self.sequence + 1
            if value:
                self.map[key] = _Entry(value, seq, uid, b"", None)
            else:
                self.map.pop(key, None)
            pub = self.pub
            send_message(pub, pub.handle, (key, pack_sequence(seq), uid, b"", value))
            self.stats["updates"] += 1
            return
        try:
            msg, ttl = decode_kvset(frames)
        except ProtocolError as exc:
            self.stats["malformed"] += 1
            log.debug("%s: bad KVSET dropped: %s", self.name, exc)
            return
        if self.active:
            self._apply(msg, ttl, _monotonic())
            return
        # Not active: hold it until the active's stream shows it (matched by UUID).
        if not msg.uuid:
            self.stats["pending_without_uuid"] += 1
            return
        if self._seen.pop(msg.uuid, None) is not None:
            return
        pending = self._pending
        pending[msg.uuid] = (msg, ttl, _monotonic())
        if len(pending) > self.max_pending:
            pending.popitem(last=False)
            self.stats["pending_dropped"] += 1

    def _expire(self):
        if not self.active:
            return
        heap, now, n = self._ttl, _monotonic(), 0
        pub = self.pub
        while heap and heap[0][0] <= now and n < self.expire_batch:
            _deadline, seq, key = heapq.heappop(heap)
            entry = self.map.get(key)
            if entry is None or entry.sequence != seq:
                continue  # changed or deleted since
            n += 1
            del self.map[key]
            self.sequence = new = self.sequence + 1
            uid = _uuid.uuid4().bytes
            send_message(pub, pub.handle, (key, pack_sequence(new), uid, entry.properties, b""))
            if self.store is not None:
                self.store.record(key, new, uid, entry.properties, b"", None)
            self.stats["expired"] += 1

    def _send_hugz(self):
        if self.active:
            self.pub.send_multipart(self.dialect.hugz(self.sequence, _uuid.uuid4().bytes))

    def _housekeeping(self):
        if self.store is not None:
            self.store.maybe_compact(self.map, self._expires)
        if self._stalled:
            horizon = _monotonic() - self.snapshot_timeout
            for identity, since in list(self._stalled.items()):
                if since < horizon:
                    log.info("%s: client %r stopped reading its snapshot; dropped", self.name, identity)
                    self.stats["snapshots_abandoned"] += 1
                    self._end_snapshot(identity)
        # Pending updates older than this were lost by the active, or never reached it: applying them
        # on a takeover much later would re-order the map.  The active's stream had 10 s to show them.
        if self.active or not self._pending:
            return
        horizon = _monotonic() - 10.0
        pending = self._pending
        while pending:
            _msg, _ttl, arrived = next(iter(pending.values()))
            if arrived > horizon:
                break
            pending.popitem(last=False)
            self.stats["pending_expired"] += 1
        while len(self._seen) > 100000:
            self._seen.popitem(last=False)

    # -- snapshots --------------------------------------------------------------
    def _on_snapshot(self, identity, frames):
        if identity == PEER_IDENTITY:
            if frames and frames[0] == b"ICANHAZ?" and self.active:
                self._start_snapshot(identity, b"", peer=True)
            return
        try:
            subtree = decode_icanhaz(frames)
        except ProtocolError as exc:
            self.stats["malformed"] += 1
            log.debug("%s: bad snapshot request dropped: %s", self.name, exc)
            return
        if self.fsm is not None and not self.fsm.handle(bstar.CLIENT_REQUEST, _monotonic()):
            self.stats["requests_refused"] += 1
            return
        self._start_snapshot(identity, subtree)

    def _start_snapshot(self, identity, subtree, peer=False):
        self._end_snapshot(identity)
        task = self.start_task(self._snapshot(identity, subtree, peer),
                               on_done=lambda task, identity=identity: self._snapshot_done(identity, task))
        self._snapshots[identity] = task
        self.stats["snapshots"] += 1

    def _snapshot(self, identity, subtree, peer):
        """Send a consistent cut of the map, a chunk per step; backpressure pauses the task."""
        held = self._cut_ref() if self._cut_ref is not None else None
        if held is None or held.sequence != self.sequence:  # share a cut while nothing changed
            held = _Cut(self.map.copy(), self.sequence)
            self._cut_ref = weakref.ref(held)
        cut, sequence = held.entries, held.sequence
        send, chunk = self.router.send, self.chunk
        details = peer or self.dialect.sync_details
        seq_frame = pack_sequence(sequence)
        n = 0
        now = _monotonic()
        for key, entry in cut.items():
            if subtree and not key.startswith(subtree):
                continue
            if details:
                props = entry.properties
                if entry.deadline is not None:
                    remaining = max(entry.deadline - now, 0.001)
                    props = _with_ttl(props, "%.3f" % remaining if peer else "%f" % (time.time() + remaining))
                frames = [key, pack_sequence(entry.sequence), entry.uuid, props, entry.value]
            else:
                frames = [key, seq_frame, b"", b"", entry.value]
            if not send(identity, frames):
                return  # gone: on_unroutable counted it
            n += 1
            if n % chunk == 0:
                yield  # while the client's backlog is full, on_held has paused us
                now = _monotonic()
        send(identity, encode_kthxbai(sequence, subtree))
        self.stats["snapshots_sent"] += 1

    def _snapshot_done(self, identity, task):
        if self._snapshots.get(identity) is task:
            del self._snapshots[identity]
            self._stalled.pop(identity, None)

    def _end_snapshot(self, identity):
        """Cancel a snapshot in progress and forget its backlog."""
        task = self._snapshots.pop(identity, None)
        self._stalled.pop(identity, None)
        if task is not None:
            task.cancel()
            self.router.drop(identity)

    def _on_held(self, identity):
        task = self._snapshots.get(identity)
        if task is not None:
            task.pause()
            self._stalled[identity] = _monotonic()

    def _on_drained(self, identity):
        self._stalled.pop(identity, None)
        task = self._snapshots.get(identity)
        if task is not None:
            task.resume()

    def _on_unroutable(self, identity, frames):
        self.stats["unroutable"] += 1
        task = self._snapshots.pop(identity, None)
        self._stalled.pop(identity, None)
        if task is not None:  # its backlog is being cleared by the router itself
            task.cancel()

    # -- Binary Star ------------------------------------------------------------
    def _send_state(self):
        self.state_pub.send_multipart(encode_state(self.fsm.state, self.sequence))

    def _on_state(self, frames):
        decoded = decode_state(frames)
        if decoded is None:
            self.stats["malformed"] += 1
            return
        state, peer_seq = decoded
        self.fsm.handle(state, _monotonic())
        if state == bstar.ACTIVE and self.fsm.state == bstar.PASSIVE and self._syncing is None:
            # A lost tail: a heartbeat ago the active was at _peer_seq, we are still below and
            # nothing arrived on the feed since.
            if self.sequence < self._peer_seq and not self._feed_progress:
                self._resync("the active is at %d, we are at %d with no update arriving" % (peer_seq, self.sequence))
            self._feed_progress = False
        elif self._syncing is not None and _monotonic() > self._sync_deadline:
            self._resync("snapshot from the peer stalled")
        self._peer_seq = peer_seq

    def _on_state_change(self, old, new, reason):
        if new == bstar.ACTIVE:
            self._take_over(reason)
        elif new == bstar.PASSIVE:
            if old == bstar.ACTIVE:
                log.warning("%s: yielding to the peer (%s); re-syncing from it", self.name, reason)
                self.stats["yielded"] += 1
                self._cancel_snapshots()
            self._resync("became passive")

    def _take_over(self, reason):
        """Become active: apply and publish the pending client updates, before any snapshot."""
        if self._syncing is not None:
            log.warning("%s: taking over in the middle of a re-sync; keeping the map we had", self.name)
            self._finish_sync(None)
        now = _monotonic()
        pending, self._pending = self._pending, OrderedDict()
        for msg, ttl, _arrived in pending.values():
            self._apply(msg, ttl, now)
        self._seen.clear()
        self.stats["takeovers"] += 1
        log.info("%s: active at sequence %d (%s); %d pending update(s) applied",
                 self.name, self.sequence, reason, len(pending))

    def _cancel_snapshots(self):
        for identity in list(self._snapshots):
            self._end_snapshot(identity)

    def _on_feed(self, frames):
        if self.active:
            return
        try:
            msg = decode_kvmsg(frames)
        except ProtocolError:
            self.stats["malformed"] += 1
            return
        if msg.key == HUGZ:
            return
        uid = msg.uuid
        if uid and self._pending.pop(uid, None) is None:
            self._seen[uid] = None  # published before its KVSET reached us
        if self._syncing is not None:
            self._sync_buffer.append(msg)
        elif self.fsm.state == bstar.PASSIVE:
            self._follow(msg)

    def _follow(self, msg):
        """Passive: apply one KVPUB of the active, checking the sequence."""
        if msg.sequence <= self.sequence:
            return
        if msg.sequence != self.sequence + 1:
            self._resync("gap: expected %d, got %d" % (self.sequence + 1, msg.sequence))
            return
        self._feed_progress = True
        try:
            ttl = parse_ttl(decode_properties(msg.properties)) if msg.properties else None
        except ProtocolError:
            ttl = None
        self.sequence = msg.sequence
        self._store(msg.key, msg.value, msg.sequence, msg.uuid, msg.properties, ttl, _monotonic())
        self.stats["followed"] += 1

    def _resync(self, reason):
        if self.peer is None:
            return
        log.info("%s: re-syncing from the peer (%s)", self.name, reason)
        self.stats["resyncs"] += 1
        if self._sync_socket is not None:
            self.close_socket(self._sync_socket)
        self._syncing = {}
        self._sync_buffer = []
        self._sync_sequence = 0
        self._sync_deadline = _monotonic() + 5.0
        sock = self._sync_socket = self._peer_socket(zmq.DEALER, routing_id=PEER_IDENTITY, rcvhwm=0)
        sock.connect(self.peer[0])
        sock.send_multipart(encode_icanhaz(b""))
        self.add_reader(sock, self._on_sync)

    def _on_sync(self, frames):
        if self._syncing is None:
            return
        try:
            msg = decode_kvmsg(frames)
            ttl = parse_ttl(decode_properties(msg.properties)) if msg.properties else None
        except ProtocolError:
            self.stats["malformed"] += 1
            return
        self._sync_deadline = _monotonic() + 5.0
        if msg.key == KTHXBAI:
            self._finish_sync(msg.sequence)
            return
        deadline = None if ttl is None else _monotonic() + ttl
        self._syncing[msg.key] = _Entry(msg.value, msg.sequence, msg.uuid, msg.properties, deadline)

    def _finish_sync(self, sequence):
        built, buffered = self._syncing, self._sync_buffer
        self._syncing, self._sync_buffer = None, []
        if self._sync_socket is not None:
            self.close_socket(self._sync_socket)
            self._sync_socket = None
        if sequence is None:  # abandoned
            return
        self.map = built
        self.sequence = sequence
        self._ttl = [(e.deadline, e.sequence, k) for k, e in built.items() if e.deadline is not None]
        heapq.heapify(self._ttl)
        for entry in built.values():
            if entry.uuid:
                self._pending.pop(entry.uuid, None)
        if self.store is not None:  # the journal describes the old map: write the new one
            self.store.compact(self.map, self._expires)
        log.info("%s: synced from the peer at sequence %d (%d keys)", self.name, sequence, len(built))
        self.stats["synced"] += 1
        self._feed_progress = True
        for msg in buffered:
            if self._syncing is not None:  # a gap made us start again
                self._sync_buffer.append(msg)
            else:
                self._follow(msg)
