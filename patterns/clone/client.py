"""The Clone client (12/CHP): a live local copy of a cluster-wide map.

::

    clone = Clone(["tcp://127.0.0.1:5556", "tcp://127.0.0.1:5566"], subtree="/app/")
    clone.wait_synced(5)
    clone["/app/colour"]                      # bytes; KeyError if absent
    clone.set("/app/colour", b"blue", ttl=30)  # sent to every server; returns the UUID
    clone.set("/app/size", b"9", wait=5)       # ... and waits for the server's KVPUB: its sequence
    clone.delete("/app/colour")
    for key, value, sequence in clone.changes(timeout=1): ...
    clone.destroy()

A server is its snapshot endpoint (``tcp://host:P``) or a ``(snapshot,
publisher, collector)`` tuple; a Binary Star pair is two of them, primary
first.  Given the snapshot endpoint only, the client asks that server first
for an empty snapshot (subtree :data:`DISCOVERY`) whose KTHXBAI advertises
the other two endpoints (a zactors server's extension; a wildcard host
becomes the host we reached it by); a server that advertises nothing (the
Guide's, a spec-only one) is taken to use the spec's P+1 and P+2.  Every
server given this way is asked at once, and again every ``timeout``
seconds until it answers: a zactors server answers in any Binary Star
state and counts it as no vote, so a passive backup's collector gets our
updates from the start and holds them for a takeover.

Reading (``get``, ``[]``, ``in``, ``len``, iteration, ``items``) never
blocks and never leaves this process: the map lives in the client actor,
which runs in the same thread as its callers.  Keys and values are bytes
(``str`` is encoded as UTF-8 on the way in).

Behaviour:

- Connect: SUB to the server's publisher first, then ICANHAZ? with the
  subtree; updates arriving meanwhile are held, and after KTHXBAI those
  newer than its sequence are applied in order: nothing lost, nothing
  applied twice or out of order.
- Silence: a server that sends nothing (HUGZ, updates, snapshot entries)
  for ``timeout`` seconds is abandoned for the next one (the Binary Star
  vote: our ICANHAZ? lets the backup take over); the map is then replaced
  by the new server's snapshot, and a change event is sent for each key
  that differs.  A client of the whole map (no subtree) also re-syncs when
  it sees a gap in the sequence (updates lost in transit).
- Never backwards: a snapshot older than the map we hold (its KTHXBAI
  sequence lower than ours: a server that lost state) is refused and
  counted (``stale_snapshots``); we keep our map and ask the next server
  ``timeout`` seconds later.
- Restart: when the server's collector connects to us again (it
  restarted, or the link broke) we re-sync, as updates published before
  our subscriber reconnected would otherwise go unseen.
- Synced (:meth:`wait_synced`) means the snapshot is in *and* the
  server's collector has subscribed to our publisher (an XPUB sees the
  subscription), so an update sent from then on reaches it.
- ``set``/``delete`` publish a KVSET with a fresh UUID to *every* known
  server's collector (so a passive backup holds it as pending until it
  sees it from the active).  With ``wait``, an update with no KVPUB yet is
  sent again (same UUID) whenever a collector connects (a restarted or
  newly reached server) and every ``resend`` seconds; servers drop a UUID
  they applied already, so it is applied once.  The local map changes when the server's KVPUB comes back,
  never before: the map is always a state some server published.  A
  server that cannot keep the update (its journal's disk is full) refuses
  it with KVERR: ``set(wait=...)`` raises :class:`UpdateRefused`; without
  ``wait`` it is only counted (``refused``: every KVERR heard, any client's).
- Change events: ``on_change(key, value, sequence)`` callbacks run in the
  client's loop (they must not block); :meth:`changes` iterators each get a
  bounded queue (``max_events``); a full queue drops events and counts them
  (``events_dropped``) rather than grow.

Safe from many greenlets of one thread (a gevent WSGI server's handlers,
say); not across OS threads.
"""
from __future__ import annotations

import logging
import re
import struct
import time
import uuid as _uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, overload

import zmq
from gevent.event import AsyncResult, Event
from gevent import Timeout
from gevent.queue import Empty, Full, Queue

from zactors.actors.actor import Actor, command
from zactors.actors.auth import Keypair, curve_client
from zactors.actors.errors import ActorTimeout
from zactors.actors.sockets import limit_size
from zactors.actors.values import to_bytes

