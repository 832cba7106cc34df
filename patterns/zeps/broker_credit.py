"""The ZEPS broker's credit budget: what it may have to hold for subscribers (a mixin of
:class:`.broker.Broker`).

Credit is honoured from one :class:`~zactors.actors.budget.Budget` for all
subscribers (``max_credit_total``, at most ``max_credit`` each).  A
subscriber holds what it was granted until it has drained it: PINGs (probes)
note what had been sent before them, and their PING-OKs release it.  To a
peering that asked (FEATURES ``tokens``) each probe is a PROBE with a random
token, and only the PROBE-OK echoing the token of its oldest probe releases
anything (another token: ``probes_forged``), so a peer that does not read
cannot say it did; a spec-only peer's bare PING-OK is trusted, unless
``require_tokens`` refuses its CREDIT (``refused_spec_only``).  Credit
beyond the budget waits: what comes back goes to each waiter up to its fair
share (the budget split evenly among the subscribers holding or waiting),
then first come first served; credit held unspent beyond a fair share is
revoked and granted again in turn while others wait (a pass over the
holders as soon as a CREDIT waits, then at most every ``_PASS`` seconds), so
subscribers that grant huge credit and never read stall only themselves.
A subscriber that reads never waits long: when its credit runs out while
more waits for the budget (a stall: timed, INFO ``credit.stalls``) it is
PINGed at once, and again on each PING-OK while it stalls, so what it
drained comes back within a round trip, and to it first up to its share
(its windows may add up to far more than the budget: 10 of 16 MiB over
64 MiB).  A peer gone with bytes
on their way keeps them in the budget (``_gone``) until it answers or its
connection is gone, or for ``expiry`` at most: a peer dropped as silent, or as
holding credit with no PING answered for ``expiry`` (``peers_stalled``: one that
never reads never sees them, whatever it sends), or gone that long without an
answer, has its bytes set apart (``_stale``, at most
``max_credit_total`` bytes more; past that they stay in the budget), so that
never-readers that spent their credit stall the others for ``expiry`` at most.
What they hold then sits in libzmq's queue to them (we send them nothing more)
until it drains or their connection goes: the node holds at most twice
``max_credit_total`` for subscribers.  Runs in the broker's loop only.
"""
from __future__ import annotations

import os
import time

from . import protocol as p
from .broker_peers import _REPLAY, log

__all__: list[str] = []

#: PINGs unanswered per peer at most (each notes how much had been sent before it)
_MAX_PROBES = 64
#: while credit waits, the shortest time between two passes over the holders (a pass is O(holders))
_PASS = 0.01
#: stalls longer than these (seconds) are counted apart: credit_stalls_over_10ms, ...
_STALL_BOUNDS = ((0.01, "10ms"), (0.1, "100ms"), (1.0, "1s"))
_monotonic = time.monotonic


