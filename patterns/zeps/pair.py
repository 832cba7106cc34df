"""A ZEPS broker pair: Binary Star failover and the link that replicates the active's journals.

Two brokers, ``role="primary"`` and ``role="backup"``, each bind a pair
socket (``pair_endpoint``) and connect to the other's (``peer``)::

    a = Broker(dir_a, "tcp://*:5570", role="primary", pair_endpoint="tcp://*:5571", peer="tcp://b:5571")
    b = Broker(dir_b, "tcp://*:5570", role="backup",  pair_endpoint="tcp://*:5571", peer="tcp://a:5571")

(``peer`` may also come later: ``broker.call("PEER", endpoint)``.)  One of
them is active and serves clients; the other is passive: it journals every
record the active journaled (same stream, sequence, timestamp, producer and
epoch history: :mod:`.replication`) and refuses clients with INVALID
``"PASSIVE: ..."`` naming the active's client endpoint.

Failover is the kernel's Binary Star (:mod:`zactors.actors.bstar`, the rules
Clone follows): each side sends its state every ``heartbeat`` seconds; a
client's ATTACH to the passive while the active has been silent for two
heartbeats is its vote, and makes the passive active; a passive that has not
caught up (:attr:`BinaryStar.ready`) never takes over; after a split brain
the primary wins and the backup, passive again, truncates what it accepted
alone (its journals are cut after the last record both agree on) and reports it.  A
broker that takes over starts a new epoch on every stream: a client that
saw sequences of the old active that never reached it is told (ROLLBACK)
instead of being handed other messages under the same numbers.

The pair link (one DEALER to the peer, one ROUTER for it; frames capped):

- ``[BSTAR, state, 0, client endpoint]``: the Binary Star heartbeat, both ways;
- passive -> active ``[FOLLOW, token, {stream: [epochs, last_seq]}]``,
  ``[ACK, token, {stream: seq}, group number]`` (journaled at the passive's level: also its credit; the
  last field, the last group record kept, may be absent or nil);
- active -> passive ``[STREAMS, token, {stream: [start, reset, target, epochs, agreed]}, [stream to drop]]``,
  ``[REC, token, stream, [epochs, [[seq, ts, key, body(, producer, pseq)], ...]]]`` (the producer of a
  record that has one),
  ``[GREC, token, [first number, [[stream, group record], ...]]]`` (consumer groups), ``[AGAIN, token]``.

Runs in the broker's loop only.  With the broker's ``curve`` the link is CURVE as well (the ROUTER a
server with the broker's keys, the DEALER a client of ``peer_key``) and only frames from ``peer_key``
(their ZAP User-Id) are heard; without, run it on a trusted network.  The ROUTER hands a routing id in
use to the newest connection (each is read), and accepts a budget of TCP connections (an eighth of the
open-file limit less 64; more are shut at once, ``connections_refused``).
"""
from __future__ import annotations

import logging
import os
import time

import msgpack
import zmq

from zactors.actors import bstar
from zactors.actors.auth import curve_client, curve_server
from zactors.actors.bstar import BinaryStar, decode_state, encode_state
from zactors.actors.router import count_disconnects, fd_budget
from zactors.actors.sockets import limit_size

from . import protocol as p
from .replication import Replica, Source, unpack

__all__ = ["Pair", "ROLES", "PASSIVE_POLICIES", "check_pair_options"]

log = logging.getLogger("zactors.patterns.zeps.broker")
_monotonic = time.monotonic

ROLES = ("primary", "backup")
#: what ack="replicated" does when the passive is lost or lags past ``passive_timeout``
PASSIVE_POLICIES = ("wait", "degrade")


def check_pair_options(role, ack, replica_ack, on_passive_lost, passive_timeout):
    """ValueError for pair options that do not fit together (the broker's constructor calls it)."""
    if role is not None and role not in ROLES:
        raise ValueError("role must be one of %s, got %r" % (", ".join(ROLES), role))
    if ack == "replicated" and role is None:
        raise ValueError("ack='replicated' needs a pair: give role= (and peer=)")
    if replica_ack not in ("written", "synced"):
        raise ValueError("replica_ack must be 'written' or 'synced', got %r" % (replica_ack,))
    if on_passive_lost not in PASSIVE_POLICIES:
        raise ValueError("on_passive_lost must be one of %s, got %r" % (", ".join(PASSIVE_POLICIES), on_passive_lost))
    if not passive_timeout > 0:
        raise ValueError("passive_timeout must be > 0, got %r" % (passive_timeout,))


