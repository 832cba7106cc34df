"""The Harmony engine: the actor that is a true peer on a ZRE v2 network (Zyre, pyre and zactors nodes).

:class:`NodeActor` does the work in its own greenlet (the application holds a
:class:`~.node.Node`, its handle): one ROUTER (the inbox, bound to a random port in
0xC000-0xFFFF), one DEALER per peer (identity 0x01 + our UUID) whose first
message is HELLO, a :class:`actors.beacon.Beacon` child for UDP discovery and
an :class:`actors.heartbeat.Liveness` for peer timeouts.

Discovery
    UDP beacons on ``port`` (5670), and/or known ``endpoints`` of other
    nodes: we send those a HELLO and learn who answers.  Nodes that speak the
    zactors extension (:mod:`.gossip`) tell each other about their peers (so
    one known endpoint finds the whole network without broadcast) and say
    goodbye when they stop.  Gossip travels as WHISPERs to such peers only:
    Zyre and pyre never see it.

    A known endpoint is kept: whenever the connection of its DEALER drops
    (its node stopped, died, or was restarted there, perhaps with the same
    UUID), the node there is dropped (EXIT if it had said HELLO) and greeted
    anew with a fresh DEALER, so its next incarnation hears our HELLO at
    once.  Without that, libzmq reconnects the old DEALER silently: a HELLO
    taken by a dying node is lost for good, and what we send to a new
    incarnation that never had our HELLO is dropped by it until expiry.
    Greetings of an endpoint whose connections keep dropping before its node
    answers back off (0.05 s, doubling, up to ``evasive``; ``disconnects``
    counts the drops).

Liveness
    Any message from a peer refreshes it.  Beacons do not (``beacon_refresh``
    turns that on): a peer whose TCP path broke must not stay alive on UDP
    alone, which is why Zyre stopped it in 2017.  A peer silent for
    ``evasive`` seconds (5) gets a PING and an EVASIVE event; if its beacons
    are still heard meanwhile, a SILENT event; silent for ``expired`` (30) it
    is removed with EXIT.  A node stopping politely sends a port-0 beacon
    (and a gossip goodbye) so peers see it leave at once.

Backpressure
    A peer that reads slowly fills its DEALER (``hwm`` messages), then its
    queue in the node's :class:`~zactors.actors.outbox.Outbox`, kept in
    order.  When one peer's queue reaches ``backlog`` messages (it is held),
    the node stops taking commands from its application until every held
    queue is half empty: ``whisper``/``shout`` then block the calling
    greenlet.  Nothing is dropped, except the queue of a peer that leaves or
    expires (counted in ``stats()["dropped_on_exit"]`` and logged).  While
    commands are paused only protocol replies (PING-OK, gossip) still queue;
    a peer that is twice ``backlog`` behind is dropped (``overflow``).

Bad input (malformed frames, unknown ids, a HELLO-less peer, an unexpected
status counter, a sequence gap) is logged and counted, never fatal.  A
sequence gap makes the peer invalid: EXIT, and ENTER again when it says
HELLO anew.

Hostile but well-formed input is survived too, each case counted in
``stats()``: an endpoint learned from the network (HELLO, gossip, beacon)
must be ``tcp://host:port`` (see :mod:`.endpoints`; ``bad_endpoint``); a
DEALER that cannot be made or connected drops that peer alone
(``connect_failed``).  Limits: at most ``max_peers`` peers and probes
(1000; ``peer_limit``), ``gossip.GOSSIP_LIMIT`` entries read from one
gossip message (256; ``gossip_limit``), ``PEER_GROUPS_LIMIT`` groups per peer
(1000; ``group_limit``).  A group name longer than 255 bytes (legal in a
HELLO) is kept, but cannot be shouted to: SHOUT names are short strings.
A new node claiming the endpoint of a peer that is alive (not evasive) is
refused (``endpoint_conflict``): anyone can claim any endpoint, so only a
silent peer is taken to have restarted there.
"""
import logging
import time