class CreditBudget:
    """Credit granted, probed and released.  State: ``_windows`` (the Budget), ``_gone`` (peers gone holding
    bytes), ``_reclaimed`` (when the holders were last passed over), ``_pass_timer`` (the next pass, when
    one is due), ``_beats``."""

    _pass_timer = None

    def _credit(self, peer, amount):
        identity = peer.identity
        if self.require_tokens and not peer.tokens:
            self.stats["refused_spec_only"] += 1
            self._send(identity, p.invalid(
                "CREDIT refused: this broker serves subscribers that answer PROBEs (FEATURES tokens, a zactors "
                "extension): a bare PING-OK cannot show what was read"))
            return
        windows = self._windows
        granted = windows.request(identity, amount)
        if granted:
            self._grant(peer, granted)
        if windows.wanted(identity):
            self.stats["credit_deferred"] += 1
            if not peer.starved:
                peer.starved = True
                self._send(identity, p.invalid(
                    "credit budget: %d of %d bytes held for subscribers (at most %d each); %d bytes of "
                    "credit wait for them to drain" % (windows.used, windows.total, windows.per_holder,
                                                       windows.wanted(identity))))
            self._probe_holders()
        if not peer.probes:
            self._probe(peer)

    def _grant(self, peer, amount):
        peer.credit += amount
        peer.honoured += amount
        if peer.stalled is not None:
            self._unstall(peer)
        if peer.mode is _REPLAY and peer.identity not in self._replaying:
            self._replaying[peer.identity] = peer
            self._pump()
        elif peer.identity in self._members:  # a consumer-group member: its group delivers (broker_groups)
            self._group_credit(peer.identity)

    def _served(self, grants):
        """Credit that waited for the budget, granted now."""
        for identity, amount in grants:
            peer = self._peers.get(identity)
            if peer is not None:  # (a peer that left cancelled its wait)
                self._grant(peer, amount)
                if not self._windows.wanted(identity):
                    peer.starved = False

    def _short(self, peer):
        """``peer``'s credit does not cover its next message: delivery to it stops there (called once
        per stop, not per message).  If more credit waits for the budget, it stalls until some is
        granted: timed (INFO ``credit.stalls``), and PINGed now (and again on each PING-OK while it
        stalls), so that what it drained is known within a round trip and comes back to it in turn."""
        if self._windows.wanted(peer.identity):
            if peer.stalled is None:
                peer.stalled = _monotonic()
            if not peer.probes:
                self._probe(peer)
            self._pass_soon()  # (never a grant from in here: the delivery that called is not done)

    def _unstall(self, peer):
        """``peer``'s stall ends (credit granted, or it left): counted by how long it was."""
        waited = _monotonic() - peer.stalled
        peer.stalled = None
        stats = self.stats
        stats["credit_stalls"] += 1
        stats["credit_stall_ms"] += int(waited * 1000)
        if waited * 1000 > stats["credit_stall_max_ms"]:
            stats["credit_stall_max_ms"] = int(waited * 1000)
        for bound, name in _STALL_BOUNDS:
            if waited > bound:
                stats["credit_stalls_over_" + name] += 1

    def _stalls_info(self):
        """INFO ``credit.stalls``: how often and how long subscribers' credit ran out while their CREDIT
        waited for the budget (``count``, ``total_ms``, ``max_ms``, ``over_10ms``/``100ms``/``1s``),
        and how many stall ``now``."""
        stats = self.stats
        info = {"count": stats["credit_stalls"], "total_ms": stats["credit_stall_ms"],
                "max_ms": stats["credit_stall_max_ms"],
                "now": sum(peer.stalled is not None for peer in self._peers.values())}
        for _, name in _STALL_BOUNDS:
            info["over_" + name] = stats["credit_stalls_over_" + name]
        return info

    def _probe(self, peer):
        """PING ``peer`` (attached or gone) if it has bytes not known drained: its PING-OK says they are."""
        if peer.honoured - peer.credit > peer.acked:
            self._ping_peer(peer.identity)

    def _ping_peer(self, identity):
        """Every PING to a peer goes here: it notes what had been sent before it, for the PING-OK."""
        peer = self._peers.get(identity) or self._gone.get(identity) or self._stale.get(identity)
        if peer is None:
            self._send(identity, p.PING_FRAME)
        elif len(peer.probes) < _MAX_PROBES:  # (full: it answers nothing; see _reclaim)
            token = int.from_bytes(os.urandom(8), "big") if peer.tokens else None  # unpredictable
            if self._send(identity, p.PING_FRAME if token is None else p.probe(token)):
                peer.probes.append((peer.honoured - peer.credit, token))
                if peer.probed is None:
                    peer.probed = _monotonic()

    def _answered(self, peer, token):
        """If a PROBE-OK carrying ``token`` (a PING-OK: None) answers ``peer``'s oldest PING unanswered,
        the bytes sent before that PING (drained now), else None.  A PROBE-OK whose token is not that
        PING's is counted (``probes_forged``); a bare PING-OK answers only a bare PING."""
        probes = peer.probes
        if probes and probes[0][1] == token:
            return probes.popleft()[0]
        if token is not None:
            self.stats["probes_forged"] += 1
        return None

    def _ping_ok(self, identity, token=None):
        """A PING-OK (``token`` None) or a PROBE-OK from ``identity``: what its PING noted is drained."""
        peer = self._peers.get(identity)
        gone = peer is None
        if gone:
            peer = self._gone.get(identity)
            if peer is None:
                peer = self._stale.get(identity)
                drained = None if peer is None else self._answered(peer, token)
                if drained is not None:
                    if drained > peer.acked:
                        self._stale_bytes -= drained - peer.acked
                        peer.acked = drained
                    if drained >= peer.honoured:
                        del self._stale[identity]
                return
        drained = None if peer is None else self._answered(peer, token)
        if drained is None:
            return
        peer.probed = _monotonic() if peer.probes else None
        if drained > peer.acked:
            grants = self._windows.release(identity, drained - peer.acked)
            peer.acked = drained
            if gone and drained >= peer.honoured:  # all it was sent left us
                del self._gone[identity]
                grants += self._windows.forget(identity)
            self._served(grants)
        if peer.stalled is not None and not gone and not peer.probes:  # still dry: what did it drain since?
            self._probe(peer)

    def _release(self, peer, dropped):
        """``peer`` left: its unspent credit back to the budget; what is on its way stays until drained.

        ``dropped`` are the messages its outbox held (they never left): their
        DELIVER bytes are free again, and their PINGs will never be answered.
        """
        identity = peer.identity
        windows = self._windows
        windows.cancel(identity)
        peer.starved = False
        if peer.stalled is not None:
            self._unstall(peer)
        unsent = pings = 0
        for frames in dropped:
            frame = frames[0]
            if frame[2] == p.DELIVER:
                unsent += len(frame)
            elif frame[2] == p.PING or frame[2] == p.PROBE:
                pings += 1
        for _ in range(min(pings, len(peer.probes))):  # the newest PINGs were the ones still here
            peer.probes.pop()
        if not peer.probes:
            peer.probed = None
        free = peer.credit + min(unsent, peer.honoured - peer.credit - peer.acked)
        grants = windows.release(identity, free)
        peer.honoured -= free
        peer.credit = 0
        if peer.honoured > peer.acked:
            peer.left = _monotonic()
            gone = self._gone
            gone[identity] = peer
            if len(gone) > self.max_peers:  # bounded: the oldest is forgotten
                grants += windows.forget(gone.pop(next(iter(gone))).identity)
            self._ping_peer(identity)
        else:
            grants += windows.forget(identity)
        self._served(grants)

    def _reclaim(self):
        """Every beat: PING the peers gone or expired with bytes on their way (answered, or unroutable
        once their connection is gone), set apart those gone for ``expiry`` without an answer, and
        PING the holders whose drain is not known while credit waits."""
        self._beats += 1
        now = _monotonic()
        expired = now - self.expiry
        self._stall(now, expired)
        for identity, peer in list(self._gone.items()):
            if peer.left <= expired:
                self._abandon(identity)
        for table in (self._gone, self._stale):
            for identity, peer in list(table.items()):
                if len(peer.probes) < _MAX_PROBES:
                    self._ping_peer(identity)
                elif self._beats % 16 == 0:  # 64 unanswered: is its connection still there? (its sends are
                    self._send(identity, p.PING_FRAME)  # frozen: an unnoted PING's answer frees nothing early)
        self._probe_holders()

    def _stall(self, now, expired):
        """Drop the subscribers that hold credit and have answered no PING for ``expiry``
        (``peers_stalled``), whatever else they send: one that never reads never sees our PINGs behind
        what we sent it, and must not keep that in the budget by sending CREDITs or heartbeats."""
        stalled = []
        for identity in self._windows.holders():
            peer = self._peers.get(identity)
            if peer is None or not peer.probes:
                continue
            if peer.probed is None:  # (PINGs it took over from an earlier peering: from now on)
                peer.probed = now
            elif peer.probed <= expired:
                stalled.append(peer)
        for peer in stalled:
            self.stats["peers_stalled"] += 1
            if self.stats["peers_stalled"] % 1000 == 1:
                log.info("%s: peer %r answered no PING for %gs while holding credit; dropped (%d so far)",
                         self.name, peer.identity, self.expiry, self.stats["peers_stalled"])
            self._send(peer.identity, p.DETACH_FRAME)
            self._drop(peer)
            self._abandon(peer.identity)

    def _abandon(self, identity):
        """A peer gone (or dropped) that has not shown in ``expiry`` that it drained what it was sent:
        its bytes leave the credit budget for the stale ledger (``credit_abandoned``), which holds at
        most ``max_credit_total`` bytes and ``max_peers`` peers; past that they stay in the budget
        (``credit_stale_full``).  They are freed when it answers a PING or its connection goes."""
        peer = self._gone.get(identity)
        if peer is None:
            return
        inflight = peer.honoured - peer.acked
        if self._stale_bytes + inflight > self._windows.total or len(self._stale) >= self.max_peers:
            self.stats["credit_stale_full"] += 1
            peer.left = _monotonic()  # (tried again an expiry later)
            return
        del self._gone[identity]
        self._stale[identity] = peer
        self._stale_bytes += inflight
        self.stats["credit_abandoned"] += 1
        self._served(self._windows.forget(identity))

    def _unstale(self, identity):
        """The expired peer ``identity`` (if it is one) and the bytes it held leave the stale ledger."""
        peer = self._stale.pop(identity, None)
        if peer is not None:
            self._stale_bytes -= peer.honoured - peer.acked
        return peer

    def _restore(self, identity):
        """``identity`` attaches again on the same connection: what it holds apart returns to the budget."""
        peer = self._unstale(identity)
        if peer is not None:
            self._windows.charge(identity, peer.honoured - peer.acked)
        return peer

    def _probe_holders(self):
        """While credit waits (a pass at once, then at most every ``_PASS`` seconds, the next one on a
        timer: a subscriber that joins the waiters gets its share within that): PING the holders whose
        drain is not known, and put the credit they hold unspent beyond their fair share back in line
        behind the waiters (granted again in turn), so that peers sitting on credit they do not use
        cannot keep the others waiting, and a subscriber that reads keeps its share whatever the others ask."""
        now = _monotonic()
        windows = self._windows
        if not windows.waiting:
            return
        if now - self._reclaimed < _PASS:
            self._pass_soon()
            return
        self._reclaimed = now
        grants = []
        for identity in windows.holders():
            peer = self._peers.get(identity)
            if peer is None:
                continue
            if not peer.probes:
                self._probe(peer)
            unspent = min(peer.credit, windows.excess(identity))  # never below its fair share
            if unspent > 0 and identity not in self._replaying and not peer.reading:  # (a replay
                # step may be spending it, or a read off the hub bringing what it will spend it on)
                peer.credit -= unspent
                peer.honoured -= unspent
                self.stats["credit_revoked"] += 1
                grants += windows.revoke(identity, unspent)
        self._served(grants)

    def _pass_soon(self):
        """A pass over the holders (:meth:`_probe_holders`) on a timer, as soon as one may run."""
        if self._pass_timer is None:
            self._pass_timer = self.call_later(max(0.0, self._reclaimed + _PASS - _monotonic()), self._pass_due)

    def _pass_due(self):
        self._pass_timer = None
        self._probe_holders()
