"""The snapshots a Clone server sends (ICANHAZ? -> KVSYNC... KTHXBAI), with a global budget.

A snapshot is a consistent cut of the map at one sequence (a dict copy: the
entries are shared, so a cut costs a few dozen bytes a key), sent as a
cooperative task a chunk per step, only while the client's backlog in the
ROUTER is under ``window`` messages: it never drops an entry however large
the map or slow the client, and HUGZ, the pair's heartbeats and the other
clients keep flowing.  Snapshots started while the map did not change share
one cut.

Budgets (a peer can make us hold cuts by asking and never reading):

- ``budget``: the entries all live cuts may hold together, kept by the
  kernel's :class:`~zactors.actors.budget.Budget` (each cut a holder of its
  entries).  A request that would need a new cut past it waits in a queue (``max_waiting``
  requests; beyond that it is refused: dropped, counted and logged once a
  second at most; the client asks again after its timeout).  When a cut
  is released the waiting requests start together, on one new cut.  One
  cut is always allowed, however large the map.
- ``max_active``: snapshots sent at once (each may hold ``window``
  messages in the ROUTER and ``hwm`` in libzmq); more wait in the queue.
- Connections: a quarter of the open-file limit (less 32); one past it is
  shut at once and counted (``connections_refused``).
- A client that stops reading for ``timeout`` seconds, or disappears
  (unroutable), is dropped, releasing its cut.
- Routing ids: a connection with an id in use takes it over
  (``ROUTER_HANDOVER``, the kernel :class:`~zactors.actors.router.Router`'s
  default), so its requests are read and bounded like any other's; without
  it libzmq buffered up to RCVHWM unread messages of every duplicate.  A
  snapshot under way goes on to the id's newest connection.  With CURVE
  (``keys=True``) a snapshot is bound to the key that asked for it: a
  message of another key on its id ends it first (``peers_taken_over``), so
  what was cut for one key is not sent on to another that speaks; one that
  only listens gets the rest of that snapshot (a Clone map has no per-key
  rights: any accepted key may ask for it).

Counters (the server's): ``snapshots``, ``snapshots_sent``,
``snapshots_queued``, ``snapshots_refused``, ``snapshots_abandoned``,
``unroutable``.  Runs in the server actor's loop; not thread-safe.
"""
from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

from zactors.actors.budget import Budget
from zactors.actors.router import Router, fd_budget
from zactors.actors.sockets import KEEPALIVE

from .protocol import DISCOVERY, encode_kthxbai, encode_properties, decode_properties, pack_sequence

__all__ = ["Snapshots"]

log = logging.getLogger(__name__)

_monotonic = time.monotonic


class _Cut:
    """A copy of the map at one sequence, shared by the snapshots started while nothing changed."""

    __slots__ = ("entries", "sequence", "users")

    def __init__(self, entries, sequence):
        self.entries = entries
        self.sequence = sequence
        self.users = 0


class _SnapshotRouter(Router):
    """The snapshot ROUTER: a peer at its HWM is retried within 5 ms, not 50, so a fast reader never idles."""

    retry_max = 0.005


def _with_ttl(properties, ttl_text):
    props = decode_properties(properties)
    props["ttl"] = ttl_text
    return encode_properties(props)


