"""The Clone server (12/CHP), alone or as one of a Binary Star pair.

::

    server = CloneServer(port=5556)                      # alone: always active
    server = CloneServer(0)                              # or on free ports: Clone(server.endpoint)
    primary = CloneServer(port=5556, role="primary", peer=endpoints("127.0.0.1", 5566))
    backup = CloneServer(port=5566, role="backup", peer=endpoints("127.0.0.1", 5556))
    server.call("INFO")                                  # role, state, sequence, keys, counters
    server.destroy()

Sockets (the spec's ports; each endpoint can be given on its own): snapshot
ROUTER at P, publisher PUB at P+1, collector SUB at P+2, and for a pair the
Binary Star state PUB at P+3.  ``port=0`` (or None) binds free ports, each
its own.  Every snapshot's KTHXBAI advertises the publisher and collector
endpoints (:func:`.protocol.encode_kthxbai`), so the snapshot endpoint is all
a client needs.

Behaviour, and where it improves on the Guide's Clone model 6:

- One sequence, strictly increasing: every set, delete and ttl expiry takes
  the next number and is published as a KVPUB (the KVSET's UUID and
  properties pass through; ttl stays relative seconds on the wire).
- The map (:mod:`.hashmap`): ttl is kept as a deadline on this server's
  monotonic clock.  Only the active server expires keys (a bounded batch
  per tick, in deadline order), then publishes the delete.
- Snapshots (:mod:`.snapshots`) are cooperative tasks sending a consistent
  cut of the map under backpressure, so a snapshot never drops an entry
  however large the map or slow the client, and HUGZ, the pair's
  heartbeats and other clients keep flowing.  A client that disappears or
  stops reading for ``snapshot_timeout`` seconds costs nothing more.  The
  cuts in flight share a budget (``snapshot_budget`` entries in all,
  ``max_snapshots`` at once): requests past it wait, or are refused once
  ``snapshot_queue`` wait.
- HUGZ every ``hugz`` seconds from the active server, from a reactor timer
  that nothing can starve (reactor rounds run due timers every round).
- Binary Star (:mod:`zactors.actors.bstar`): state heartbeats on their own
  sockets.  The passive server follows the active's stream, re-syncs from
  it and keeps client updates pending until the stream shows them
  (:mod:`.resync`); on takeover (a client's ICANHAZ? while the active is
  silent) the pending updates are applied and published *before* that
  snapshot is answered, and a takeover never turns a key back to an older
  value.  Split brain: the primary wins; the backup yields, logs and
  re-syncs.  A passive that has not completed a sync (just started, or
  re-syncing) refuses the client vote, so it never takes over with a
  partial map.  A request for the endpoints only (``ICANHAZ?``
  :data:`.protocol.DISCOVERY`) is answered in every state and is no vote.
- Malformed messages on any socket are dropped and counted (``malformed``).
- Size caps (``ZMQ_MAXMSGSIZE``) on every network socket: a frame over
  ``max_value`` bytes on the collector or the pair's feed, over
  :data:`.protocol.MAX_REQUEST` on the sockets that only take requests or
  subscriptions, closes the sender's connection unread (counted in
  ``disconnects`` on the snapshot socket, ``collector_disconnects`` on the
  collector: libzmq does not tell a refusal from a peer leaving).
- One update, applied once: a client resends an update it has no KVPUB for
  (same UUID, see :meth:`.Clone.set`); the server remembers the UUIDs of
  the last ``max_uuids`` updates it applied, journaled or followed (and
  those of the map it recovered or synced) and drops a KVSET whose UUID it
  holds (``duplicates``).
- ``persist=DIR`` keeps the map in the kernel's Journal (see :mod:`.persist`):
  a restarted server starts from it, at the same sequence.  An update is
  journaled *before* it is applied and published: its KVPUB (and any
  snapshot holding it) waits until the journal holds it at the ``ack``
  level: ``"written"`` (survives a crash of the process) or ``"synced"``
  (fsynced: survives a power loss; pair it with ``fsync="batch"``).  ``fsync``
  is ``"never"``, ``"batch"``, or a period in seconds as for a ZEPS broker
  (``"interval"``: every 0.1 s, the default).  When a
  write fails (a full disk) the updates waiting for it are refused, and so
  is every update until a retried write succeeds: the server publishes
  ``KVERR`` with the update's UUID and the reason (see
  :func:`.protocol.encode_kverr`; :meth:`.Clone.set` raises
  :class:`.UpdateRefused`), voids the refused records in the journal and
  goes on serving.  A ttl expiry is not a client's update: when the journal
  (or a sequence reservation) refuses its delete, the key expires again after
  the journal's ``retry`` seconds (counted in ``expiries_deferred``), never
  lost.  A sequence is handed out only once the journal's
  sequences file reserves it (:meth:`.MapJournal.covers`, ``reserve`` ahead;
  updates wait for that meanwhile, at most ``max_pending``): a restart after a power loss
  goes on past every sequence it may have published (a new *epoch*, in
  ``INFO``), so a client holding one re-syncs instead of dropping new
  updates as old.  ``files``: the journal's file layer (tests simulate
  power losses with it).
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

import logging
import os
import time
import uuid as _uuid
from collections import deque
from collections.abc import Sequence
from typing import Any

import msgpack
import zmq

from zactors.actors import bstar
from zactors.actors.actor import Actor, Reply, command
from zactors.actors.auth import Keypair, curve_client, curve_server
from zactors.actors.bstar import ACTIVE, BinaryStar, decode_state, encode_state
from zactors.actors.journal import JournalError
from zactors.actors.router import count_disconnects
from zactors.actors.sockets import limit_size
from zactors.actors.speedups import send_message

from .hashmap import Entry, Hashmap, RecentIds
from .persist import MapJournal
from .protocol import (DISCOVERY, MAX_KEY, MAX_REASON, MAX_REQUEST, MAX_VALUE, RESERVED_KEYS, SPEC, Dialect,
                       ProtocolError, decode_icanhaz, dialect as _dialect, encode_kverr, encode_properties,
                       frame_limit, is_peer_icanhaz, pack_sequence, parse_kvset)
from .resync import PairSync
from .snapshots import Snapshots

#: frames of a kvmsg (key, sequence, UUID, properties, body): what the collector and the pair's sockets take
_KVMSG_FRAMES = 5

__all__ = ["CloneServer", "endpoints"]

log = logging.getLogger(__name__)

_monotonic = time.monotonic


def endpoints(host: str = "127.0.0.1", port: int = 5556, transport: str = "tcp") -> tuple[str, ...]:
    """``(snapshot, publisher, collector, state)`` endpoints of a server at base ``port``."""
    return tuple("%s://%s:%d" % (transport, host, port + i) for i in range(4))


def _expires(ttl, value):
    """The wall-clock expiry the journal keeps for a change, or None."""
    return None if ttl is None or not value else time.time() + ttl


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
                 fsync: str | float = "interval", ack: str = "written", max_value: int = MAX_VALUE,
                 max_uuids: int = 100000, reserve: int = 100000, files: Any = None,
                 name: str | None = None) -> None:
        if role not in (None, "primary", "backup"):
            raise ValueError("role must be None (alone), 'primary' or 'backup'")
        if ack not in ("written", "synced"):
            raise ValueError("ack must be 'written' or 'synced', not %r" % (ack,))
        if port is not None and not isinstance(port, int):   # CloneServer("tcp://..."), as the brokers are made
            raise TypeError("CloneServer(port): the base port is a number (0 for free ports), not %r; give "
                            "endpoints as snapshot=, publisher=, collector=" % (port,))
        if port:
            defaults = endpoints(host, port)
        else:
            defaults = tuple("tcp://%s:*" % host for _ in range(4))
        self.endpoints: list[str | None] = [snapshot or defaults[0], publisher or defaults[1],
                                            collector or defaults[2], state or defaults[3]]
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
        self.ack = ack
        self.max_value = max_value
        self.max_uuids = max_uuids
        self.reserve = reserve
        self.files = files
        self.name = name or "clone-%s" % (role or "server")

    # -- setup ----------------------------------------------------------------
    def setup(self) -> None:
        self.map = Hashmap()
        self.store = None
        self._journal_gap = False   # a followed update the journal refused: compact from the map
        if self.persist is not None:
            period = isinstance(self.fsync, (int, float)) and not isinstance(self.fsync, bool)
            self.store = MapJournal(self, self.persist, fsync="interval" if period else self.fsync,
                                    interval=float(self.fsync) if period else 0.1, ack=self.ack,
                                    on_durable=self._publish_durable, on_error=self._journal_failed,
                                    reserve=self.reserve, files=self.files, on_reserved=self._reserved)
            self.map.replace(*self.store.recover())
        self.applied = RecentIds(self.max_uuids)   # UUIDs of the updates applied (or journaled): resends dropped
        self._remember(self.map.entries, self.map.sequence)
        self._assigned = self.map.sequence   # the last sequence handed out (journaled; published once durable)
        self._outbox: deque[tuple[Any, ...]] = deque()  # (journal seq, sequence, key, value, uuid, props, ttl)
        self._waiting: deque[tuple[Any, ...]] = deque()  # (key, value, uuid, props, ttl): for a reservation
        self._expiring: dict[bytes, tuple[bytes, int]] = {}  # uuid -> (key, sequence) of expiries not yet durable
        curve = self.curve
        self.snapshots = Snapshots(self, self._on_snapshot, window=self.window, chunk=self.chunk,
                                   timeout=self.snapshot_timeout, hwm=self.snapshot_hwm, budget=self.snapshot_budget,
                                   max_active=self.max_snapshots, max_waiting=self.snapshot_queue,
                                   max_message=MAX_REQUEST, keys=curve is not None)
        self.pub = self.socket(zmq.PUB, sndhwm=100000)
        limit_size(self.pub, MAX_REQUEST)                     # it takes only subscriptions
        self.collector = self.socket(zmq.SUB, rcvhwm=100000)
        limit_size(self.collector, frame_limit(self.max_value), _KVMSG_FRAMES)  # more frames: dropped unread
        self.collector.setsockopt(zmq.SUBSCRIBE, b"")
        count_disconnects(self, self.collector, "collector_disconnects")
        for sock in (self.snapshots.router.socket, self.pub, self.collector):
            if curve is not None:
                curve_server(sock, curve)
        self.endpoints[0] = self.snapshots.router.bind(self.endpoints[0])
        # Actor.bind: a restarted server rebinds its endpoints while the old ports are being released
        self.endpoints[1] = self.bind(self.pub, self.endpoints[1])  # type: ignore[arg-type]  # set above
        self.endpoints[2] = self.bind(self.collector, self.endpoints[2])  # type: ignore[arg-type]  # set above
        self.add_reader(self.collector, self._on_collect)
        self.snapshots.advertised = encode_properties({"publisher": self.endpoints[1], "collector": self.endpoints[2]})
        self.pair = self.state_sub = None
        if self.role is None:
            self.fsm = None
            self.endpoints[3] = None
        else:
            self.fsm = BinaryStar(self.role == "primary", self.heartbeat, _monotonic(), self._on_state_change)
            self.pair = PairSync(self, self.max_pending)
            self.state_pub = self.socket(zmq.PUB)
            limit_size(self.state_pub, MAX_REQUEST)
            if curve is not None:
                curve_server(self.state_pub, curve)
            self.endpoints[3] = self.bind(self.state_pub, self.endpoints[3])  # type: ignore[arg-type]  # set above
            self.call_every(self.heartbeat, self._send_state)
            if self.peer:
                self._connect_peer(self.peer)
        self.call_every(self.hugz, self._send_hugz)
        self.call_every(0.05, self._expire)
        self.call_every(min(1.0, self.snapshot_timeout / 2), self._housekeeping)

    def _peer_socket(self, kind, limit=None, **options):
        """A socket to the pair's peer: CURVE as ours, frames capped at ``limit`` (default: a kvmsg's)."""
        sock = self.socket(kind, **options)
        limit_size(sock, frame_limit(self.max_value) if limit is None else limit, _KVMSG_FRAMES)
        if self.curve is not None:
            secret = getattr(self.curve, "secret", self.curve)
            curve_client(sock, self.curve, self.peer_public or zmq.curve_public(secret))
        return sock

    def _connect_peer(self, peer):
        snapshot, publisher, _collector, state = peer
        self.peer = (snapshot, publisher, _collector, state)
        self.state_sub = self._peer_socket(zmq.SUB, MAX_REQUEST)
        self.state_sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.state_sub.connect(state)
        self.add_reader(self.state_sub, self._on_state)
        self.pair.connect(publisher)

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()

    @property
    def endpoint(self) -> str:
        """The snapshot endpoint: all a :class:`.Clone` client needs (as ``broker.endpoint`` elsewhere)."""
        return self.endpoints[0]  # type: ignore[return-value]  # bound in setup, before the constructor returns

    @property
    def active(self) -> bool:
        return self.fsm is None or self.fsm.state == bstar.ACTIVE

    @property
    def sequence(self) -> int:
        """The sequence of the last update published (the map's)."""
        return self.map.sequence

    # -- commands ---------------------------------------------------------------
    @command(reply=True)
    def info(self) -> dict[str, Any]:
        """INFO: name, Binary Star role and state, the map's sequence and size, persistence and budgets."""
        fsm, pair, store = self.fsm, self.pair, self.store
        return {
            "name": self.name,
            "role": self.role or "alone",
            "state": "active" if fsm is None else fsm.name,
            "sequence": self.map.sequence,
            "keys": len(self.map),
            "ttl_keys": self.map.ttl_keys() if len(self.map) < 100000 else None,
            "clients_syncing": len(self.snapshots),
            "snapshots": self.snapshots.info(),
            "pending": len(pair.pending) if pair else 0,
            "syncing": pair is not None and pair.syncing is not None,
            "ready": fsm.ready if fsm else True,
            "peer_state": bstar.STATES.get(fsm.peer_state) if fsm else None,
            "peer_silent": fsm.peer_silent(_monotonic()) if fsm else None,
            "endpoints": list(self.endpoints),
            "dialect": self.dialect.name,
            "persist": None if store is None else {"directory": store.directory, "generation": store.generation,
                                                   "compactions": store.compactions, "ack": self.ack,
                                                   "unpublished": len(self._outbox),
                                                   "waiting": len(self._waiting), "epoch": store.epoch,
                                                   "reserved": store.reserved,
                                                   "error": str(store.journal.error or "") or None},
            "counters": dict(self.stats),
        }

    @command(reply=True)
    def get(self, key: bytes | str) -> bytes | None:
        """GET: the value of ``key`` in the server's map, or None."""
        entry = self.map.get(key if isinstance(key, bytes) else key.encode())
        return None if entry is None else entry.value

    @command(deferred=True)
    def keys(self, reply: Reply, prefix: bytes | str = b"", limit: int = 1000, preview: int | None = None,
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

        A cooperative task (:meth:`.Hashmap.listing`: bounded work per loop
        round, no sort of the whole map), so a large map never holds the
        loop; it lists the keys there when it was asked, less those deleted
        meanwhile.
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
        self.start_task(self.map.listing(prefix, max(0, int(limit)), preview, delimiter), on_done=done)

    @command(reply=True)
    def dump(self, prefix: bytes | str = b"", limit: int = 100000) -> dict[bytes, bytes]:
        """``{key: value}`` for keys starting with ``prefix`` (at most ``limit``)."""
        return self.map.dump(prefix if isinstance(prefix, bytes) else prefix.encode(), limit)

    @command("PEER", reply=True)
    def _set_peer(self, snapshot, publisher, state):
        if self.fsm is None:
            raise ValueError("a server without a role has no peer")
        if self.state_sub is not None:
            raise ValueError("peer already set")
        self._connect_peer((snapshot, publisher, None, state))
        return True

    # -- client updates: the hot path -------------------------------------------
    def _on_collect(self, frames):
        # The common case inline (two Python calls per update, three with a UUID, where the general
        # path takes eight: tests/patterns/clone/test_hot_path.py): an active server without a
        # journal, a well-formed KVSET without properties (no ttl).  The checks are parse_kvset's;
        # anything else takes it.
        fsm = self.fsm              # (self.active, without the property's call)
        if (self.store is None and len(frames) == 5 and not frames[3] and 0 < len(frames[0]) <= MAX_KEY
                and len(frames[1]) == 8 and len(frames[2]) in (0, 16) and frames[0] not in RESERVED_KEYS
                and (fsm is None or fsm.state == ACTIVE)):
            key, _seq, uid, _props, value = frames
            if uid and not self.applied.add_new(uid):
                self.stats["duplicates"] += 1   # a client's resend of an update applied already
                return
            hashmap = self.map      # Hashmap.set without a ttl, inline: no call on the hot path
            hashmap.sequence = seq = hashmap.sequence + 1
            if value:
                hashmap.entries[key] = Entry(value, seq, uid, b"", None)
            else:
                hashmap.entries.pop(key, None)
            pub = self.pub
            send_message(pub, pub.handle, (key, pack_sequence(seq), uid, b"", value))
            self.stats["updates"] += 1
            return
        try:
            key, uid, props, value, ttl = parse_kvset(frames)
        except ProtocolError as exc:
            self.stats["malformed"] += 1
            log.debug("%s: bad KVSET dropped: %s", self.name, exc)
            return
        if uid and uid in self.applied:
            self.stats["duplicates"] += 1   # a client's resend of an update applied already
            return
        if self.active:
            self._apply(key, value, uid, props, ttl)
        else:
            self.pair.hold(key, value, uid, props, ttl)

    def _apply(self, key, value, uid, props, ttl):
        """Active: give a client update the next sequence, apply it and publish it.

        With a journal it is journaled now, and applied and published once
        durable (:meth:`_publish_durable`), or refused (:meth:`_refuse`)."""
        if self.store is not None:
            self._journal(key, value, uid, props, ttl)
            return
        if uid:
            self.applied.add(uid)
        self.map.set(key, value, self.map.sequence + 1, uid, props, ttl)
        pub = self.pub
        send_message(pub, pub.handle, (key, pack_sequence(self.map.sequence), uid, props, value))
        self.stats["updates"] += 1

    # -- persistence: journaled before published ----------------------------------
    def _journal(self, key, value, uid, props, ttl):
        """Journal one change at the next sequence, to publish once durable; False if refused.

        While the sequence is not reserved yet the change waits (in order) for the reservation."""
        seq = self._assigned + 1
        try:
            if self._waiting or not self.store.covers(seq):
                if len(self._waiting) >= self.max_pending:
                    raise JournalError("%d updates wait for a sequence reservation" % len(self._waiting))
                self._waiting.append((key, value, uid, props, ttl))
                if uid:
                    self.applied.add(uid)
                return True
        except JournalError as exc:
            self._refuse(uid, exc)
            return False
        return self._append(key, value, uid, props, ttl)

    def _append(self, key, value, uid, props, ttl):
        """Journal one change at the next sequence (reserved); False if refused."""
        seq = self._assigned + 1
        try:
            jseq = self.store.append(key, msgpack.packb((seq, uid, props, value, _expires(ttl, value))))
        except JournalError as exc:
            self._refuse(uid, exc)
            return False
        self._assigned = seq
        if uid:
            self.applied.add(uid)   # also while it waits for the journal: a resend meanwhile is a duplicate
        self._outbox.append((jseq, seq, key, value, uid, props, ttl))
        return True

    def _publish_durable(self, jseq):
        """The journal holds everything up to ``jseq`` (None: all) at the ack level: apply and publish it."""
        outbox = self._outbox
        if not outbox:
            return
        pub, now, put = self.pub, _monotonic(), self.map.set
        expiring = self._expiring
        while outbox and (jseq is None or outbox[0][0] <= jseq):
            _jseq, seq, key, value, uid, props, ttl = outbox.popleft()
            if expiring:
                expiring.pop(uid, None)
            put(key, value, seq, uid, props, ttl, now)
            send_message(pub, pub.handle, (key, pack_sequence(seq), uid, props, value))
            self.stats["updates"] += 1

    def _reserved(self, error):
        """A sequence reservation was written (journal the changes waiting for it), or failed (refuse them)."""
        waiting = self._waiting
        if error is not None:
            self._waiting = deque()
            for item in waiting:
                self._refuse(item[2], error)
            return
        while waiting and self.store.covers(self._assigned + 1):
            self._append(*waiting.popleft())

    def _journal_failed(self, exc):
        """A journal write (or fsync) failed: refuse every update waiting for it, and void their records."""
        refused, self._outbox = self._outbox, deque()
        if refused:
            self.store.void(refused[0][0], refused[-1][0])
        for item in refused:
            self._refuse(item[4], exc)
        self._assigned = self.map.sequence  # the refused sequences were never published: hand them out again
        log.error("%s: journal failed (%s): %d update(s) refused; refusing updates until a write succeeds",
                  self.name, exc, len(refused))

    def _refuse(self, uid, exc):
        """Tell the client (by the update's UUID) that its update was not applied; an expiry's delete
        is tried again after the journal's ``retry`` seconds instead (counted: ``expiries_deferred``)."""
        expiry = self._expiring.pop(uid, None) if self._expiring else None
        if expiry is not None:
            key, seq = expiry
            entry = self.map.entries.get(key)
            if entry is not None and entry.sequence == seq:  # (else changed since: its own ttl holds)
                self.map.defer(key, entry, _monotonic() + self.store.retry)
            self.stats["expired"] -= 1
            self.stats["expiries_deferred"] += 1
            log.debug("%s: expiry of %r deferred: %s", self.name, key, exc)
            return
        self.stats["refused"] += 1
        pub = self.pub
        send_message(pub, pub.handle, encode_kverr(uid, str(exc).encode("utf-8", "replace")[:MAX_REASON]))

    def follow(self, key: bytes, value: bytes, sequence: int, uid: bytes, props: bytes, ttl: float | None) -> None:
        """Passive: apply an update of the active's stream (and journal it; nothing is published)."""
        self.map.set(key, value, sequence, uid, props, ttl)
        self._assigned = sequence
        if uid:
            self.applied.add(uid)
        if self.store is None:
            return
        try:
            self.store.record(key, sequence, uid, props, value, _expires(ttl, value))
        except JournalError as exc:
            self.stats["journal_refused"] += 1
            self._journal_gap = True
            log.debug("%s: journal refused a followed update: %s", self.name, exc)

    def synced(self, entries: dict[bytes, Entry], sequence: int) -> None:
        """Passive: a re-sync brought the whole map at ``sequence``."""
        self.map.replace(entries, sequence)
        self._assigned = sequence
        self._remember(entries, sequence)
        if self.store is not None:  # the journal describes the old map: write the new one
            self._journal_gap = False
            self.store.compact(self.map.entries, self.map.expires_at, sequence)

    def _remember(self, entries: dict[bytes, Entry], sequence: int) -> None:
        """Remember the UUIDs of a recovered or synced map's recent changes (at most ``max_uuids``: one
        pass, no sort)."""
        horizon = sequence - self.max_uuids
        self.applied.update(e.uuid for e in entries.values() if e.sequence > horizon)

    # -- timers -----------------------------------------------------------------
    def _expire(self):
        if not self.active:
            return
        now, pub = _monotonic(), self.pub
        for key, entry in self.map.due(now, self.expire_batch):
            uid = _uuid.uuid4().bytes
            self.stats["expired"] += 1
            if self.store is not None:  # journaled first: the delete is applied once durable
                self._expiring[uid] = (key, entry.sequence)   # refused (now or later): deferred, not lost
                if not self._journal(key, b"", uid, entry.properties, None):
                    return
                continue
            self.map.set(key, b"", self.map.sequence + 1, uid, entry.properties, None)
            send_message(pub, pub.handle, (key, pack_sequence(self.map.sequence), uid, entry.properties, b""))

    def _send_hugz(self):
        if self.active:
            self.pub.send_multipart(self.dialect.hugz(self.map.sequence, _uuid.uuid4().bytes))

    def _housekeeping(self):
        now = _monotonic()
        store = self.store
        if store is not None:
            if self._journal_gap and store.journal.error is None:
                self._journal_gap = False
                store.compact(self.map.entries, self.map.expires_at, self.map.sequence)
            else:
                store.maybe_compact(self.map.entries, self.map.expires_at, self.map.sequence,
                                    [(key, msgpack.packb((seq, uid, props, value, _expires(ttl, value))))
                                     for _jseq, seq, key, value, uid, props, ttl in self._outbox])
        self.snapshots.expire_stalled(now)
        if self.pair is not None and not self.active:
            self.pair.expire(now)

    # -- snapshot requests: the Binary Star vote ----------------------------------
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
        if subtree == DISCOVERY:  # endpoints only, in any state: no vote (a client learns a backup early)
            self.snapshots.endpoints(identity)
            return
        if self.fsm is not None and not self.fsm.handle(bstar.CLIENT_REQUEST, _monotonic()):
            self.stats["requests_refused"] += 1
            if not self.fsm.ready:
                self.stats["requests_refused_unsynced"] += 1
            return
        self.snapshots.start(identity, subtree)

    # -- Binary Star ------------------------------------------------------------
    def _send_state(self):
        self.state_pub.send_multipart(encode_state(self.fsm.advertised, self.map.sequence))

    def _on_state(self, frames):
        decoded = decode_state(frames)
        if decoded is None:
            self.stats["malformed"] += 1
            return
        state, peer_seq = decoded
        self.fsm.handle(state, _monotonic())
        self.pair.on_heartbeat(state, peer_seq)

    def _on_state_change(self, old, new, reason):
        if new == bstar.ACTIVE:
            self._take_over(reason)
        elif new == bstar.PASSIVE:
            if old == bstar.ACTIVE:
                log.warning("%s: yielding to the peer (%s); re-syncing from it", self.name, reason)
                self.stats["yielded"] += 1
                self.snapshots.cancel_all()
            self.pair.resync("became passive")

    def _take_over(self, reason):
        """Become active: apply and publish the pending client updates, before any snapshot."""
        pending = self.pair.take_pending()
        for key, value, uid, props, ttl in pending:
            self._apply(key, value, uid, props, ttl)
        self.stats["takeovers"] += 1
        log.info("%s: active at sequence %d (%s); %d pending update(s) applied",
                 self.name, self.map.sequence, reason, len(pending))