class Pair:
    """One broker's side of a pair (see the module docstring).  Created by the broker's ``setup``."""

    def __init__(self, broker, role, peer, bind, heartbeat):
        if role not in ROLES:
            raise ValueError("role must be one of %s, got %r" % (", ".join(ROLES), role))
        self.broker = broker
        self.role = role
        self.peer = None
        self.peer_client = None       # the peer's client endpoint, from its heartbeats
        self.heartbeat = heartbeat
        self.last_failover = None     # {"time", "reason", "state"}
        self.fsm = BinaryStar(role == "primary", heartbeat, _monotonic(), self._on_change)
        limit = 4 * (broker.max_message + 1024) + (4 << 20)
        # Handover (issue #20): without it libzmq never reads a connection whose routing id is in use, yet
        # buffers up to RCVHWM of its messages: 3 such connections held 144 MiB.  The newest connection holds
        # the id and is read; with CURVE only the peer's key is heard, and our DEALER's id (random, 16 bytes,
        # sent encrypted) cannot be guessed to take its records over.  The link's own traffic to the ROUTER is
        # heartbeats, FOLLOW and batched ACKs: libzmq's default RCVHWM is plenty.
        self.router = broker.socket(zmq.ROUTER, sndhwm=100000, rcvhwm=1000, router_handover=1)
        limit_size(self.router, limit)
        # a connection budget: the descriptors are the journals' (one link; the rest is strays or a flood)
        count_disconnects(broker, self.router, "pair_disconnects", max_connections=fd_budget(0.125, 64))
        self.peer_key = broker.peer_key
        if broker.curve is not None:    # CURVE: only the peer's key is heard (its ZAP User-Id)
            curve_server(self.router, broker.curve, broker.curve_domain)
            broker.add_reader(self.router, self._on_keyed, copy=False)
        else:
            broker.add_reader(self.router, self._on_router)
        self.endpoint = broker.bind(self.router, bind)
        self.dealer = None
        self._limit = limit
        self.source = Source(self)
        self.replica = Replica(self)
        broker.call_every(heartbeat, self._beat)
        if peer:
            self.connect(peer)

    def connect(self, peer):
        if self.dealer is not None:
            raise ValueError("peer already set")
        self.peer = peer
        self.dealer = self.broker.socket(zmq.DEALER, sndhwm=100000, rcvhwm=100000, immediate=1,
                                         routing_id=os.urandom(16))   # (not guessable: see __init__)
        limit_size(self.dealer, self._limit)
        if self.broker.curve is not None:
            curve_client(self.dealer, self.broker.curve, self.peer_key)
        self.dealer.connect(peer)
        self.broker.add_reader(self.dealer, self._on_dealer)

    # -- the link ---------------------------------------------------------------
    def to_peer(self, frames):
        """Send on the DEALER (our heartbeats; as passive, FOLLOW and ACK); False if not connected."""
        if self.dealer is None:
            return False
        try:
            self.dealer.send_multipart(frames, zmq.NOBLOCK)
            return True
        except zmq.ZMQError:
            return False

    def to_follower(self, identity, frames):
        """Send on the ROUTER to the passive's DEALER; False if it is gone or full."""
        try:
            self.router.send_multipart([identity] + frames, zmq.NOBLOCK)
            return True
        except zmq.ZMQError:
            return False

    def _beat(self):
        self.to_peer(encode_state(self.fsm.advertised, 0) + [self.broker.endpoint.encode()])
        self.source.check(_monotonic())
        self.replica.check(_monotonic())

    def _on_keyed(self, frames):
        """CURVE: frames from the peer's key only; anyone else's are dropped and counted."""
        try:
            user = frames[0].get("User-Id")
        except zmq.ZMQError:
            user = None
        if user is None or user.encode() != self.peer_key:
            self.broker.stats["pair_refused_key"] += 1
            return
        self._on_router([f.bytes for f in frames])

    def _on_router(self, frames):
        if len(frames) < 2:
            return
        identity, kind = frames[0], frames[1]
        try:
            if kind == b"BSTAR":
                self._on_state(frames[1:])
            elif kind == b"FOLLOW" and len(frames) == 4:
                self.source.follow(identity, frames[2], unpack(frames[3]))
            elif kind == b"ACK" and len(frames) in (4, 5):
                self.source.on_ack(identity, frames[2], unpack(frames[3]),
                                   unpack(frames[4]) if len(frames) == 5 else None)
            else:
                self.broker.stats["pair_malformed"] += 1
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, msgpack.UnpackException) as exc:
            self.broker.stats["pair_malformed"] += 1
            log.warning("%s: bad pair message %r dropped: %s", self.broker.name, kind[:16], exc)

    def _on_dealer(self, frames):
        kind = frames[0]
        try:
            if kind == b"STREAMS" and len(frames) == 4:
                self.replica.on_streams(frames[1], unpack(frames[2]), unpack(frames[3]))
            elif kind == b"REC" and len(frames) == 4:
                self.replica.on_records(frames[1], frames[2], unpack(frames[3]))
            elif kind == b"GREC" and len(frames) == 3:
                self.replica.on_group_records(frames[1], unpack(frames[2]))
            elif kind == b"AGAIN" and len(frames) == 2:
                self.replica.on_again(frames[1])
            else:
                self.broker.stats["pair_malformed"] += 1
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, msgpack.UnpackException) as exc:
            self.broker.stats["pair_malformed"] += 1
            log.warning("%s: bad pair message %r dropped: %s", self.broker.name, kind[:16], exc)

    # -- Binary Star --------------------------------------------------------------
    def _on_state(self, frames):
        decoded = decode_state(frames[:3])
        if decoded is None:
            self.broker.stats["pair_malformed"] += 1
            return
        if len(frames) > 3:
            self.peer_client = frames[3].decode("utf-8", "replace")
        self.fsm.handle(decoded[0], _monotonic())
        if self.fsm.state == bstar.PASSIVE and self.fsm.peer_state == bstar.ACTIVE:
            self.replica.ensure_following()

    @property
    def active(self):
        return self.fsm.state == bstar.ACTIVE

    def vote(self, identity):
        """A client's ATTACH: True if we serve it (maybe by taking over), else INVALID "PASSIVE: ..."."""
        if self.fsm.handle(bstar.CLIENT_REQUEST, _monotonic()):
            return True
        broker = self.broker
        broker.stats["pair_refused"] += 1
        why = "not caught up with the active yet" if not self.fsm.ready else \
            "the %s of a pair and %s" % (self.role, "waiting for its peer" if self.fsm.state in (
                bstar.PRIMARY, bstar.BACKUP) else "passive")
        broker._send(identity, p.invalid("PASSIVE: this broker is %s; the active is %s" % (
            why, self.peer_client or self.peer or "unknown")))
        return False

    def _on_change(self, old, new, reason):
        broker = self.broker
        self.last_failover = {"time": time.time(), "reason": reason, "from": bstar.STATES[old],
                              "to": bstar.STATES[new]}
        if new == bstar.ACTIVE:
            self.replica.stop()
            if old == bstar.PASSIVE:
                broker.stats["takeovers"] += 1
                self.replica.new_epochs()   # what the old active handed out alone is another epoch
                broker._groups_take_over()  # the copied groups: their pending entries redelivered after ack_wait
                if self.fsm.peer_silent(_monotonic()):   # a vote: the peer is gone
                    self.source.taken_over()
            log.warning("%s: active (%s)", broker.name, reason)
        elif new == bstar.PASSIVE:
            if old == bstar.ACTIVE:
                broker.stats["yielded"] += 1
                log.warning("%s: yielding to the peer (%s): clients detached, copying from it", broker.name, reason)
            for peer in list(broker._peers.values()):   # a passive serves no one
                broker._send(peer.identity, p.DETACH_FRAME)
                broker._drop(peer)
            self.source.reset()
            self.fsm.ready = False
            self.replica.ensure_following()

    # -- hooks from the broker -------------------------------------------------------
    def at_level(self, stream, deliver):
        """The stream's GroupCommit callback (written or synced up to seq): deliver, ACK or replicate."""
        def reached(seq):
            if self.fsm.state == bstar.ACTIVE:
                self.source.reached(stream, seq, deliver)
            else:
                deliver(seq)
                self.replica.reached(stream, seq)
        return reached

    def info(self):
        fsm = self.fsm
        silent = fsm.peer_silent(_monotonic())
        return {"role": self.role, "state": fsm.name,
                "peer_state": None if silent else bstar.STATES.get(fsm.peer_state),   # None: not heard lately
                "ready": fsm.ready, "peer": self.peer, "pair_endpoint": self.endpoint,
                "peer_endpoint": self.peer_client, "last_failover": self.last_failover,
                **self.source.info(), **self.replica.info()}

    def close(self):
        self.source.stop()
