"""The ZEPS broker's peers: one record per peering, what the ROUTER says about them, and their liveness
(a mixin of :class:`.broker.Broker`).

A peering (a client DEALER) attaches one stream; its :class:`_Peer` holds
its subscription, its credit and its mode (live or replay).  The kernel's
:class:`~zactors.actors.router.Router` reports peers that are gone, held
(their transport backlog is full) or drained; the broker PINGs a peer silent
for ``heartbeat`` seconds and drops one silent for ``expiry``.  Runs in the
broker's loop only.
"""
from __future__ import annotations

import logging
import time
from collections import deque

from . import protocol as p

__all__: list[str] = []

log = logging.getLogger("zactors.patterns.zeps.broker")  # one logger for the whole broker
_monotonic = time.monotonic
_LIVE, _REPLAY = "live", "replay"


class _Peer:
    __slots__ = ("identity", "stream", "filter", "credit", "next", "floor", "mode", "published",
                 "key", "may_publish", "delivered", "held", "gaps", "honoured", "acked", "probes", "starved",
                 "reading", "fetched", "since", "resume", "left", "probed", "producer", "journaled", "ids",
                 "fence", "stalled", "tokens")

    def __init__(self, identity, stream, key):
        self.identity = identity
        self.stream = stream
        self.key = key            # CURVE public key (z85) or None
        self.filter = None        # a Filter once subscribed
        self.credit = 0
        self.next = 0             # next sequence to deliver (replay mode)
        self.floor = 0            # live mode: deliver only sequences >= floor
        self.mode = None
        self.published = 0        # last sequence this peer published
        self.may_publish = None   # permission, decided on the first PUBLISH
        self.delivered = 0
        self.held = False         # its transport backlog is full: no more sends until drained
        self.gaps = False         # it asked (FEATURES "gaps") to be told of retention gaps with GAP
        self.honoured = 0         # credit granted from the budget, ever; sent so far: honoured - credit
        self.acked = 0            # of what was sent, bytes known drained (a PING-OK came back after them)
        self.probes = deque()     # per unanswered PING: (the bytes sent before it, its PROBE's token or None)
        self.starved = False      # its credit waits for the budget (and it was told)
        self.reading = False      # a replay read off the hub is queued or under way for it
        self.fetched = None       # what that read brought: (its first sequence, records or the error), served a batch per step
        self.since = None         # SUBSCRIBE-SINCE: the time whose sequence that read looks up
        self.resume = None        # the client's EPOCH: the epoch its position is from, and that position
        self.left = None          # when it left with bytes not known drained (monotonic seconds)
        self.probed = None        # since when a PING of it waits for its answer, with none answered since
        self.stalled = None       # since when its credit ran out while its CREDIT waited for the budget
        self.tokens = False       # it asked (FEATURES "tokens") for PROBEs: its bare PING-OKs release nothing
        self.producer = None      # PUBLISH-ID: the producer id it publishes as (a refusal tells it "journaled")
        self.journaled = 0        # that producer's last sequence known at the acknowledgement level
        self.ids = deque()        # (journal seq, producer seq) of its PUBLISH-IDs appended, not yet at the level
        self.fence = None         # (first producer seq the journal refused, why): later ones are refused too




class Peers:
    """Peerings: sends, drops, transport events, liveness.  State: ``_peers`` (identity -> _Peer),
    ``_alive`` (Liveness), ``_alive_timer``, ``_heard`` (identities heard from since the last sweep)."""

    def _send(self, identity, frame):
        return self.router.send(identity, [frame])

    def _invalid(self, identity, reason):
        stats = self.stats
        stats["invalid"] += 1
        if stats["invalid"] % 1000 == 1:
            log.warning("%s: invalid command from %r: %s (%d so far)", self.name, identity, reason, stats["invalid"])
        self._send(identity, p.invalid(reason))

    def _unattached(self, identity, what):
        """A stream command from a peer with no peering: INVALID, then DETACH (attach again)."""
        self._invalid(identity, "%s before ATTACH (no peering: attach first)" % what)
        self._send(identity, p.DETACH_FRAME)

    def _drop(self, peer):
        identity = peer.identity
        if self._peers.pop(identity, None) is None:
            return
        peer.stream.peers.pop(identity, None)
        self._delivered_gone += peer.delivered
        if not peer.stream.peers:
            peer.stream.idle_since = _monotonic()
            self._idle.pop(peer.stream.name, None)
            self._idle[peer.stream.name] = peer.stream  # (the last in idle order)
        if peer.filter is not None:
            peer.stream.matcher.remove(peer.filter)
        self._replaying.pop(identity, None)
        self._cold_waiting.pop(identity, None)
        self._alive.forget(identity)
        if identity in self._members:  # a consumer-group member: what it held goes to the others
            self._group_left(peer)
        self._release(peer, self.router.drop(identity))

    def _on_unroutable(self, identity, frames):
        peer = self._peers.get(identity)
        if peer is not None:
            self.stats["peers_lost"] += 1
            self._drop(peer)
        elif identity not in self._gone and identity not in self._stale and frames[0] != p.DETACH_OK_FRAME:
            # (the answer to a DETACH, or a PING to a peer that left, finds its connection closed: a clean end)
            self.stats["unroutable"] += 1
        if identity in self._gone and identity not in self._peers:  # its connection is gone: so are its bytes
            del self._gone[identity]
            self._served(self._windows.forget(identity))
        self._unstale(identity)

    def _taken_over(self, peer):
        """``peer``'s routing id is another connection's now (ROUTER_HANDOVER), one with another key: its
        peering ends as an expired one does (what it did not drain leaves the credit budget)."""
        self.stats["peers_taken_over"] += 1
        if self.stats["peers_taken_over"] % 1000 == 1:
            log.warning("%s: routing id %r taken over by another key; its peering ends (%d so far)", self.name,
                        peer.identity, self.stats["peers_taken_over"])
        self._drop(peer)
        self._abandon(peer.identity)

    def _on_overflow(self, identity, frames):
        self.stats["overflow"] += 1  # never for subscribers: held at transport_high, limit is twice that

    def _on_held(self, identity):
        peer = self._peers.get(identity)
        if peer is not None:
            peer.held = True
            self.stats["held"] += 1

    def _on_drained(self, identity):
        peer = self._peers.get(identity)
        if peer is not None:
            peer.held = False
            if peer.mode is _REPLAY and peer.credit and identity not in self._replaying:
                self._replaying[identity] = peer
                self._pump()

    def _arm_liveness(self):
        deadline = self._alive.next_deadline()
        self._alive_timer = None if deadline is None else self.call_later(
            max(0.0, deadline - _monotonic()), self._check_liveness)

    def _check_liveness(self):
        heard, self._heard = self._heard, set()
        touch, peers = self._alive.touch, self._peers
        for identity in heard:  # touched here, not per message: the hot path only adds to a set
            if identity in peers:
                touch(identity)
        evasive, expired = self._alive.check()
        for identity in evasive:
            self._ping_peer(identity)
        for identity in expired:
            peer = self._peers.get(identity)
            if peer is not None:
                self.stats["peers_expired"] += 1
                if self.stats["peers_expired"] % 1000 == 1:  # (a line per peer: a flood of them is a flood)
                    log.info("%s: peer %r silent for %gs; dropped (%d so far)", self.name, identity, self.expiry,
                             self.stats["peers_expired"])
                self._send(identity, p.DETACH_FRAME)
                self._drop(peer)
                self._abandon(identity)  # what it did not drain: out of the credit budget
        self._arm_liveness()
