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
  reading for ``snapshot_timeout`` seconds costs nothing more.  The cuts
  in flight share a budget (``snapshot_budget`` entries in all,
  ``max_snapshots`` at once): requests past it wait, or are refused once
  ``snapshot_queue`` wait (see :mod:`.snapshots`).
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
  A re-sync drops the pending updates its map shows applied or overtaken
  (the key written after the update arrived), so a takeover never turns a
  key back to an older value.
  Split brain: the primary wins; the backup yields, logs and re-syncs.
  A passive that has not completed a sync (just started, or re-syncing)
  refuses the client vote, so it never takes over with a partial map.
  A server re-syncs through the peer's snapshot port with a request of its
  own (:func:`.protocol.encode_peer_icanhaz`) from a socket whose routing
  id libzmq assigns, so no client can take that link over: those snapshots
  (a zactors extension) carry each entry's sequence, UUID and properties, with ttl as
  the seconds left, so the backup can expire keys after a takeover.
- Malformed messages on any socket are dropped and counted (``malformed``).
- ``persist=DIR`` keeps the map in the kernel's Journal (see :mod:`.persist`):
  a restarted server starts from it, at the same sequence.  An update is
  journaled *before* it is applied and published: its KVPUB (and any
  snapshot holding it) waits until the journal holds it at the ``ack``
  level: ``"written"`` (survives a crash of the process) or ``"synced"``
  (fsynced: survives a power loss; pair it with ``fsync="batch"``).  When a
  write fails (a full disk) the updates waiting for it are refused, and so
  is every update until a retried write succeeds: the server publishes
  ``KVERR`` with the update's UUID and the reason (see
  :func:`.protocol.encode_kverr`; :meth:`.Clone.set` raises
  :class:`.UpdateRefused`), voids the refused records in the journal and
  goes on serving.
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
from collections import deque
import logging
import time
import uuid as _uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import msgpack
import zmq

from zactors.actors.actor import Actor, command
from zactors.actors.auth import Keypair, curve_client, curve_server
from zactors.actors.journal import JournalError
from zactors.actors.speedups import send_message

from . import bstar
from .bstar import BinaryStar, decode_state, encode_state
from .persist import MapJournal
from .snapshots import Snapshots
from .protocol import (HUGZ, Dialect, KTHXBAI, MAX_KEY, MAX_REASON, encode_kverr, encode_peer_icanhaz,
                       is_peer_icanhaz, RESERVED_KEYS, SPEC, ProtocolError, decode_icanhaz, decode_kvmsg,
                       decode_kvset, decode_properties, dialect as _dialect, pack_sequence, parse_ttl)

__all__ = ["CloneServer", "endpoints"]

log = logging.getLogger(__name__)

_monotonic = time.monotonic

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


#: keys a KEYS listing looks at per loop round
LISTING_STEP = 20000


class _Smallest:
    """The ``limit`` smallest distinct items added (sorted by :meth:`items`); ``dropped``: some were not kept."""

    __slots__ = ("limit", "kept", "bound", "dropped")

    def __init__(self, limit):
        self.limit = limit
        self.kept: list[bytes] = []
        self.bound = None       # items above this are past the limit for good
        self.dropped = False

    def add(self, item):
        """Keep ``item`` if it may be among the smallest; True if kept."""
        if self.bound is not None and item >= self.bound:
            self.dropped = True
            return False
        self.kept.append(item)
        if len(self.kept) >= 2 * self.limit + 64:
            self._trim()
        return True

    def _trim(self):
        kept = self.kept
        kept.sort()
        if len(kept) > self.limit:
            self.bound = kept[self.limit]
            del kept[self.limit:]
            self.dropped = True

    def items(self):
        self._trim()
        return self.kept