from .protocol import (DISCOVERY, HUGZ, KTHXBAI, KVERR, MAX_REQUEST, MAX_VALUE, ProtocolError, advertised,
                       check_subtree, decode_kvmsg, encode_icanhaz, encode_properties, frame_limit, pack_sequence)

__all__ = ["Clone", "DISCOVERY", "UpdateRefused", "server_endpoints"]


class UpdateRefused(Exception):
    """The server refused the update (KVERR): it was not applied.  The message is the server's reason."""

log = logging.getLogger(__name__)

_monotonic = time.monotonic
_ZERO = pack_sequence(0)
_unpack_seq = struct.Struct("!Q").unpack

_D = TypeVar("_D")
_C = TypeVar("_C", bound=Callable[[bytes, bytes, int], object])


def server_endpoints(server: str | Iterable[str]) -> tuple[str, str | None, str | None]:
    """``(snapshot, publisher, collector)`` from a tuple of three (or four), or ``(snapshot, None, None)``
    from one endpoint: the others are learnt from the server (see the module docstring)."""
    if isinstance(server, str):
        if "://" not in server:
            raise ValueError("a server is an endpoint such as tcp://host:port, or (snapshot, publisher, collector),"
                             " got %r" % server)
        return (server, None, None)
    server = tuple(server)
    if len(server) < 3:
        raise ValueError("a server needs (snapshot, publisher, collector) endpoints")
    return server[0], server[1], server[2]


_WILDCARD = re.compile(r"^tcp://(\*|0\.0\.0\.0|\[::\]|::)(?=:\d+$)")


def _reachable(endpoint, via):
    """An advertised ``endpoint`` as we can connect to it: a wildcard host becomes ``via``'s host."""
    if _WILDCARD.match(endpoint) and via.startswith("tcp://"):
        return "tcp://%s:%s" % (via[len("tcp://"):].rpartition(":")[0], endpoint.rpartition(":")[2])
    return endpoint


def _spec_ports(snapshot):
    """``(P+1, P+2)`` endpoints for a snapshot endpoint ``tcp://host:P`` (the spec's layout), or None."""
    head, _, port = snapshot.rpartition(":")
    if not snapshot.startswith("tcp://") or not port.isdigit() or int(port) > 65533:
        return None
    return "%s:%d" % (head, int(port) + 1), "%s:%d" % (head, int(port) + 2)