class Snapshots:
    """The snapshot ROUTER of ``server`` and the snapshots in flight on it (see the module docstring).

    ``on_request(identity, frames)`` gets every request; the server decides
    (the Binary Star vote) and calls :meth:`start`.
    """

    #: properties frame of every KTHXBAI: the server's other endpoints (set by the server once bound)
    advertised = b""

    def __init__(self, server, on_request, *, window=2000, chunk=100, timeout=30.0, hwm=20000,
                 budget=2000000, max_active=64, max_waiting=10000, max_message=None, keys=False):
        self.server = server
        self.stats = server.stats
        self.window = window
        self.chunk = chunk
        self.timeout = timeout
        self.budget = Budget(budget)                    # entries held by live cuts (holders: the cuts)
        self.max_active = max_active
        self.max_waiting = max_waiting
        self._tasks: dict[bytes, Any] = {}              # identity -> (task, cut, peering)
        self._waiting: OrderedDict[bytes, tuple[bytes, bool, Any]] = OrderedDict()  # identity -> (subtree, peer, peering)
        self._stalled: dict[bytes, float] = {}          # identity -> when backpressure held it
        self._newest: _Cut | None = None
        self._refusal_logged = 0.0
        self.router = _SnapshotRouter(server, on_request, backlog=window + chunk + 16, high=window,
                                      on_held=self._on_held, on_drained=self._on_drained,
                                      on_unroutable=self._on_unroutable, sndhwm=hwm, max_message=max_message,
                                      max_frames=4,  # identity, ICANHAZ?, subtree (and a peer's marker)
                                      max_connections=fd_budget(0.25, 32),  # the map's journal needs fds too
                                      keys=keys, on_taken_over=self._on_taken_over,
                                      **KEEPALIVE)  # (no ZMTP heartbeats: see KEEPALIVE)

    def __len__(self):
        return len(self._tasks)

    def info(self):
        return {"active": len(self._tasks), "waiting": len(self._waiting), "held_entries": self.budget.used,
                "budget": self.budget.total}

    # -- starting -------------------------------------------------------------
    def start(self, identity, subtree, peer=False):
        """Send ``identity`` a snapshot of ``subtree`` now, or as soon as the budget allows.  Call it
        while the router's ``on_message`` handles the request (the snapshot is bound to its key)."""
        self.end(identity)  # a client asking again wants a new one
        self.stats["snapshots"] += 1
        if not self._waiting and self._admissible():
            self._run(identity, subtree, peer, self.router.peering(identity))
            return
        if len(self._waiting) >= self.max_waiting:
            self.stats["snapshots_refused"] += 1
            now = _monotonic()
            if now - self._refusal_logged > 1.0:
                self._refusal_logged = now
                log.warning("%s: snapshot request refused: %d waiting for the snapshot budget (%d entries held)",
                            self.server.name, len(self._waiting), self.budget.used)
            return
        self._waiting[identity] = (subtree, peer, self.router.peering(identity))
        if peer:  # the pair's re-sync goes first
            self._waiting.move_to_end(identity, last=False)
        self.stats["snapshots_queued"] += 1

    def _admissible(self):
        if len(self._tasks) >= self.max_active:
            return False
        newest = self._newest
        if newest is not None and newest.users and newest.sequence == self.server.map.sequence:
            return True  # shares the newest cut: costs nothing more
        budget = self.budget
        return budget.used == 0 or budget.used + len(self.server.map) <= budget.total

    def _run(self, identity, subtree, peer, peering):
        server = self.server
        cut, hashmap = self._newest, server.map
        if cut is None or not cut.users or cut.sequence != hashmap.sequence:
            cut = self._newest = _Cut(hashmap.entries.copy(), hashmap.sequence)
            budget = self.budget     # admissible: it fits whole (or is the only cut, charged the whole budget)
            budget.request(cut, min(len(cut.entries), budget.total))
        cut.users += 1
        task = server.start_task(self._send(identity, subtree, peer, cut),
                                 on_done=lambda task, identity=identity: self._done(identity, task))
        self._tasks[identity] = (task, cut, peering)

    def _admit(self):
        waiting = self._waiting
        while waiting and self._admissible():
            identity, (subtree, peer, peering) = waiting.popitem(last=False)
            self._run(identity, subtree, peer, peering)

    def _release(self, cut):
        cut.users -= 1
        if not cut.users:
            self.budget.forget(cut)
            if self._newest is cut:
                self._newest = None

    def endpoints(self, identity):
        """Answer a :data:`.protocol.DISCOVERY` request: the KTHXBAI alone, which names our endpoints."""
        self.router.send(identity, encode_kthxbai(self.server.map.sequence, DISCOVERY, self.advertised))
        self.stats["discoveries"] += 1

    # -- sending --------------------------------------------------------------
    def _send(self, identity, subtree, peer, cut):
        """Send the cut, a chunk per step; backpressure pauses the task."""
        entries, sequence = cut.entries, cut.sequence
        send, chunk = self.router.send, self.chunk
        details = peer or self.server.dialect.sync_details
        seq_frame = pack_sequence(sequence)
        n = 0
        now = _monotonic()
        for key, entry in entries.items():
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
        send(identity, encode_kthxbai(sequence, subtree, self.advertised))
        self.stats["snapshots_sent"] += 1

    def _done(self, identity, task):
        held = self._tasks.get(identity)
        if held is not None and held[0] is task:
            del self._tasks[identity]
            self._stalled.pop(identity, None)
            self._release(held[1])
            self.router.release(held[2])
            self._admit()

    # -- ending ---------------------------------------------------------------
    def end(self, identity):
        """Cancel ``identity``'s snapshot (sent or waiting) and forget its backlog."""
        waiting = self._waiting.pop(identity, None)
        if waiting is not None:
            self.router.release(waiting[2])
        held = self._tasks.pop(identity, None)
        self._stalled.pop(identity, None)
        if held is not None:
            held[0].cancel()
            self.router.drop(identity)
            self._release(held[1])
            self.router.release(held[2])
            self._admit()

    def cancel_all(self):
        for identity in list(self._waiting):
            self.end(identity)
        for identity in list(self._tasks):
            self.end(identity)

    def expire_stalled(self, now):
        """Drop the snapshots whose client has not read for ``timeout`` seconds."""
        if not self._stalled:
            return
        horizon = now - self.timeout
        for identity, since in list(self._stalled.items()):
            if since < horizon:
                log.info("%s: client %r stopped reading its snapshot; dropped", self.server.name, identity)
                self.stats["snapshots_abandoned"] += 1
                self.end(identity)

    def _on_held(self, identity):
        held = self._tasks.get(identity)
        if held is not None:
            held[0].pause()
            self._stalled[identity] = _monotonic()

    def _on_drained(self, identity):
        self._stalled.pop(identity, None)
        held = self._tasks.get(identity)
        if held is not None:
            held[0].resume()

    def _on_unroutable(self, identity, frames):
        self.stats["unroutable"] += 1
        held = self._tasks.pop(identity, None)
        self._stalled.pop(identity, None)
        if held is not None:  # its backlog is being cleared by the router itself
            held[0].cancel()
            self._release(held[1])
            self.router.release(held[2])
            self._admit()

    def _on_taken_over(self, identity, peering):
        """CURVE: a message of another key came on ``identity``: its snapshot (for the first key) ends."""
        self.end(identity)