import zmq

from zactors.actors.actor import Actor, command
from zactors.actors import beacon as beacons
from zactors.actors.beacon import Beacon, BeaconError
from zactors.actors.heartbeat import Liveness
from zactors.actors.outbox import Outbox, send_now
from zactors.actors.sockets import limit_size

from . import commands as verbs, events, gossip, protocol as zre
from .endpoints import peer_endpoint
from .group import Group
from .peer import Peer

__all__ = ["NodeActor", "PEER_GROUPS_LIMIT"]

log = logging.getLogger(__name__)

#: groups one peer may be in, as this node sees it (more are counted and ignored)
PEER_GROUPS_LIMIT = 1000

_Hello, _Whisper, _Shout, _Join, _Leave, _Ping, _PingOk = (
    zre.Hello, zre.Whisper, zre.Shout, zre.Join, zre.Leave, zre.Ping, zre.PingOk)
_ENTER, _EXIT, _JOIN, _LEAVE, _WHISPER, _SHOUT, _EVASIVE, _SILENT = (
    events.ENTER, events.EXIT, events.JOIN, events.LEAVE, events.WHISPER, events.SHOUT, events.EVASIVE,
    events.SILENT)
_GOSSIP_LIMIT = gossip.GOSSIP_LIMIT


class NodeActor(Actor):
    """The node's engine (see the module docstring).

    Commands: the verbs of :mod:`.commands`.  Events: the names of
    :mod:`.events` (``ENTER id name headers endpoint``, ``EXIT id name``,
    ``JOIN id name group``, ``LEAVE id name group``, ``WHISPER id name
    frames``, ``SHOUT id name group frames``, ``EVASIVE id name``,
    ``SILENT id name``).  :attr:`paused` is True while a held peer keeps
    commands from being read.
    """

    def __init__(self, config):
        self.config = config
        self.uuid = config["uuid"]
        self.name = "Node-%s" % config["name"]
        self.node_name = config["name"]
        self.endpoint = None
        self.beacon = None

    # -- lifecycle ----------------------------------------------------------
    def setup(self):
        cfg = self.config
        self.peers = {}          # identity (0x01 + uuid) -> Peer
        self.by_id = {}          # hex id -> Peer
        self.probes = {}         # endpoint -> Peer whose uuid is not known yet
        self.peer_groups = {}    # name -> Group
        self.own_groups = set()
        self.status = 0
        self.headers = dict(cfg["headers"])
        if cfg["gossip"]:
            self.headers[gossip.GOSSIP_HEADER] = "1"
        self.liveness = Liveness(cfg["evasive"], cfg["expired"])
        self._deadline = None
        backlog = cfg["backlog"]
        self.outbox = Outbox(self, self._transmit, limit=2 * backlog, high=backlog, on_held=self._on_held,
                             on_drained=self._on_drained, on_overflow=self._on_overflow,
                             on_unroutable=self._on_unroutable, retry_max=0.005)
        self._send = self.outbox.send
        self.paused = False
        self._stopping = False
        host = cfg["host"]
        if cfg["beacon"]:
            try:
                self.beacon = Beacon(port=cfg["port"], interface=cfg["interface"], interval=cfg["interval"],
                                     name="%s-beacon" % self.name)
            except BeaconError as exc:
                if cfg["interface"]:
                    raise
                log.warning("%s: no UDP discovery: %s", self.name, exc)
        if self.beacon is not None:
            self.watch(self.beacon, self._on_beacon_event)
            host = host or self.beacon.address
            bind_host = cfg["host"] or "*"
        else:
            host = host or "127.0.0.1"
            bind_host = host
        self.inbox = self.socket(zmq.ROUTER, router_handover=1, rcvhwm=cfg["hwm"])
        limit_size(self.inbox, cfg["max_message"])
        if cfg.get("tcp_port"):  # a stable endpoint (a restarted node binds it again while it is released)
            bound = self.bind(self.inbox, "tcp://%s:%d" % (bind_host, cfg["tcp_port"]))
            port = int(bound.rsplit(":", 1)[1])
        else:
            port = self.inbox.bind_to_random_port("tcp://%s" % bind_host, 0xC000, 0xFFFF, max_tries=200)
        self.endpoint = "tcp://%s:%d" % (host, port)
        self.add_reader(self.inbox, self._on_inbox)
        if self.beacon is not None:
            self.beacon.send(beacons.SUBSCRIBE, zre.BEACON_PREFIX)
            self.beacon.send(beacons.PUBLISH, zre.encode_beacon(self.uuid, port))
        for endpoint in cfg["endpoints"]:
            self._probe(endpoint)
        log.debug("%s: %s at %s", self.name, self.uuid.hex(), self.endpoint)

    def teardown(self):
        self._stopping = True
        if self.beacon is not None:
            try:
                self.beacon.call(beacons.PUBLISH, zre.encode_beacon(self.uuid, 0), timeout=2)
            except Exception as exc:  # the node is going anyway
                log.debug("%s: leaving beacon failed: %s", self.name, exc)
            self.beacon.destroy()
        for peer in list(self.peers.values()) + list(self.probes.values()):
            if peer.gossip and peer.ready:
                self._send(peer, zre.whisper_frames(peer.sequence(), gossip.bye_contents()))
            # Let queued messages (the goodbye among them) leave before the socket dies.
            peer.close(self, linger=0.5)

    # -- peers --------------------------------------------------------------
    def _hello(self, peer):
        return zre.encode(_Hello(peer.sequence(), self.endpoint, sorted(self.own_groups), self.status,
                                 self.node_name, self.headers))

    def _valid(self, endpoint, source):
        """True if a DEALER may be pointed at ``endpoint`` (learned from ``source``)."""
        try:
            peer_endpoint(endpoint)
        except ValueError as exc:
            self._bad("bad_endpoint", "%s from %s" % (exc, source))
            return False
        if endpoint == self.endpoint:
            self._bad("bad_endpoint", "our own endpoint from %s" % source)
            return False
        return True

    def _room(self):
        """True if one more peer fits under ``max_peers``."""
        if len(self.peers) + len(self.probes) < self.config["max_peers"]:
            return True
        self._bad("peer_limit", "%d peers and probes already" % (len(self.peers) + len(self.probes)))
        return False

    def _connect(self, peer):
        """Open ``peer``'s DEALER (watched if it is a probe); False (counted, nothing left open) if that fails."""
        try:
            peer.connect(self, self.uuid, self.config["hwm"], self._on_disconnect if peer.probe else None)
        except zmq.ZMQError as exc:
            peer.close(self)
            self._bad("connect_failed", "%s: %s" % (peer.endpoint, exc))
            return False
        return True

    def _probe(self, endpoint, redials=0):
        """Say HELLO to an endpoint whose node we do not know yet (``redials``: our tries since it answered)."""
        if self._stopping or endpoint == self.endpoint or endpoint in self.probes:
            return
        if any(p.endpoint == endpoint for p in self.peers.values()):
            return
        if not self._valid(endpoint, "probe") or not self._room():
            return
        peer = Peer(None, endpoint)
        peer.probe = True
        peer.redials = redials
        if not self._connect(peer):
            return
        self.probes[endpoint] = peer
        self._send(peer, self._hello(peer))

    def _adopt(self, uuid, endpoint):
        """The probe that reached ``endpoint``, now known as ``uuid`` (or None)."""
        peer = self.probes.pop(endpoint, None)
        if peer is None:
            # Advertised under another address: match the port if only one probe fits.
            port = endpoint.rsplit(":", 1)[-1]
            fits = [e for e in self.probes if e.rsplit(":", 1)[-1] == port]
            if len(fits) != 1:
                return None
            peer = self.probes.pop(fits[0])
        peer.set_uuid(uuid)
        peer.endpoint = endpoint
        self._add(peer)
        return peer

    def _add(self, peer):
        self.peers[peer.identity] = peer
        self.by_id[peer.id] = peer
        self.liveness.touch(peer.identity)
        self._arm()

    def _require(self, uuid, endpoint, source):
        """The peer with ``uuid``; new ones get a DEALER to ``endpoint`` and our HELLO.

        None (counted) when ``endpoint`` is not one to connect to, there is no
        room for another peer, or its DEALER cannot be made.
        """
        identity = zre.identity_of(uuid)
        peer = self.peers.get(identity)
        if peer is not None:
            return peer
        if not self._valid(endpoint, source):
            return None
        for other in list(self.peers.values()):
            if other.endpoint == endpoint:
                if other.ready and not other.evasive:  # anyone can claim an endpoint: keep the live peer
                    self._bad("endpoint_conflict", "%s claims %s, the endpoint of %s" % (
                        uuid.hex()[:8], endpoint, other.name))
                    return None
                self._remove(other, "replaced by a new node on %s" % endpoint)  # it restarted
        peer = self._adopt(uuid, endpoint) if endpoint in self.probes else None
        if peer is not None:
            return peer
        if not self._room():
            return None
        peer = Peer(uuid, endpoint)
        if not self._connect(peer):
            return None
        self._add(peer)
        self._send(peer, self._hello(peer))
        return peer

    def _remove(self, peer, reason):
        if self.peers.pop(peer.identity, None) is None:
            return
        self.by_id.pop(peer.id, None)
        self.liveness.forget(peer.identity)
        for name in peer.groups:
            self._forget_member(name, peer)
        dropped = len(self.outbox.drop(peer))
        if dropped:
            self.stats["dropped_on_exit"] += dropped
            log.warning("%s: %d message(s) to %s dropped: peer %s", self.name, dropped, peer.name, reason)
        peer.close(self)
        if peer.ready:
            log.debug("%s: EXIT %s (%s)", self.name, peer.name, reason)
            self.emit(_EXIT, peer.id, peer.name)
        if peer.probe:
            self._probe(peer.endpoint, peer.redials + 1)  # now: a HELLO from there may adopt it at once

    def _on_disconnect(self, peer):
        """A connection of ``peer``'s DEALER (a probe's) dropped: what it carried may be lost, and the node
        there is gone, or is a new incarnation that does not know us.  Drop it and greet the endpoint anew."""
        self.stats["disconnects"] += 1
        if self._stopping:
            return
        if self.probes.get(peer.endpoint) is peer:  # not answered yet: our HELLO may be what was lost
            del self.probes[peer.endpoint]
            peer.close(self)
            delay = min(0.05 * 2 ** peer.redials, self.config["evasive"])  # it may keep doing that: back off
            log.debug("%s: probe of %s disconnected before an answer; again in %.2f s", self.name, peer.endpoint,
                      delay)
            self.call_later(delay, self._probe, peer.endpoint, peer.redials + 1)
        elif peer.identity is not None and self.peers.get(peer.identity) is peer:
            self._remove(peer, "disconnected")

    # -- sending (through the outbox: self._send is its bound send) --------
    @staticmethod
    def _transmit(peer, frames):
        return send_now(peer.dealer, frames)

    def _on_held(self, peer):
        if not self.paused:
            self.paused = True
            self.stats["paused"] += 1
            self.pause_commands()  # the application now blocks on the pipe
            log.debug("%s: %s is %d messages behind; commands paused", self.name, peer.name,
                      self.outbox.pending(peer))

    def _on_drained(self, peer):
        if self.paused and not self.outbox.held:
            self.paused = False
            self.resume_commands()

    def _on_overflow(self, peer, frames):
        self.stats["overflow"] += 1
        # Not from inside the send: a SHOUT may be walking the group's peers.
        self.call_later(0, self._remove, peer, "%d messages behind" % self.outbox.limit)

    def _on_unroutable(self, peer, frames):
        self.stats["unroutable"] += 1

    # -- liveness -----------------------------------------------------------
    def _arm(self):
        """Time the next liveness check; earlier than a pending one if need be.

        Called when a peer is added, after each check, and when an evasive peer
        speaks again (its next deadline moves from expiry back to evasion).
        """
        due = self.liveness.next_deadline()
        timer = self._deadline
        if timer is not None:
            if due is not None and due >= timer.deadline - 0.001:
                return
            timer.cancel()
            self._deadline = None
        if due is not None:
            self._deadline = self.call_later(max(0.001, due - time.monotonic()), self._on_deadline)

    def _on_deadline(self):
        self._deadline = None
        evasive, expired = self.liveness.check()
        for identity in expired:
            peer = self.peers.get(identity)
            if peer is not None:
                self._remove(peer, "expired")
        for identity in evasive:
            peer = self.peers.get(identity)
            if peer is not None and peer.ready:
                peer.evasive = 1
                self._send(peer, zre.encode(_Ping(peer.sequence())))
                self.emit(_EVASIVE, peer.id, peer.name)
        self._arm()

    # -- input: beacons -----------------------------------------------------
    def _on_beacon_event(self, event):
        if self._stopping:
            return
        if event.name != beacons.BEACON:
            if event.name in ("$DIED", "$EXIT") and not self._stopping:
                log.error("%s: beacon stopped (%s); UDP discovery is off", self.name, event.args)
                self.beacon = None
            return
        address, payload = event.args
        try:
            uuid, port = zre.decode_beacon(payload)
        except zre.ProtocolError:
            self._bad("bad_beacon", "beacon from %s" % address)
            return
        if uuid == self.uuid:
            return
        identity = zre.identity_of(uuid)
        if port == 0:
            peer = self.peers.get(identity)
            if peer is not None:
                self._remove(peer, "left")
            return
        peer = self._require(uuid, "tcp://%s:%d" % (address, port), "a beacon")
        if peer is not None and peer.ready:
            if self.config["beacon_refresh"]:
                self._touch(peer)
            elif peer.evasive == 1:
                peer.evasive = 2
                self.emit(_SILENT, peer.id, peer.name)

    # -- input: peers -------------------------------------------------------
    def _bad(self, kind, detail):
        count = self.stats[kind] = self.stats[kind] + 1
        if count in (1, 100, 10000):
            log.warning("%s: %s: %s (%d so far)", self.name, kind.replace("_", " "), detail, count)
        else:
            log.debug("%s: %s: %s", self.name, kind, detail)

    def _touch(self, peer):
        self.liveness.touch(peer.identity)
        if peer.evasive:
            peer.evasive = 0
            self._arm()

    def _on_inbox(self, frames):
        identity = frames[0]
        try:
            message = zre.decode(frames[1:])
        except zre.UnknownMessage as exc:
            self._bad("unknown_message", exc)
            return
        except zre.ProtocolError as exc:
            self._bad("malformed", exc)
            return
        peer = self.peers.get(identity)
        kind = type(message)
        if kind is _Hello:
            self._on_hello(identity, peer, message)
            return
        if peer is None or not peer.ready:
            self._bad("not_ready", "%s before HELLO" % zre.NAMES[zre._ID_OF[kind]])
            return
        if not peer.check_sequence(message.sequence, False):
            self._bad("sequence_errors", "%s sent %d, expected %d" % (peer.name, message.sequence, peer.want_sequence))
            self._remove(peer, "lost messages")
            return
        self.liveness.touch(identity)
        if peer.evasive:
            peer.evasive = 0
            self._arm()
        if kind is _Whisper:
            content = message.content
            if peer.gossip and gossip.is_gossip(content):
                self._on_gossip(peer, content)
                return
            self.emit(_WHISPER, peer.id, peer.name, content)
        elif kind is _Shout:
            self.emit(_SHOUT, peer.id, peer.name, message.group, message.content)
        elif kind is _Join:
            self._peer_status(peer, message.status)
            self._join(peer, message.group)
        elif kind is _Leave:
            self._peer_status(peer, message.status)
            if message.group in peer.groups:
                peer.groups.discard(message.group)
                self._forget_member(message.group, peer)
            self.emit(_LEAVE, peer.id, peer.name, message.group)
        elif kind is _Ping:
            self._send(peer, zre.encode(_PingOk(peer.sequence())))

    def _join(self, peer, name):
        """``peer`` joined group ``name``: JOIN event (unless it was in it, or in too many)."""
        if name in peer.groups:
            return
        if len(peer.groups) >= PEER_GROUPS_LIMIT:
            self._bad("group_limit", "%s is in %d groups already" % (peer.name, len(peer.groups)))
            return
        group = self.peer_groups.get(name)
        if group is None:
            group = self.peer_groups[name] = Group(name)
        group.join(peer)
        peer.groups.add(name)
        self.emit(_JOIN, peer.id, peer.name, name)

    def _forget_member(self, name, peer):
        """Take ``peer`` out of group ``name``; a group nobody is in is forgotten."""
        group = self.peer_groups.get(name)
        if group is not None:
            group.leave(peer)
            if not group.peers:
                del self.peer_groups[name]

    def _peer_status(self, peer, status):
        expected = (peer.status + 1) & 0xFF
        if status != expected:
            self._bad("status_mismatch", "%s status %d, expected %d" % (peer.name, status, expected))
        peer.status = status

    def _on_hello(self, identity, peer, hello):
        try:
            uuid = zre.uuid_of(identity)
        except zre.ProtocolError as exc:
            self._bad("malformed", exc)
            return
        if not self._valid(hello.endpoint, "a HELLO"):
            return
        if uuid == self.uuid:  # a probe of ours reached ourselves
            probe = self.probes.pop(hello.endpoint, None)
            if probe is not None:
                probe.close(self)
            return
        if hello.sequence != 1:
            self._bad("sequence_errors", "HELLO with sequence %d" % hello.sequence)
            if peer is not None:
                self._remove(peer, "bad HELLO")
            return
        if peer is not None and peer.ready:
            self._remove(peer, "restarted")  # a second HELLO: it is a new incarnation
            peer = None
        if peer is None:
            peer = self._adopt(uuid, hello.endpoint) or self._require(uuid, hello.endpoint, "a HELLO")
            if peer is None:
                return
        peer.want_sequence = 1
        peer.ready = True
        peer.redials = 0
        peer.evasive = 0
        peer.name = hello.name
        peer.headers = hello.headers
        peer.gossip = gossip.GOSSIP_HEADER in hello.headers
        peer.endpoint = hello.endpoint
        self.liveness.touch(identity)
        self.emit(_ENTER, peer.id, peer.name, peer.headers, peer.endpoint)
        for name in hello.groups:
            self._join(peer, name)
        peer.status = hello.status
        if self.config["gossip"]:
            self._gossip_about(peer)

    # -- gossip (zactors extension, only between nodes that announce it) ----
    def _gossip_about(self, new):
        others = [p for p in self.peers.values() if p.ready and p is not new]
        if new.gossip and others:
            for content in gossip.peers_contents([(p.id, p.endpoint) for p in others]):
                self._send(new, zre.whisper_frames(new.sequence(), content))
        news = gossip.peers_contents([(new.id, new.endpoint)])[0]
        for peer in others:
            if peer.gossip:
                self._send(peer, zre.whisper_frames(peer.sequence(), news))

    def _on_gossip(self, peer, content):
        """Handle a gossip WHISPER (see :mod:`.gossip`)."""
        if content[0] == gossip.BYE_MARK:
            self._remove(peer, "left")
            return
        if not self.config["gossip"]:
            return
        entries = content[1:]
        if len(entries) > _GOSSIP_LIMIT:
            self._bad("gossip_limit", "%s sent %d entries" % (peer.name, len(entries)))
            entries = entries[:_GOSSIP_LIMIT]
        for entry in entries:
            try:
                uuid, endpoint = gossip.parse_entry(entry)
            except ValueError:
                self._bad("malformed_gossip", entry[:60])
                continue
            if uuid != self.uuid and zre.identity_of(uuid) not in self.peers:
                self._require(uuid, endpoint, "gossip")

    # -- commands -----------------------------------------------------------
    @command(verbs.WHISPER)
    def whisper(self, peer_id, frames):
        """WHISPER: send ``frames`` to one ready peer (an unknown peer is counted, not an error)."""
        peer = self.by_id.get(peer_id)
        if peer is None or not peer.ready:
            self._bad("whisper_unknown_peer", peer_id)
            return
        self._send(peer, zre.whisper_frames(peer.sequence(), frames))

    @command(verbs.SHOUT)
    def shout(self, group_name, frames):
        """SHOUT: send ``frames`` to every peer in ``group``."""
        group = self.peer_groups.get(group_name)
        if group is None:
            return
        field = group.field
        if field is None:
            raise ValueError("group name longer than 255 bytes")
        for peer in group.peers.values():
            self._send(peer, zre.shout_frames(peer.sequence(), field, frames))

    def _all_links(self):
        return list(self.peers.values()) + list(self.probes.values())

    @command(verbs.JOIN)
    def join(self, group):
        """JOIN: join ``group`` and tell every peer."""
        if group in self.own_groups:
            return
        zre.shout_head(group)  # refuse names that do not fit a ZRE string
        self.own_groups.add(group)
        self.status = (self.status + 1) & 0xFF
        for peer in self._all_links():
            self._send(peer, zre.encode(_Join(peer.sequence(), group, self.status)))

    @command(verbs.LEAVE)
    def leave(self, group):
        """LEAVE: leave ``group`` and tell every peer."""
        if group not in self.own_groups:
            return
        self.own_groups.discard(group)
        self.status = (self.status + 1) & 0xFF
        for peer in self._all_links():
            self._send(peer, zre.encode(_Leave(peer.sequence(), group, self.status)))

    @command(verbs.CONNECT)
    def connect(self, endpoint):
        """CONNECT: probe a known peer endpoint (the broadcast-free mode)."""
        self._probe(endpoint)

    @command(verbs.PEERS, reply=True)
    def peers_(self):
        """PEERS: the ids of the ready peers."""
        return [p.id for p in self.peers.values() if p.ready]

    @command(verbs.PEER, reply=True)
    def peer(self, peer_id):
        """PEER: one peer's name, endpoint, headers and groups, or None."""
        peer = self.by_id.get(peer_id)
        if peer is None or not peer.ready:
            return None
        return {"id": peer.id, "name": peer.name, "headers": peer.headers, "address": peer.endpoint,
                "groups": sorted(peer.groups), "backlog": self.outbox.pending(peer)}

    @command(verbs.OWN_GROUPS, reply=True)
    def own_groups_(self):
        """OWN GROUPS: the groups this node has joined."""
        return sorted(self.own_groups)

    @command(verbs.PEER_GROUPS, reply=True)
    def peer_groups_(self):
        """PEER GROUPS: the groups the ready peers have joined."""
        return sorted(name for name, group in self.peer_groups.items() if group.peers)

    @command(verbs.GROUP_PEERS, reply=True)
    def group_peers(self, group):
        """GROUP PEERS: the ids of the peers in ``group``."""
        found = self.peer_groups.get(group)
        return [] if found is None else [p.id for p in found.peers.values()]

    @command(verbs.INFO, reply=True)
    def info(self):
        """INFO: this node's identity, endpoint, peers, groups and counters."""
        return {"uuid": self.uuid.hex().upper(), "name": self.node_name, "endpoint": self.endpoint,
                "beacon": None if self.beacon is None else self.beacon.interface}
