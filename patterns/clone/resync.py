"""The passive side of a Clone Binary Star pair: follow the active, re-sync from it, hold pending updates.

A passive server tracks the active's KVPUB stream (a SUB on its publisher,
the *feed*), checks every sequence, and re-syncs by snapshot from the
active on a gap, on a lost tail (the active's heartbeats carry its
sequence and nothing arrived since the last one), on a stalled sync, and
whenever it becomes passive, so it never silently falls behind.

Re-sync: ``ICANHAZ? "" "peer"`` (:func:`.protocol.encode_peer_icanhaz`)
from a DEALER whose routing id libzmq assigns, so no other peer can claim
the link; the snapshot carries each entry's sequence, UUID and properties
(ttl as the seconds left).  Feed messages arriving meanwhile are buffered
and followed after KTHXBAI.  Until a sync completes the server is not
*ready* (:attr:`.BinaryStar.ready`): it refuses the client vote.

Pending updates: client KVSETs reach every server; the passive keeps them
by UUID until the active's stream shows them.  On a takeover they are
applied, in arrival order, before any snapshot is answered (a client whose
request made the backup take over misses nothing).  They are dropped when
older than :data:`PENDING_TTL` seconds, and when a sync shows them applied
or overtaken (see :meth:`PairSync._drop_superseded`), so a takeover never
turns a key back to an older value.

Used from the server actor's loop only; not thread-safe.
"""
from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

import zmq

from zactors.actors import bstar

from .hashmap import Entry
from .protocol import (HUGZ, KTHXBAI, ProtocolError, decode_kvmsg, decode_properties, encode_peer_icanhaz,
                       parse_ttl)

__all__ = ["PairSync", "PENDING_TTL"]

log = logging.getLogger(__name__)

_monotonic = time.monotonic

#: seconds a pending update waits for the active's stream to show it (then the active lost it)
PENDING_TTL = 10.0
#: seconds a re-sync may go without a message before it starts again
SYNC_STALL = 5.0
#: UUIDs of the active's stream remembered before their KVSET reached us
MAX_SEEN = 100000