class CloneServer(Actor):
    """A Clone server actor; see the module docstring."""

    def __init__(self, port: int | None = None, *, host: str = "127.0.0.1", snapshot: str | None = None,
                 publisher: str | None = None, collector: str | None = None, state: str | None = None,
                 role: str | None = None, peer: Sequence[str] | None = None, hugz: float = 0.2,
                 heartbeat: float = 0.2, dialect: str | Dialect = SPEC, window: int = 2000, chunk: int = 100,
                 snapshot_timeout: float = 30.0, snapshot_hwm: int = 20000, snapshot_budget: int = 2000000,
                 max_snapshots: int = 64, snapshot_queue: int = 10000, expire_batch: int = 10000,
                 max_pending: int = 1000000, curve: Keypair | bytes | str | None = None,
                 peer_public: bytes | str | None = None, persist: str | os.PathLike[str] | None = None,
                 fsync: str = "interval", ack: str = "written", name: str | None = None) -> None:
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
        self.snapshot_budget = snapshot_budget
        self.max_snapshots = max_snapshots
        self.snapshot_queue = snapshot_queue
        self.expire_batch = expire_batch
        self.max_pending = max_pending
        self.curve = curve
        self.peer_public = peer_public
        self.persist = persist
        self.fsync = fsync
        if ack not in ("written", "synced"):
            raise ValueError("ack must be 'written' or 'synced', not %r" % (ack,))
        self.ack = ack
        self.name = name or "clone-%s" % (role or "server")

    # -- setup ----------------------------------------------------------------
    def setup(self) -> None:
        self.map: dict[bytes, _Entry] = {}
        self.sequence = 0
        self._ttl: list[tuple[float, int, bytes]] = []            # heap of (deadline, sequence, key)
        self.store = None
        self._journal_gap = False
        if self.persist is not None:
            self.store = MapJournal(self, self.persist, fsync=self.fsync, ack=self.ack, on_durable=self._publish_durable,
                                    on_error=self._journal_failed)
            self._restore(*self.store.recover())
        self._assigned = self.sequence      # the last sequence handed out (journaled; published once durable)
        self._outbox: deque[tuple[Any, ...]] = deque()  # (journal seq, sequence, key, value, uuid, props, ttl, body)
        # uuid -> (KVMsg, ttl, arrival time, our sequence then): client updates the active has not published yet
        self._pending: OrderedDict[bytes, Any] = OrderedDict()
        self._seen: OrderedDict[bytes, Any] = OrderedDict()     # uuids the active published before their KVSET reached us
        self._syncing = None      # while re-syncing from the peer: dict being built
        self._sync_buffer: list[Any] = []
        self._sync_socket = None
        self._sync_deadline = 0.0
        self._peer_seq = self._peer_seq_prev = 0
        self._feed_progress = False
        curve = self.curve
        self.snapshots = Snapshots(self, self._on_snapshot, window=self.window, chunk=self.chunk,
                                   timeout=self.snapshot_timeout, hwm=self.snapshot_hwm, budget=self.snapshot_budget,
                                   max_active=self.max_snapshots, max_waiting=self.snapshot_queue)
        self.pub = self.socket(zmq.PUB, sndhwm=100000)
        self.collector = self.socket(zmq.SUB, rcvhwm=100000)
        self.collector.setsockopt(zmq.SUBSCRIBE, b"")
        for sock in (self.snapshots.router.socket, self.pub, self.collector):
            if curve is not None:
                curve_server(sock, curve)
        self.endpoints[0] = self.snapshots.router.bind(self.endpoints[0])  # type: ignore[arg-type]  # None only for a lone server's state
        self.pub.bind(self.endpoints[1])  # type: ignore[arg-type]  # None only for a lone server's state
        self.endpoints[1] = self.pub.last_endpoint.decode()  # type: ignore[union-attr]  # bytes
        self.collector.bind(self.endpoints[2])  # type: ignore[arg-type]  # None only for a lone server's state
        self.endpoints[2] = self.collector.last_endpoint.decode()  # type: ignore[union-attr]  # bytes
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
            self.state_pub.bind(self.endpoints[3])  # type: ignore[arg-type]  # None only for a lone server's state
            self.endpoints[3] = self.state_pub.last_endpoint.decode()  # type: ignore[union-attr]  # bytes
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

    @staticmethod
    def _body(item):
        _jseq, seq, key, value, uid, props, ttl = item
        return msgpack.packb((seq, uid, props, value, None if ttl is None or not value else time.time() + ttl))

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
            "clients_syncing": len(self.snapshots),
            "snapshots": self.snapshots.info(),
            "pending": len(self._pending),
            "syncing": self._syncing is not None,
            "ready": fsm.ready if fsm else True,
            "peer_state": bstar.STATES.get(fsm.peer_state) if fsm else None,
            "peer_silent": fsm.peer_silent(_monotonic()) if fsm else None,
            "endpoints": list(self.endpoints),
            "dialect": self.dialect.name,
            "persist": None if self.store is None else {"directory": self.store.directory,
                                                        "generation": self.store.generation,
                                                        "compactions": self.store.compactions,
                                                        "ack": self.ack, "unpublished": len(self._outbox),
                                                        "error": str(self.store.journal.error or "") or None},
            "counters": dict(self.stats),
        }

    @command(reply=True)
    def get(self, key: bytes | str) -> bytes | None:
        entry = self.map.get(key if isinstance(key, bytes) else key.encode())
        return None if entry is None else entry.value

    @command(deferred=True)
    def keys(self, reply, prefix: bytes | str = b"", limit: int = 1000, preview: int | None = None,
             delimiter: bytes | str | None = None) -> None:
        """The sorted keys starting with ``prefix``, at most ``limit``.

        ``preview=N``: each item is ``[key, value[:N], len(value), ttl]``
        instead, ``ttl`` the seconds left before the key expires (None if it
        has no ttl).  ``delimiter`` (e.g. ``b"/"``) lists one level, as a
        browser does: the reply is ``{"keys": [...], "subtrees": [[subtree,
        key count], ...], "truncated": bool}``, where a key whose rest after
        ``prefix`` holds the delimiter (past its first byte, and not as its
        last) counts under ``prefix + rest`` up to that delimiter instead of
        being listed.  At most ``limit`` keys and ``limit`` subtrees.

        A cooperative task (:data:`LISTING_STEP` keys a round, no sort of
        the whole map), so a large map never holds the loop; the listing is
        of the keys there when it was asked (a key deleted meanwhile is left out).
        """
        prefix = prefix if isinstance(prefix, bytes) else prefix.encode()
        if delimiter is not None:
            delimiter = delimiter if isinstance(delimiter, bytes) else delimiter.encode()
        if preview is not None and preview < 0:
            reply.error(ValueError("preview is a number of bytes >= 0"))
            return
        if delimiter is not None and not delimiter:
            reply.error(ValueError("a delimiter is at least one byte"))
            return

        def done(task):
            if task.error is not None:
                reply.error(task.error)
            elif not task.cancelled:
                reply(task.result)
        self.start_task(self._listing(prefix, max(0, int(limit)), preview, delimiter), on_done=done)

    def _listing(self, prefix, limit, preview, delimiter):
        names = list(self.map)  # references only: a few ms at 500k keys
        keys = _Smallest(limit)
        subtrees = _Smallest(limit)
        counts: dict[bytes, int] = {}
        skip = len(prefix)
        width = len(delimiter) if delimiter else 0
        for start in range(0, len(names), LISTING_STEP):
            for key in names[start:start + LISTING_STEP]:
                if not key.startswith(prefix):
                    continue
                if delimiter:
                    cut = key.find(delimiter, skip + 1)
                    if cut >= 0 and cut + width < len(key):
                        subtree = key[:cut + width]
                        if subtree in counts:
                            counts[subtree] += 1
                        elif subtrees.add(subtree):
                            counts[subtree] = 1
                        continue
                keys.add(key)
            if len(counts) > 2 * limit + LISTING_STEP:  # forget the subtrees past the limit
                kept = set(subtrees.items())
                counts = {sub: n for sub, n in counts.items() if sub in kept}
            yield
        entries = self.map
        listed = [self._listed(key, preview) for key in keys.items() if key in entries]
        if delimiter is None:
            return listed
        return {"keys": listed, "subtrees": [[sub, counts[sub]] for sub in subtrees.items()],
                "truncated": keys.dropped or subtrees.dropped}

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
    def _set(self, key, value, sequence, uuid, properties, ttl, now):
        """Put one update at ``sequence`` into the map (and the ttl heap)."""
        if value:
            deadline = None
            if ttl is not None:
                deadline = now + ttl
                heapq.heappush(self._ttl, (deadline, sequence, key))
            self.map[key] = _Entry(value, sequence, uuid, properties, deadline)
        else:
            self.map.pop(key, None)

    def _follow_store(self, key, value, sequence, uuid, properties, ttl):
        """Passive: journal an update of the active's (nothing is published, so no waiting)."""
        try:
            self.store.record(key, sequence, uuid, properties, value,
                              None if ttl is None or not value else time.time() + ttl)
        except JournalError as exc:
            self.stats["journal_refused"] += 1
            self._journal_gap = True   # compacted from the map once the journal takes appends again
            log.debug("%s: journal refused a followed update: %s", self.name, exc)

    def _apply(self, msg, ttl, now):
        """Active: give a client update the next sequence, store it and publish it.

        With a journal, it is journaled now and applied and published once
        durable (:meth:`_publish_durable`), or refused (:meth:`_refuse`)."""
        if self.store is None:
            self.sequence = seq = self.sequence + 1
            self._set(msg.key, msg.value, seq, msg.uuid, msg.properties, ttl, now)
            pub = self.pub
            send_message(pub, pub.handle, (msg.key, pack_sequence(seq), msg.uuid, msg.properties, msg.value))
            self.stats["updates"] += 1
            return
        self._journal(msg.key, msg.value, msg.uuid, msg.properties, ttl)

    def _journal(self, key, value, uid, props, ttl):
        """Journal one change at the next sequence, to publish once durable; False if refused."""
        seq = self._assigned + 1
        body = msgpack.packb((seq, uid, props, value, None if ttl is None or not value else time.time() + ttl))
        try:
            jseq = self.store.append(key, body)
        except JournalError as exc:
            self._refuse(uid, exc)
            return False
        self._assigned = seq
        self._outbox.append((jseq, seq, key, value, uid, props, ttl))
        return True

    def _publish_durable(self, jseq):
        """The journal holds everything up to ``jseq`` (None: all) at the ack level: apply and publish it."""
        outbox = self._outbox
        if not outbox:
            return
        pub, now = self.pub, _monotonic()
        while outbox and (jseq is None or outbox[0][0] <= jseq):
            _jseq, seq, key, value, uid, props, ttl = outbox.popleft()
            self.sequence = seq
            self._set(key, value, seq, uid, props, ttl, now)
            send_message(pub, pub.handle, (key, pack_sequence(seq), uid, props, value))
            self.stats["updates"] += 1

    def _journal_failed(self, exc):
        """A journal write (or fsync) failed: refuse every update waiting for it, and void their records."""
        refused, self._outbox = self._outbox, deque()
        if refused:
            self.store.void(refused[0][0], refused[-1][0])
        for item in refused:
            self._refuse(item[4], exc)
        self._assigned = self.sequence    # the refused sequences were never published: hand them out again
        log.error("%s: journal failed (%s): %d update(s) refused; refusing updates until a write succeeds",
                  self.name, exc, len(refused))

    def _refuse(self, uid, exc):
        """Tell the client (by the update's UUID) that its update was not applied."""
        self.stats["refused"] += 1
        reason = str(exc).encode("utf-8", "replace")[:MAX_REASON]
        pub = self.pub
        send_message(pub, pub.handle, encode_kverr(uid, reason))

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
        entry = self.map.get(msg.key)
        if entry is not None and entry.uuid == msg.uuid:
            return  # a sync brought it before its KVSET reached us
        pending = self._pending
        pending[msg.uuid] = (msg, ttl, _monotonic(), self.sequence)
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
            uid = _uuid.uuid4().bytes
            if self.store is not None:  # journaled first: the delete is applied once durable
                if not self._journal(key, b"", uid, entry.properties, None):
                    heapq.heappush(heap, (now + 1.0, seq, key))  # try again in a second
                    break
                self.stats["expired"] += 1
                continue
            del self.map[key]
            self.sequence = new = self.sequence + 1
            send_message(pub, pub.handle, (key, pack_sequence(new), uid, entry.properties, b""))
            self.stats["expired"] += 1

    def _send_hugz(self):
        if self.active:
            self.pub.send_multipart(self.dialect.hugz(self.sequence, _uuid.uuid4().bytes))

    def _housekeeping(self):
        store = self.store
        if store is not None:
            if self._journal_gap and store.journal.error is None and store._next is None:
                self._journal_gap = False
                store.compact(self.map, self._expires, self.sequence)
            else:
                store.maybe_compact(self.map, self._expires, self.sequence,
                                    [(item[2], self._body(item)) for item in self._outbox])
        self.snapshots.expire_stalled(_monotonic())
        # Pending updates older than this were lost by the active, or never reached it: applying them
        # on a takeover much later would re-order the map.  The active's stream had 10 s to show them.
        if self.active or not self._pending:
            return
        horizon = _monotonic() - 10.0
        pending = self._pending
        while pending:
            _msg, _ttl, arrived, _seq = next(iter(pending.values()))
            if arrived > horizon:
                break
            pending.popitem(last=False)
            self.stats["pending_expired"] += 1
        while len(self._seen) > 100000:
            self._seen.popitem(last=False)

    # -- snapshots --------------------------------------------------------------
    def _on_snapshot(self, identity, frames):
        if is_peer_icanhaz(frames):  # the pair's re-sync: no vote
            if self.active:
                self.snapshots.start(identity, b"", peer=True)
            return
        try:
            subtree = decode_icanhaz(frames)
        except ProtocolError as exc:
            self.stats["malformed"] += 1
            log.debug("%s: bad snapshot request dropped: %s", self.name, exc)
            return
        if self.fsm is not None and not self.fsm.handle(bstar.CLIENT_REQUEST, _monotonic()):
            self.stats["requests_refused"] += 1
            if not self.fsm.ready:
                self.stats["requests_refused_unsynced"] += 1
            return
        self.snapshots.start(identity, subtree)

    # -- Binary Star ------------------------------------------------------------
    def _send_state(self):
        self.state_pub.send_multipart(encode_state(self.fsm.advertised, self.sequence))

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
                self.snapshots.cancel_all()
            self._resync("became passive")

    def _take_over(self, reason):
        """Become active: apply and publish the pending client updates, before any snapshot."""
        now = _monotonic()
        pending, self._pending = self._pending, OrderedDict()
        for msg, ttl, _arrived, _seq in pending.values():
            self._apply(msg, ttl, now)
        self._seen.clear()
        self.stats["takeovers"] += 1
        log.info("%s: active at sequence %d (%s); %d pending update(s) applied",
                 self.name, self.sequence, reason, len(pending))

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
        self.sequence = self._assigned = msg.sequence
        self._set(msg.key, msg.value, msg.sequence, msg.uuid, msg.properties, ttl, _monotonic())
        if self.store is not None:
            self._follow_store(msg.key, msg.value, msg.sequence, msg.uuid, msg.properties, ttl)
        self.stats["followed"] += 1

    def _resync(self, reason):
        if self.peer is None:
            return
        log.info("%s: re-syncing from the peer (%s)", self.name, reason)
        self.stats["resyncs"] += 1
        if self._sync_socket is not None:
            self.close_socket(self._sync_socket)
        self._syncing = {}
        self.fsm.ready = False
        self._sync_buffer = []
        self._sync_sequence = 0
        self._sync_deadline = _monotonic() + 5.0
        # No routing id of ours: libzmq assigns one that no other peer can claim and take over.
        sock = self._sync_socket = self._peer_socket(zmq.DEALER, rcvhwm=0)
        sock.connect(self.peer[0])
        sock.send_multipart(encode_peer_icanhaz())
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

    def _drop_superseded(self, built, sequence):
        """Forget the pending updates a sync at ``sequence`` shows applied or overtaken.

        An update pending since our sequence was S is kept only if the synced
        map holds its key at a sequence <= S under another UUID: nothing
        touched the key since, so the active has not applied it (yet).  If the
        map holds the key newer than S, or not at all while the cut is newer
        than S, the update may have been applied and overwritten: applying it
        on a takeover could turn the key back to an older value.  Dropping it
        loses at most an update no client was told of (it never saw a KVPUB).
        """
        pending = self._pending
        for uid, (msg, _ttl, _arrived, since) in list(pending.items()):
            entry = built.get(msg.key)
            if entry is None:
                superseded = sequence > since
            else:
                superseded = entry.uuid == uid or entry.sequence > since
            if superseded:
                del pending[uid]
                self.stats["pending_superseded"] += 1

    def _finish_sync(self, sequence):
        built, buffered = self._syncing, self._sync_buffer
        self._syncing, self._sync_buffer = None, []
        if self._sync_socket is not None:
            self.close_socket(self._sync_socket)
            self._sync_socket = None
        if sequence is None:  # abandoned
            return
        self.fsm.ready = True
        self.map = built
        self.sequence = self._assigned = sequence
        self._ttl = [(e.deadline, e.sequence, k) for k, e in built.items() if e.deadline is not None]
        heapq.heapify(self._ttl)
        self._drop_superseded(built, sequence)
        if self.store is not None:  # the journal describes the old map: write the new one
            self._journal_gap = False
            self.store.compact(self.map, self._expires, sequence)
        log.info("%s: synced from the peer at sequence %d (%d keys)", self.name, sequence, len(built))
        self.stats["synced"] += 1
        self._feed_progress = True
        for msg in buffered:
            if self._syncing is not None:  # a gap made us start again
                self._sync_buffer.append(msg)
            else:
                self._follow(msg)