class Clone(Actor):
    """A live copy of a Clone map; see the module docstring."""

    def __init__(self, servers: str | Iterable[str | Iterable[str]], *, subtree: bytes | str = b"",
                 timeout: float = 1.0, sub_wait: float = 0.3, max_events: int = 10000,
                 curve: Keypair | bytes | str | None = None, server_public: bytes | str | None = None,
                 resend: float = 0.5, max_value: int = MAX_VALUE, name: str | None = None) -> None:
        if isinstance(servers, str):
            servers = [servers]
        self.servers = [server_endpoints(s) for s in servers]
        self.resend = resend
        self.max_value = max_value
        if not self.servers:
            raise ValueError("at least one server")
        self.subtree = check_subtree(subtree)
        self.timeout = timeout
        self.sub_wait = sub_wait
        self.max_events = max_events
        self.curve = curve
        self.server_public = server_public
        self.name = name or "clone"
        self.map: dict[bytes, bytes] = {}
        self.sequence = 0
        self.current = 0
        self.synced = Event()
        self._callbacks: list[Callable[[bytes, bytes, int], object]] = []
        self._watchers: list[Queue] = []
        # uuid -> (result, key, value, KVSET frames): updates waiting for their KVPUB (resent until then)
        self._acks: dict[bytes, tuple[AsyncResult, bytes, bytes, list[bytes]]] = {}

    # -- parent side: the mapping ---------------------------------------------
    @overload
    def get(self, key: bytes | str) -> bytes | None: ...
    @overload
    def get(self, key: bytes | str, default: _D) -> bytes | _D: ...
    def get(self, key: bytes | str, default: Any = None) -> Any:
        """The value of ``key`` in the local map, or ``default``; never blocks."""
        return self.map.get(to_bytes(key, "key"), default)

    def __getitem__(self, key: bytes | str) -> bytes:
        return self.map[to_bytes(key, "key")]

    def __contains__(self, key: bytes | str) -> bool:
        return to_bytes(key, "key") in self.map

    def __len__(self) -> int:
        return len(self.map)

    def __iter__(self) -> Iterator[bytes]:
        return iter(list(self.map))

    def keys(self) -> list[bytes]:
        """The keys of the local map (a copy); never blocks."""
        return list(self.map)

    def items(self) -> list[tuple[bytes, bytes]]:
        """The ``(key, value)`` pairs of the local map (a copy); never blocks."""
        return list(self.map.items())

    @property
    def server(self) -> str:
        """The snapshot endpoint of the server this client follows now."""
        return self.servers[self.current][0]

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Block this greenlet until the first snapshot is in and the server's collector takes our
        updates; False on timeout."""
        return self.synced.wait(timeout)

    def set(self, key: bytes | str, value: bytes | str, ttl: float | None = None,
            wait: float | None = None) -> bytes | int:
        """Publish ``key = value`` (empty value: delete); returns its UUID.

        ``ttl``: seconds after which the server deletes the key.  ``wait``:
        seconds to wait for the server's KVPUB of this update, then return its
        sequence (ActorTimeout if it does not come; the update may still be
        applied later; :class:`UpdateRefused` if the server refused it).  Across a failover or re-sync, a snapshot that holds
        ``value`` for ``key`` counts as that KVPUB (its sequence is returned).
        Until then the update is resent (same UUID) to a collector that
        connects and every ``resend`` seconds: a server restart or a
        reconnect in flight loses nothing, and servers apply it once.
        Safe from many greenlets.
        """
        key, value = to_bytes(key, "key"), to_bytes(value, "value")
        if not key or key in (HUGZ, KTHXBAI, b"ICANHAZ?"):
            raise ValueError("bad key %r" % key[:40])
        props = b""
        if ttl:
            if not 0 < ttl < 1e9:
                raise ValueError("ttl must be positive seconds")
            props = encode_properties({"ttl": "%g" % ttl})
        uid = _uuid.uuid4().bytes
        if wait is None:
            self.send("SET", key, value, uid, props)
            return uid
        if not key.startswith(self.subtree):
            raise ValueError("wait= needs a key inside this client's subtree %r" % self.subtree)
        result = AsyncResult()
        self._acks[uid] = (result, key, value, [key, _ZERO, uid, props, value])
        try:
            self.send("SET", key, value, uid, props)
            return result.get(timeout=wait)
        except Timeout:
            raise ActorTimeout("no KVPUB for %r within %ss" % (key, wait)) from None
        finally:
            self._acks.pop(uid, None)

    def delete(self, key: bytes | str, wait: float | None = None) -> bytes | int:
        """Publish the deletion of ``key``; see :meth:`set`."""
        return self.set(key, b"", wait=wait)

    def on_change(self, callback: _C) -> _C:
        """Call ``callback(key, value, sequence)`` in the client's loop for every change (value b"": deleted)."""
        self._callbacks.append(callback)
        return callback

    def changes(self, timeout: float | None = None) -> Iterator[tuple[bytes, bytes, int]]:
        """Iterate over ``(key, value, sequence)`` changes from now on; ends after ``timeout`` s of none."""
        queue = Queue(self.max_events)
        self._watchers.append(queue)
        try:
            while True:
                try:
                    event = queue.get(timeout=timeout)
                except Empty:
                    return
                yield event
        finally:
            self._watchers.remove(queue)

    # -- actor side -------------------------------------------------------------
    def setup(self) -> None:
        self._collectors: dict[int, Any] = {}   # server index -> our XPUB to its collector
        self._up: set[int] = set()              # servers whose collector subscribed to us
        self._snapshot_in = False               # the current server's snapshot is applied
        self._discovering = False               # the current server's endpoints are being asked for
        self._discover_vote = False             # ... and then we vote (a failover)
        self._probes: dict[int, Any] = {}       # server index -> DEALER asking for its endpoints
        self._undiscovered: set[int] = set()    # servers that advertise nothing usable (logged once)
        for index, (_snapshot, _publisher, collector) in enumerate(self.servers):
            if collector is not None:
                self._open_collector(index)
        self.snapshot = self.sub = self._ask_timer = None
        self._received = self._counted = 0  # messages that show the server alive, and those seen by the check
        self._building = None
        self._buffer: list[Any] = []
        self._connect(0)
        for index in range(1, len(self.servers)):
            if self.servers[index][1] is None:
                self._discover(index)
        if self._probes:
            self.call_every(self.timeout, self._discover_all)
        self.call_every(max(self.timeout / 5, 0.01), self._check_silence)
        if self.resend:
            self.call_every(self.resend, self._resend)

    def _open_collector(self, index):
        """Our publisher to server ``index``'s collector: an XPUB, whose subscriptions show the collector
        connected (XPUB_VERBOSE: one for every connection, a restarted server's too)."""
        sock = self._secure(self.socket(zmq.XPUB, sndhwm=100000, xpub_verbose=1))
        limit_size(sock, MAX_REQUEST)  # it takes only subscriptions
        sock.connect(self.servers[index][2])
        self._collectors[index] = sock
        self.add_reader(sock, lambda frames, index=index: self._on_subscription(index, frames))

    def _on_subscription(self, index, frames):
        if not frames[0][:1] == b"\x01":
            return
        self.stats["collector_connects"] += 1
        again = index in self._up
        self._up.add(index)
        sock = self._collectors[index]
        for ack in list(self._acks.values()):  # what it may have missed while it was away
            sock.send_multipart(ack[3])
            self.stats["resent"] += 1
        if again and index == self.current and self._snapshot_in:
            # Connected again: the server restarted (or the link broke), and our subscriber may have
            # missed what it published meanwhile; the spec's HUGZ carry no sequence to tell.
            self._resync("its collector connected again")
        self._check_synced()

    def _check_synced(self):
        if self._snapshot_in and self.current in self._up and not self.synced.is_set():
            self.synced.set()

    def _resend(self):
        """Send the updates still waiting for their KVPUB again, to every collector."""
        if not self._acks:
            return
        for ack in list(self._acks.values()):
            for sock in self._collectors.values():
                sock.send_multipart(ack[3])
            self.stats["resent"] += 1

    def _secure(self, sock):
        if self.curve is not None:
            curve_client(sock, self.curve, self.server_public)
        return sock

    def _connect(self, index, vote=False):
        """Subscribe to server ``index``, then ask it for a snapshot (see :meth:`_ask`).

        ``vote``: ask at once, as after a silence: a passive backup publishes
        nothing until a request makes it take over, so waiting for its stream
        would only delay the failover (the snapshot is then checked, see
        :meth:`_proven`).
        """
        for sock in (self.snapshot, self.sub):
            if sock is not None:
                self.close_socket(sock)
        self.snapshot = self.sub = None
        if self._ask_timer is not None:
            self._ask_timer.cancel()
            self._ask_timer = None
        self.current = index
        self._snapshot_in = False
        snapshot, publisher, _collector = self.servers[index]
        if publisher is None:  # asked for its endpoints first (see _discovered)
            self._discovering, self._discover_vote = True, vote
            self._building, self._buffer = None, []
            self._heard = _monotonic()
            self._discover(index)
            return
        self._discovering = False
        sub = self.sub = self._secure(self.socket(zmq.SUB, rcvhwm=0))
        limit_size(sub, frame_limit(self.max_value))
        sub.setsockopt(zmq.SUBSCRIBE, self.subtree)
        if self.subtree:
            sub.setsockopt(zmq.SUBSCRIBE, HUGZ)
            sub.setsockopt(zmq.SUBSCRIBE, KVERR)
        sub.connect(publisher)
        self.snapshot = self._secure(self.socket(zmq.DEALER, rcvhwm=0))
        limit_size(self.snapshot, frame_limit(self.max_value))
        self.snapshot.connect(snapshot)
        self._live = False
        self._unproven = False
        self._building = {}
        self._buffer = []
        self._heard = _monotonic()
        self.add_reader(self.snapshot, self._on_snapshot)
        self.add_reader(sub, self._on_update)
        # A SUB receives only what is published after its subscription reached the server.  Wait
        # (briefly: a passive server sends nothing until our request makes it take over) for a
        # first message, which proves the subscription live, before asking for the snapshot.
        self._asked = False
        if vote:
            self._ask()
        else:
            self._ask_timer = self.call_later(self.sub_wait, self._ask)

    def _discover_all(self):
        """Ask every server whose endpoints we do not know yet for them (again: no answer within
        ``timeout``), so that every collector gets our updates before any failover."""
        for index, (_snapshot, publisher, _collector) in enumerate(self.servers):
            if publisher is None and index not in self._undiscovered:
                self._discover(index)

    def _discover(self, index):
        """Ask server ``index`` (known by its snapshot endpoint only) for its endpoints with a
        :data:`DISCOVERY` request, from a fresh DEALER (a request to a server that is down waits in
        one socket, never in many); its KTHXBAI names them (see :meth:`_discovered`)."""
        old = self._probes.pop(index, None)
        if old is not None:
            self.close_socket(old)
        sock = self._probes[index] = self._secure(self.socket(zmq.DEALER, rcvhwm=0))
        limit_size(sock, frame_limit(self.max_value))
        sock.connect(self.servers[index][0])
        self.add_reader(sock, lambda frames, index=index: self._discovered(index, frames))
        sock.send_multipart(encode_icanhaz(DISCOVERY))
        self.stats["discoveries"] += 1

    def _discovered(self, index, frames):
        if frames[0] != KTHXBAI or self.servers[index][1] is not None:
            return  # a server that sent entries too (an older zactors one): only its KTHXBAI counts
        try:
            properties = decode_kvmsg(frames).properties
        except ProtocolError:
            self.stats["malformed"] += 1
            return
        self.close_socket(self._probes.pop(index))
        if index == self.current:
            self._received += 1
        snapshot = self.servers[index][0]
        found = advertised(properties)
        if found is None:
            found = _spec_ports(snapshot)
            if found is None:
                log.error("%s: %s advertises no publisher and collector, and is not tcp://HOST:P with the spec's "
                          "P+1, P+2: give (snapshot, publisher, collector)", self.name, snapshot)
                self.stats["undiscovered"] += 1
                self._undiscovered.add(index)
                return
            log.info("%s: %s advertises no endpoints: using the spec's %s, %s", self.name, snapshot, *found)
        publisher, collector = (_reachable(e, snapshot) for e in found)
        self.servers[index] = (snapshot, publisher, collector)
        if index not in self._collectors:
            self._open_collector(index)
        if index == self.current and self._discovering:
            self._connect(index, self._discover_vote)

    def _ask(self, buffered=()):
        """Send ICANHAZ? (a Binary Star vote too).  Updates published meanwhile are buffered."""
        if self._asked:
            return
        self._asked = True
        if self._ask_timer is not None:
            self._ask_timer.cancel()
            self._ask_timer = None
        self._building = {}
        self._buffer = list(buffered)
        self._unproven = not self._live
        self._heard = _monotonic()
        self.snapshot.send_multipart(encode_icanhaz(self.subtree))
        self.stats["snapshot_requests"] += 1

    def _proven(self, frames):
        """After a snapshot asked before the SUB was live: does this first update prove nothing fell between?"""
        try:
            msg = decode_kvmsg(frames)
        except ProtocolError:
            return False
        if msg.key == HUGZ:
            return False  # the spec's HUGZ carry no sequence: it cannot tell
        return msg.sequence <= self.sequence or (not self.subtree and msg.sequence == self.sequence + 1)

    def _reask(self, buffered=()):
        log.debug("%s: subscription was not live when we asked; asking again", self.name)
        self.stats["snapshot_reasks"] += 1
        self._asked = False
        self._ask(buffered)

    def _check_silence(self):
        now = _monotonic()
        if self._received != self._counted:  # anything arrived since the last check
            self._counted = self._received
            self._heard = now
            return
        if now - self._heard > self.timeout:
            nxt = (self.current + 1) % len(self.servers)
            log.info("%s: server %s silent for %.1fs; trying %s", self.name, self.servers[self.current][0],
                     self.timeout, self.servers[nxt][0])
            self.stats["failovers"] += 1
            self._connect(nxt, vote=True)

    def _on_snapshot(self, frames):
        building = self._building
        if building is None:
            return
        self._received += 1
        # The hot path of a snapshot: only the key and the value matter in a KVSYNC.
        if len(frames) != 5 or len(frames[1]) != 8 or not frames[0]:
            self.stats["malformed"] += 1
            return
        key = frames[0]
        if key != KTHXBAI:
            value = frames[4]
            if value and (not self.subtree or key.startswith(self.subtree)):
                building[key] = value
            return
        msg = decode_kvmsg(frames)
        built, buffered = self._building, self._buffer
        self._building, self._buffer = None, []
        if msg.sequence < self.sequence:
            self.stats["stale_snapshots"] += 1
            log.warning("%s: %s sent a snapshot at sequence %d, older than ours (%d); kept ours, asking again in %ss",
                        self.name, self.servers[self.current][0], msg.sequence, self.sequence, self.timeout)
            nxt = (self.current + 1) % len(self.servers)
            self._ask_timer = self.call_later(self.timeout, self._connect, nxt, True)
            return
        old, self.map = self.map, built
        self.sequence = seq = msg.sequence
        self.stats["snapshots"] += 1
        if self._callbacks or self._watchers:
            for key, value in built.items():
                if old.get(key) != value:
                    self._changed(key, value, seq)
            for key in old:
                if key not in built:
                    self._changed(key, b"", seq)
        self._snapshot_in = True
        self._check_synced()
        # Updates waiting for their KVPUB may have been applied before this snapshot (a failover, a
        # re-sync): the snapshot holding the value we set is their acknowledgement.
        for result, key, value, _frames in list(self._acks.values()):
            if built.get(key, b"") == value and key.startswith(self.subtree):
                result.set(seq)
        if self._unproven and buffered:
            self._unproven = False
            if not self._proven(buffered[0]):
                self._reask(buffered)
                return
        for frames in buffered:
            if self._building is not None:
                break  # a gap: we asked again
            self._update(frames)

    def _on_update(self, frames):
        if not self._live:
            self._live = True
            if not self._asked:
                self._ask()
            elif self._building is None and self._unproven:
                self._unproven = False
                if not self._proven(frames):
                    self._reask((frames,))
                    return
        if self._building is not None:  # only the snapshot itself shows a request was accepted
            self._buffer.append(frames)
            return
        self._received += 1
        self._update(frames)

    def _update(self, frames):
        if len(frames) != 5 or len(frames[1]) != 8 or not frames[0]:
            self.stats["malformed"] += 1
            return
        key, seq = frames[0], _unpack_seq(frames[1])[0]  # only what a client uses: no full decode
        if key == KVERR:
            self.stats["refused"] += 1
            ack = self._acks.get(frames[2])
            if ack is not None:
                ack[0].set_exception(UpdateRefused(frames[4].decode("utf-8", "replace")))
            return
        if key == HUGZ:
            if seq > self.sequence and not self.subtree:  # the Guide's HUGZ carry the sequence: a lost tail
                self._resync("HUGZ at %d, we are at %d" % (seq, self.sequence))
            return
        if seq <= self.sequence or not key.startswith(self.subtree):
            return
        if seq != self.sequence + 1 and not self.subtree:
            self._resync("gap: expected %d, got %d" % (self.sequence + 1, seq))
            return
        self.sequence = seq
        value = frames[4]
        if value:
            self.map[key] = value
        else:
            self.map.pop(key, None)
        uid = frames[2]
        if uid and self._acks:
            ack = self._acks.get(uid)
            if ack is not None:
                ack[0].set(seq)
        if self._callbacks or self._watchers:
            self._changed(key, value, seq)

    def _resync(self, reason):
        log.info("%s: re-syncing (%s)", self.name, reason)
        self.stats["resyncs"] += 1
        self._connect(self.current)

    def _changed(self, key, value, seq):
        event = (key, value, seq)
        for callback in self._callbacks:
            try:
                callback(*event)
            except Exception:
                self.stats["callback_errors"] += 1
                log.exception("%s: change callback failed", self.name)
        for queue in self._watchers:
            try:
                queue.put_nowait(event)
            except Full:
                self.stats["events_dropped"] += 1

    @command("SET")
    def _publish(self, key, value, uid, props):
        frames = [key, _ZERO, uid, props, value]
        for sock in self._collectors.values():
            sock.send_multipart(frames)
        self.stats["sets"] += 1

    @command(reply=True)
    def info(self) -> dict[str, Any]:
        """INFO: the server in use, its endpoints, the map's sequence and size, and whether it is synced."""

        return {"server": self.servers[self.current][0], "endpoints": list(self.servers[self.current]),
                "sequence": self.sequence, "keys": len(self.map),
                "synced": self._snapshot_in and self.current in self._up and self._building is None,
                "subtree": self.subtree, "counters": dict(self.stats)}