class PairSync:
    """The follower and re-sync state of ``server`` (a :class:`.CloneServer` of a pair)."""

    def __init__(self, server, max_pending: int) -> None:
        self.server = server
        self.stats = server.stats
        self.max_pending = max_pending
        # uuid -> (key, value, props, ttl, arrival time, our sequence then): updates not yet in the stream
        self.pending: OrderedDict[bytes, tuple[Any, ...]] = OrderedDict()
        self._seen: OrderedDict[bytes, None] = OrderedDict()  # uuids the stream showed before their KVSET
        self.syncing: dict[bytes, Entry] | None = None         # the map being built by a re-sync
        self._buffer: list[Any] = []
        self._socket = None
        self._deadline = 0.0
        self._peer_seq = 0
        self._progress = False     # the feed advanced since the last heartbeat
        self.feed = None

    def connect(self, publisher: str) -> None:
        """Follow the active's publisher."""
        server = self.server
        self.feed = server._peer_socket(zmq.SUB, rcvhwm=100000)
        self.feed.setsockopt(zmq.SUBSCRIBE, b"")
        self.feed.connect(publisher)
        server.add_reader(self.feed, self._on_feed)

    # -- pending client updates ---------------------------------------------------
    def hold(self, key, value, uid, props, ttl):
        """Passive: keep a client's KVSET until the active's stream shows it (matched by UUID)."""
        if not uid:
            self.stats["pending_without_uuid"] += 1
            return
        if self._seen.pop(uid, None) is not None or uid in self.pending:
            return  # shown already, or a client's resend: keep the first arrival (its sequence then)
        entry = self.server.map.get(key)
        if entry is not None and entry.uuid == uid:
            return  # a sync brought it before its KVSET reached us
        pending = self.pending
        pending[uid] = (key, value, props, ttl, _monotonic(), self.server.map.sequence)
        if len(pending) > self.max_pending:
            pending.popitem(last=False)
            self.stats["pending_dropped"] += 1

    def take_pending(self):
        """On a takeover: the pending updates, oldest first, as ``(key, value, uuid, props, ttl)``; forgets them."""
        pending, self.pending = self.pending, OrderedDict()
        self._seen.clear()
        return [(key, value, uid, props, ttl) for uid, (key, value, props, ttl, _at, _seq) in pending.items()]

    def expire(self, now):
        """Forget pending updates the active's stream did not show within :data:`PENDING_TTL`: applying
        them on a takeover much later would re-order the map."""
        pending, horizon = self.pending, now - PENDING_TTL
        while pending:
            arrived = next(iter(pending.values()))[4]
            if arrived > horizon:
                break
            pending.popitem(last=False)
            self.stats["pending_expired"] += 1
        while len(self._seen) > MAX_SEEN:
            self._seen.popitem(last=False)

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
        pending = self.pending
        for uid, (key, _value, _props, _ttl, _at, since) in list(pending.items()):
            entry = built.get(key)
            if entry is None:
                superseded = sequence > since
            else:
                superseded = entry.uuid == uid or entry.sequence > since
            if superseded:
                del pending[uid]
                self.stats["pending_superseded"] += 1

    # -- following --------------------------------------------------------------
    def on_heartbeat(self, state, peer_seq):
        """The peer's Binary Star heartbeat (its state, its sequence), after the state machine took it."""
        server = self.server
        if state == bstar.ACTIVE and server.fsm.state == bstar.PASSIVE and self.syncing is None:
            # A lost tail: a heartbeat ago the active was at _peer_seq, we are still below and nothing
            # arrived on the feed since.
            if server.map.sequence < self._peer_seq and not self._progress:
                self.resync("the active is at %d, we are at %d with no update arriving"
                            % (peer_seq, server.map.sequence))
            self._progress = False
        elif self.syncing is not None and _monotonic() > self._deadline:
            self.resync("snapshot from the peer stalled")
        self._peer_seq = peer_seq

    def _on_feed(self, frames):
        server = self.server
        if server.active:
            return
        try:
            msg = decode_kvmsg(frames)
        except ProtocolError:
            self.stats["malformed"] += 1
            return
        if msg.key == HUGZ:
            return
        uid = msg.uuid
        if uid and self.pending.pop(uid, None) is None:
            self._seen[uid] = None  # published before its KVSET reached us
        if self.syncing is not None:
            self._buffer.append(msg)
        elif server.fsm.state == bstar.PASSIVE:
            self._follow(msg)

    def _follow(self, msg):
        """Apply one KVPUB of the active, checking the sequence."""
        server = self.server
        if msg.sequence <= server.map.sequence:
            return
        if msg.sequence != server.map.sequence + 1:
            self.resync("gap: expected %d, got %d" % (server.map.sequence + 1, msg.sequence))
            return
        self._progress = True
        try:
            ttl = parse_ttl(decode_properties(msg.properties)) if msg.properties else None
        except ProtocolError:
            ttl = None
        server.follow(msg.key, msg.value, msg.sequence, msg.uuid, msg.properties, ttl)
        self.stats["followed"] += 1

    # -- re-syncing -------------------------------------------------------------
    def resync(self, reason):
        """Ask the active for the whole map (again)."""
        server = self.server
        if server.peer is None:
            return
        log.info("%s: re-syncing from the peer (%s)", server.name, reason)
        self.stats["resyncs"] += 1
        if self._socket is not None:
            server.close_socket(self._socket)
        self.syncing = {}
        server.fsm.ready = False
        self._buffer = []
        self._deadline = _monotonic() + SYNC_STALL
        # No routing id of ours: libzmq assigns one that no other peer can claim and take over.
        sock = self._socket = server._peer_socket(zmq.DEALER, rcvhwm=0)
        sock.connect(server.peer[0])
        sock.send_multipart(encode_peer_icanhaz())
        server.add_reader(sock, self._on_sync)

    def _on_sync(self, frames):
        if self.syncing is None:
            return
        try:
            msg = decode_kvmsg(frames)
            ttl = parse_ttl(decode_properties(msg.properties)) if msg.properties else None
        except ProtocolError:
            self.stats["malformed"] += 1
            return
        now = _monotonic()
        self._deadline = now + SYNC_STALL
        if msg.key == KTHXBAI:
            self._finish(msg.sequence)
            return
        deadline = None if ttl is None else now + ttl
        self.syncing[msg.key] = Entry(msg.value, msg.sequence, msg.uuid, msg.properties, deadline)

    def _finish(self, sequence):
        server = self.server
        built, buffered = self.syncing, self._buffer
        self.syncing, self._buffer = None, []
        server.close_socket(self._socket)
        self._socket = None
        server.fsm.ready = True
        self._drop_superseded(built, sequence)
        server.synced(built, sequence)
        log.info("%s: synced from the peer at sequence %d (%d keys)", server.name, sequence, len(built))
        self.stats["synced"] += 1
        self._progress = True
        for msg in buffered:
            if self.syncing is not None:  # a gap made us start again
                self._buffer.append(msg)
            else:
                self._follow(msg)
