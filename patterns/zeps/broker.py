"""The ZEPS broker: journaled publish-subscribe with replay and credit flow control.

::

    broker = Broker("/var/lib/zeps", "tcp://127.0.0.1:*")   # returns once bound
    broker.endpoint                                          # the real endpoint
    broker.call("INFO")                                      # streams, subscribers, counters
    broker.destroy()

Behaviour (the ZEPS spec, and :mod:`.protocol` for what it leaves open):

- Streams whose journals are in ``journal_dir`` are opened at start, and
  ``streams=`` pre-declares more; others are created on their first ATTACH,
  within budgets (each refusal is an INVALID with the reason, counted in
  ``streams_refused``): with ``permissions`` only by a key granted
  ``create`` on the name; without (no CURVE: a local, unauthenticated
  setup, as before) by anyone; at most ``max_streams_per_peer`` existing
  streams created by one peer (its key, else its connection); at most
  ``max_streams`` in all.  A stream without peers for ``stream_idle``
  seconds is closed, its descriptors released (reopened by the next
  ATTACH; INFO shows it as it was, ``"open": false``), and at most
  ``max_open_streams`` are open at once (default: a
  quarter of half the open-file limit, ~4 descriptors a stream; the idlest
  is closed first for a new one).  A stream that never held a message is
  deleted when it closes, and at start: junk names do not outlive their
  peers, nor a restart.
- One ROUTER (the kernel's :class:`~zactors.actors.router.Router`, whose
  per-peer backlog is the backpressure under the credit); one peering (a
  client DEALER) attaches one stream.  A stream is created on its first
  ATTACH: a directory under ``journal_dir`` whose name is the stream name
  with every byte outside ``[A-Za-z0-9_-]`` escaped as ``%XX``, so ``../x``
  or ``/etc`` never leave ``journal_dir``.  Stream names are at most
  ``max_stream_name`` bytes; streams at most ``max_streams``.
- Every PUBLISH is appended to the stream's journal and gets the next
  sequence.  Each stream's journal is driven by the kernel's
  :class:`~zactors.actors.group_commit.GroupCommit`: appends are buffered and
  handed to the OS once per loop round (after the socket drain), so the loop
  never waits on the disk; ``fsync`` follows ``fsync``: ``"never"``, a period
  in seconds (default 0.1: group commit), or ``"batch"`` (after every
  write), always on the hub's threadpool.  A failed write is retried every
  0.1 s.  A publisher is never refused for speed.  A journal that
  refuses an append (disk full, I/O error) answers that PUBLISH with INVALID.
- Acknowledgement level, ``ack``: ``"written"`` (default) or ``"synced"``.
  A PING is answered with PING-OK, and a message is delivered live (or
  replayed), only once every PUBLISH received before it on that peering is at
  that level: ``"written"`` means handed to the OS (it survives ``kill -9`` of
  the broker, not a power loss); ``"synced"`` means an fsync covered it (it
  survives a power loss).  ``Publisher.flush`` is built on the PING-OK.  With
  ``"synced"`` the journal is fsynced after every write round (group commit:
  one fsync covers every message written while the previous one ran, on the
  threadpool), whatever ``fsync`` says; ``fsync="never"`` is refused.
- Credit flow, as the spec says: a subscriber whose credit covers a message
  (its DELIVER frame size) gets it straight from the publish path, with no
  disk read.  One whose credit does not is switched to replay at that
  sequence; once credit comes back it is replayed from the journal (the
  journal's tail cache, or the disk) by one cooperative task for all
  replaying subscribers, filtered by its patterns, and switched back to live
  when it has caught up.  Every subscriber gets each matching message once,
  in sequence order, with no gap, whatever its speed.
- Credit budget: what the broker may have to hold for subscribers is the
  credit it honours, so credit is honoured from one budget of
  ``max_credit_total`` bytes (default 64 MiB) for all subscribers, at most
  ``max_credit`` (default 32 MiB) each (the kernel's
  :class:`~zactors.actors.budget.Budget`).
  A subscriber holds what it was granted until it has drained it: the
  broker PINGs it after a CREDIT (a probe), and its PING-OK says that
  everything sent before the PING left the broker.  Credit beyond the
  budget waits, first come first served, for others to drain: counted in
  ``credit_deferred``, and told once (INVALID "credit budget: ...") until
  it is granted; meanwhile credit others hold unspent goes back in line
  behind it (``credit_revoked``; granted again in turn), so peers sitting on
  credit cannot keep the others waiting.  A subscriber that leaves with bytes still on their way
  (a peer that stopped reading) keeps them in the budget under its
  identity until it answers a PING or its connection is gone.
- Heartbeats: the broker PINGs a peer silent for ``heartbeat`` seconds and
  drops a peer silent for ``expiry`` seconds (sending it DETACH).  Memory per
  peer is bounded: at most ``max_patterns`` patterns, credit capped at
  ``max_credit`` bytes (what may be in flight to it), libzmq's send queue
  (``sndhwm``) and the kernel outbox behind it; at most ``max_peers``
  attached peers.  Every frame is capped before it is read: a peer that
  sends one over ``max_message`` plus the PUBLISH header is disconnected by
  libzmq (``ZMQ_MAXMSGSIZE``: the frame is never allocated), counted in
  ``disconnects`` with every other closed connection; a PUBLISH under that
  cap but over ``max_message`` is answered INVALID.
- Idempotent publishing (the PUBLISH-ID extension, :mod:`.protocol`): a
  message a producer already published on the stream is dropped as a
  duplicate, by (producer id, producer sequence), remembered in memory for
  at most ``max_producers`` producers per stream (least recently heard from
  evicted, counted ``producers_evicted``), and in the journal: a stream
  reopened after a restart or a crash knows what its journal kept.
- Invalid or out-of-order commands are answered with INVALID (a readable
  reason) and counted (``invalid``); nothing a peer sends stops the broker
  or another peer's flow.
- Real-time output over UDP multicast (``multicast=(group, port)``,
  ``multicast_interface``, ``multicast_ttl``): every written message is also
  sent as a datagram carrying its sequence; see :mod:`.multicast`.
- CURVE (``curve=keys``) through :mod:`zactors.actors.auth`, and per-stream
  permissions (``permissions=``, a :class:`~.permissions.Permissions`): a
  peer's key (the ZAP User-Id) must be allowed to publish or subscribe to the
  stream, else INVALID saying so (counted as ``refused``, and as
  ``refused_attach``, ``refused_publish`` or ``refused_subscribe``; logged
  at most once every 10 s).

Commands: ``INFO`` (reply: streams with their sequence range, rate and bytes
on disk; subscribers with pattern, mode, lag and credit; counters),
``RETAIN`` (no reply: apply retention now), and ``$STATS``/``$TERM``.  The handle is an actor handle: safe from many
greenlets of its thread, not across OS threads.  Tools reach ``INFO`` over
the network with the QUERY extension command (see :mod:`.protocol`); with
``permissions``, a QUERY shows only the streams the asking key may publish
or subscribe to (with their subscribers), and not the journal path.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import struct
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from zmq import ZMQError

from zactors.actors.actor import Actor, command
from zactors.actors.auth import Keypair, curve_server
from zactors.actors.budget import Budget
from zactors.actors.group_commit import GroupCommit
from zactors.actors.heartbeat import Liveness
from zactors.actors.journal import Journal, JournalError, SequenceGone
from zactors.actors.router import Router
from zactors.actors.speedups import send_each, send_message

from . import protocol as p
from .deliver import frames as _frames, matcher_of
from .matcher import Filter, Matcher, PatternError
from .names import stream_directory, stream_name

if TYPE_CHECKING:
    from .permissions import Permissions

__all__ = ["Broker", "ACK_LEVELS"]

#: what a PING-OK (and a delivery) waits for: the OS has the message, or an fsync covered it
ACK_LEVELS = ("written", "synced")

log = logging.getLogger(__name__)

_monotonic = time.monotonic
_unpack_u32 = struct.Struct(">I").unpack_from
_unpack_u64 = struct.Struct(">Q").unpack_from
_LIVE, _REPLAY = "live", "replay"
#: at most this many client keys noted from ATTACHes not handled yet
_MAX_PENDING_KEYS = 10000
#: seconds between two log lines about refusals by the permissions (each one is counted)
_REFUSE_LOG_PERIOD = 10.0
#: a PUBLISH frame beyond its key and body: signature, command, key length, body length
_PUBLISH_OVERHEAD = 8
#: room for every other command (strings of at most 255 bytes, numbers)
_MAX_COMMAND = 1024
#: PINGs unanswered per peer at most (each notes how much had been sent before it)
_MAX_PROBES = 64
#: descriptors an open stream may take (journal segment, directory, index, ...): for max_open_streams
_FDS_PER_STREAM = 4
#: a stream closes for a new one only once it has been idle (and its journal quiet) this long (s)
_MIN_IDLE = 1.0


def _open_stream_budget(max_streams):
    """Streams open at once by default: a quarter of half the open-file limit (the rest for connections)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return max_streams
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return max_streams
    return max(1, min(max_streams, soft // 2 // _FDS_PER_STREAM))


class _Stream:
    __slots__ = ("name", "journal", "commit", "matcher", "peers", "fresh", "delivered_seq", "samples",
                 "publishes", "pings", "producers", "floor", "idle_since", "creator", "pinned")

    def __init__(self, name, journal, commit):
        self.name = name
        self.journal = journal
        self.commit = commit      # its GroupCommit: writes, fsyncs, PING-OK waits
        self.matcher = Matcher()
        self.peers = {}           # identity -> _Peer attached here
        self.fresh = []           # journal Records appended this round: written, then delivered live
        self.delivered_seq = journal.last_seq  # the publish path delivered up to here
        self.floor = journal.last_seq  # its last sequence when this run of the broker opened it (EPOCH)
        self.samples = []         # (monotonic, last_seq) for the rate
        self.publishes = 0
        self.pings = {}           # ack="synced": token -> identity of a PING waiting for its fsync
        self.producers = OrderedDict()  # PUBLISH-ID: producer -> (its last sequence, our sequence), LRU order
        self.idle_since = _monotonic()  # no peer since then (None while it has peers)
        self.creator = None       # the peer (key or identity) that created it, for its quota
        self.pinned = False       # declared: never closed for idleness


class _Peer:
    __slots__ = ("identity", "stream", "filter", "credit", "next", "floor", "mode", "published",
                 "key", "may_publish", "delivered", "held", "gaps", "honoured", "acked", "probes", "starved")

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
        self.probes = deque()     # per unanswered PING: the bytes sent before it
        self.starved = False      # its credit waits for the budget (and it was told)


class Broker(Actor):
    """A ZEPS broker journaling under ``journal_dir``.  See the module docstring."""

    #: replay: records read per journal call (one task step)
    replay_batch = 256
    #: messages waiting in the kernel outbox for one peer before it is switched to replay
    transport_high = 1000
    #: libzmq's send queue per peer, in messages: credit is the flow control, so it is
    #: sized to hold a full window of small messages (max_credit bounds the bytes)
    sndhwm = 100000

    def __init__(self, journal_dir: str | os.PathLike[str], endpoint: str = "tcp://127.0.0.1:*", *,
                 fsync: str | float = 0.1, ack: str = "written", heartbeat: float = 1.0, expiry: float = 5.0,
                 max_message: int = 1 << 20, max_streams: int = 1024, max_peers: int = 100000,
                 max_patterns: int = 64, max_producers: int = 10000, max_stream_name: int = 80,
                 max_credit: int = 32 << 20, max_credit_total: int = 64 << 20, max_streams_per_peer: int = 16,
                 max_open_streams: int | None = None, stream_idle: float = 60.0,
                 segment_bytes: int = 64 << 20, retain_bytes: int | None = None,
                 retain_seconds: float | None = None, curve: Keypair | bytes | str | None = None,
                 curve_domain: str | None = None, permissions: Permissions | None = None,
                 multicast: tuple[str, int] | None = None, multicast_interface: str | None = None,
                 multicast_ttl: int = 1, streams: Iterable[bytes | str] = (), name: str | None = None) -> None:
        if fsync not in ("never", "batch") and not (isinstance(fsync, (int, float)) and fsync > 0):
            raise ValueError("fsync must be 'never', 'batch' or a period in seconds > 0, got %r" % (fsync,))
        if ack not in ACK_LEVELS:
            raise ValueError("ack must be one of %s, got %r" % (", ".join(ACK_LEVELS), ack))
        if ack == "synced" and fsync == "never":
            raise ValueError("ack='synced' needs fsync: it cannot be 'never'")
        if not 0 < heartbeat <= expiry:
            raise ValueError("need 0 < heartbeat <= expiry")
        self.journal_dir = os.path.abspath(journal_dir)
        self.endpoint = endpoint
        self.fsync = fsync
        self.ack = ack
        self.heartbeat = heartbeat
        self.expiry = expiry
        self.max_message = max_message
        self.max_streams = max_streams
        self.max_peers = max_peers
        self.max_patterns = max_patterns
        self.max_producers = max_producers
        self.max_stream_name = max_stream_name
        self.max_credit = max_credit
        self.max_credit_total = max_credit_total
        self.max_streams_per_peer = max_streams_per_peer
        self.max_open_streams = max_open_streams
        self.stream_idle = stream_idle
        if max_streams_per_peer < 1 or (max_open_streams is not None and max_open_streams < 1) or stream_idle <= 0:
            raise ValueError("max_streams_per_peer and max_open_streams must be >= 1, stream_idle > 0")
        if min(max_credit, max_credit_total) < max_message + 64:
            raise ValueError("max_credit and max_credit_total must hold a message of max_message bytes")
        self.journal_options = dict(segment_bytes=segment_bytes, retain_bytes=retain_bytes,
                                    retain_seconds=retain_seconds, max_producers=max(max_producers, 1))
        self.curve = curve
        self.curve_domain = curve_domain
        self.permissions = permissions
        self.multicast = multicast
        self.multicast_interface = multicast_interface
        self.multicast_ttl = multicast_ttl
        self.declared = [x.encode() if isinstance(x, str) else bytes(x) for x in streams]
        if permissions is not None and curve is None:
            raise ValueError("permissions need CURVE: they are granted to client keys")
        if name:
            self.name = name

    # -- setup ----------------------------------------------------------------------
    def setup(self) -> None:
        os.makedirs(self.journal_dir, mode=0o700, exist_ok=True)
        self._streams: dict[bytes, _Stream] = {}
        self._peers: dict[bytes, _Peer] = {}
        self._delivered_gone = 0  # messages delivered to peers since dropped (INFO "delivered": all of them)
        self._replaying: dict[bytes, _Peer] = {}        # peers with credit waiting to be replayed (ordered set)
        self._pumping = False
        self._ping_tokens = 0     # ack="synced": numbers the PINGs waiting for an fsync
        self._incarnation = secrets.randbits(64)  # names this run (EPOCH): a client resuming across a restart knows
        self._alive: Liveness[bytes] = Liveness(self.heartbeat, self.expiry)
        self._alive_timer = None
        self._heard: set[bytes] = set()         # identities heard from since the last liveness sweep
        self._refuse_logged = -_REFUSE_LOG_PERIOD  # when a refusal was last logged
        self._windows = Budget(self.max_credit_total, self.max_credit)  # credit honoured, not yet drained
        self._gone: dict[bytes, _Peer] = {}     # left with bytes not known drained: held in the budget
        self._reclaimed = 0.0
        self._beats = 0
        self.router = Router(self, self._on_message, on_unroutable=self._on_unroutable,
                             on_overflow=self._on_overflow, on_held=self._on_held, on_drained=self._on_drained,
                             high=self.transport_high, backlog=self.transport_high * 2,
                             sndhwm=self.sndhwm,
                             max_message=max(self.max_message + _PUBLISH_OVERHEAD, _MAX_COMMAND))
        self._outbox_send = self.router.outbox.send
        self._outbox_pending = self.router.outbox.pending
        if self.curve is not None:
            curve_server(self.router.socket, self.curve, self.curve_domain)
        if self.permissions is None:
            self.add_reader(self.router.socket, self._on_frames)  # ours: the PUBLISH fast path
        else:                       # zero-copy frames: an ATTACH's User-Id names the client's key
            self._keys: dict[bytes, str | None] = {}
            self.add_reader(self.router.socket, self._on_keyed_frames, copy=False)
        self.endpoint = self.router.bind(self.endpoint)
        self._multicast = None
        if self.multicast is not None:
            from .multicast import MulticastSender
            group, port = self.multicast
            self._multicast = MulticastSender(group, port, interface=self.multicast_interface, ttl=self.multicast_ttl)
            self.call_every(self.heartbeat, self._multicast_heads)
        self._closed_streams: dict[bytes, dict[str, Any]] = {}  # on disk, not open: name -> its INFO then
        self._creators: dict[Any, int] = {}       # peer (key or identity) -> existing streams it created
        self._max_open = self.max_open_streams or _open_stream_budget(self.max_streams)
        for name in self.declared + self._existing():  # pre-declared streams, and journals already there
            if name in self._streams:
                continue
            stream = self._open(None, name)
            if stream is None:
                raise RuntimeError("cannot open stream %s under %s" % (name.decode(), self.journal_dir))
            if name in self.declared:
                stream.pinned = True
            elif not stream.journal.last_seq or len(self._streams) >= self._max_open:
                self._close_stream(stream)  # never used (deleted), or over the budget of open streams
        self.call_every(max(0.5, min(self.stream_idle / 2, 10.0)), self._close_idle)
        self.call_every(1.0, self._sample)
        self.call_every(self.heartbeat, self._reclaim)
        self.call_every(10.0, self._retain)
        log.debug("%s: serving %s, journal %s", self.name, self.endpoint, self.journal_dir)

    def teardown(self) -> None:
        if "_multicast" not in vars(self): return  # noqa: E701 - setup failed before binding: nothing to close
        if self._multicast is not None:
            self._multicast.close()
        for identity in list(self._peers):
            self._send(identity, p.DETACH_FRAME)
        for stream in self._streams.values():
            stream.commit.stop()      # the last write (and fsync); logs what it could not write
            stream.journal.close(sync=self.fsync != "never")

    # -- the hot path ---------------------------------------------------------------
    def _on_keyed_frames(self, frames):
        """With permissions: note the ZAP User-Id of each ATTACH, then as :meth:`_on_frames`."""
        data = [f.bytes for f in frames]
        if len(data) == 2 and len(data[1]) > 2 and data[1][2] in (p.ATTACH, p.ATTACH_EXISTING, p.QUERY):
            if len(self._keys) >= _MAX_PENDING_KEYS:       # ATTACHes the handler has not taken: bounded
                self._keys.clear()
            try:
                self._keys[data[0]] = frames[0].get("User-Id") or None
            except ZMQError:
                self._keys[data[0]] = None
        self._on_frames(data)

    def _on_frames(self, frames):
        """Every message on the ROUTER: a PUBLISH from an attached peer is parsed inline."""
        if len(frames) == 2:
            identity, frame = frames
            peer = self._peers.get(identity)
            if peer is not None:
                self._heard.add(identity)
                size = len(frame)
                if size > 7 and frame[2] == 6 and frame[0] == 0xAA and frame[1] == 0xA5:
                    end = 4 + frame[3]
                    if size >= end + 4 and _unpack_u32(frame, end)[0] == size - end - 4:
                        key, body = frame[4:end], frame[end + 4:]
                        if peer.may_publish is not True or size - 8 > self.max_message:
                            self._publish(peer, key, body)  # checks, and INVALID with the reason
                            return
                        stream = peer.stream  # the common case, inline: append, then deliver this round
                        try:
                            record = stream.journal.append_record(key, body)
                        except JournalError:
                            self._publish(peer, key, body)  # refused again there, and said so
                            return
                        peer.published = record[0]
                        stream.fresh.append(record)
                        stream.commit.kick()
                        return
            self._on_message(identity, [frame])
        elif len(frames) > 2:
            self._on_message(frames[0], frames[1:])
        else:
            self.stats["router_malformed"] += 1

    def _on_message(self, identity, frames):
        if len(frames) != 1:
            self._invalid(identity, "one ZEPS command per message, got %d frames" % len(frames))
            return
        frame = frames[0]
        try:
            message = p.decode(frame)
        except p.ProtocolError as exc:
            self._invalid(identity, str(exc))
            return
        peer = self._peers.get(identity)
        kind = type(message)
        if kind is p.Publish:
            if peer is None:
                self._unattached(identity, "PUBLISH")
            else:
                self._publish(peer, message.key, message.body)
        elif kind is p.PublishId:
            if peer is None:
                self._unattached(identity, "PUBLISH")
            else:
                self._publish(peer, message.key, message.body, message.producer, message.sequence)
        elif kind is p.Credit:
            if peer is None:
                self._unattached(identity, "CREDIT")
            else:
                self._credit(peer, message.credit)
        elif kind is p.Ping:
            self._ping(identity, peer)
        elif kind is p.PingOk:
            self._ping_ok(identity)
        elif kind is p.DetachOk:
            pass
        elif kind is p.Attach:
            self._attach(identity, peer, message)
        elif kind is p.Subscribe or kind is p.SubscribeSince:
            self._subscribe(identity, peer, message)
        elif kind is p.Detach:
            if peer is not None:
                self.stats["detached"] += 1
                self._drop(peer)
            self._send(identity, p.DETACH_OK_FRAME)
        elif kind is p.Features:
            if peer is not None:  # (before ATTACH: ignored, as the extension says)
                names = message.features.split()
                peer.gaps = b"gaps" in names
                if b"epochs" in names:
                    self._send(identity, p.epoch(self._incarnation, peer.stream.floor))
        elif kind is p.Query:
            self.stats["queries"] += 1
            may_see = None
            if self.permissions is not None:   # a key sees only the streams it may use
                key = self._keys.pop(identity, None)
                may_see = partial(self.permissions.may_attach, key)
            self._send(identity, p.query_ok(json.dumps(self._info(may_see)).encode()))
        else:
            self._invalid(identity, "a broker does not accept %s" % p.NAMES[message.id])

    def _publish(self, peer, key, body, producer=None, sequence=0):
        stream = peer.stream
        if len(key) + len(body) > self.max_message:
            self._invalid(peer.identity, "message of %d bytes is over the limit of %d"
                          % (len(key) + len(body), self.max_message))
            return
        if peer.may_publish is not True:
            if not self._allowed(peer, "publish"):
                return
        producers = stream.producers
        if producer is not None:
            seen = producers.get(producer)
            if seen is not None:
                producers.move_to_end(producer)
                if sequence <= seen[0]:  # journaled already (a resend): its PING waits for that one
                    self.stats["duplicates_dropped"] += 1
                    peer.published = max(peer.published, seen[1])
                    return
        try:  # PUBLISH-ID: the producer goes into the journal too, so dedup survives a restart
            record = stream.journal.append_record(
                key, body, None, None if producer is None else (producer.to_bytes(8, "little"), sequence))
        except JournalError as exc:
            self.stats["journal_refused"] += 1
            self._invalid(peer.identity, "stream %s refused the message: %s" % (stream.name.decode(), exc))
            return
        if producer is not None:
            producers[producer] = (sequence, record[0])
            if len(producers) > self.max_producers:  # a budget: the least recently heard from goes
                producers.popitem(last=False)
                self.stats["producers_evicted"] += 1
        peer.published = record[0]
        stream.fresh.append(record)
        stream.commit.kick()

    def _written(self, stream, seq):
        """``stream``'s GroupCommit wrote (``ack="written"``) or fsynced (``"synced"``) its journal up
        to ``seq``: deliver the fresh messages up to there to live subscribers.

        At the level first: a subscriber never holds a message that a crash
        (of the broker, or of the machine with ``"synced"``) could take back:
        its sequence would be given to another.
        """
        fresh = stream.fresh
        if not fresh:
            return
        n = seq - fresh[0][0] + 1  # fresh holds consecutive sequences; with "synced" some may be past seq
        if n <= 0:
            return
        if n >= len(fresh):
            stream.fresh = []
        else:
            fresh, stream.fresh = fresh[:n], fresh[n:]
        stream.publishes += len(fresh)
        stream.delivered_seq = fresh[-1][0]
        if self._multicast is not None:
            multicast, name = self._multicast.send, stream.name
            for seq, _, key, body in fresh:
                multicast(name, seq, key, body)
        matcher = stream.matcher
        if not matcher:
            return
        match = matcher.match
        send, pending = self._outbox_send, self._outbox_pending
        sock = self.router.socket
        handle = sock.handle
        direct = {}  # identity -> nothing waits in the outbox for it (asked once per call, not per message)
        frames = _frames(fresh, 0, fresh[-1][0], 1 << 62, None)[0]  # every DELIVER frame, in one call
        for (seq, _, key, _), frame in zip(fresh, frames):
            owners = match(key)
            if owners:
                cost = len(frame)
                for sub in owners:
                    if seq < sub.floor or sub.mode is not _LIVE:
                        continue
                    if sub.credit >= cost and not sub.held:
                        sub.credit -= cost
                        sub.delivered += 1
                        identity = sub.identity
                        ok = direct.get(identity)
                        if ok is None:
                            ok = direct[identity] = not pending(identity)
                        if ok:
                            try:  # straight to libzmq (one C call), the kernel outbox when it would block
                                send_message(sock, handle, (identity, frame))
                                continue
                            except ZMQError:
                                direct[identity] = False
                        send(identity, [frame])  # behind what waits already, in order (or dropped: gone)
                    else:
                        self._to_replay(sub, seq)

    def _to_replay(self, sub, seq):
        """``sub`` could not take message ``seq`` live: replay from it."""
        sub.stream.matcher.remove(sub.filter)
        sub.mode = _REPLAY
        sub.next = seq
        self.stats["to_replay"] += 1

    # -- the credit budget ---------------------------------------------------------
    def _credit(self, peer, amount):
        identity = peer.identity
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
        if peer.mode is _REPLAY and peer.identity not in self._replaying:
            self._replaying[peer.identity] = peer
            self._pump()

    def _served(self, grants):
        """Credit that waited for the budget, granted now."""
        for identity, amount in grants:
            peer = self._peers.get(identity)
            if peer is not None:  # (a peer that left cancelled its wait)
                self._grant(peer, amount)
                if not self._windows.wanted(identity):
                    peer.starved = False

    def _probe(self, peer):
        """PING ``peer`` (attached or gone) if it has bytes not known drained: its PING-OK says they are."""
        if peer.honoured - peer.credit > peer.acked:
            self._ping_peer(peer.identity)

    def _ping_peer(self, identity):
        """Every PING to a peer goes here: it notes what had been sent before it, for the PING-OK."""
        peer = self._peers.get(identity) or self._gone.get(identity)
        if peer is None:
            self._send(identity, p.PING_FRAME)
        elif len(peer.probes) < _MAX_PROBES and self._send(identity, p.PING_FRAME):
            peer.probes.append(peer.honoured - peer.credit)  # (full: it answers nothing; see _reclaim)

    def _ping_ok(self, identity):
        peer = self._peers.get(identity)
        gone = peer is None
        if gone:
            peer = self._gone.get(identity)
        if peer is None or not peer.probes:
            return
        drained = peer.probes.popleft()
        if drained > peer.acked:
            grants = self._windows.release(identity, drained - peer.acked)
            peer.acked = drained
            if gone and drained >= peer.honoured:  # all it was sent left us
                del self._gone[identity]
                grants += self._windows.forget(identity)
            self._served(grants)

    def _release(self, peer, dropped):
        """``peer`` left: its unspent credit back to the budget; what is on its way stays until drained.

        ``dropped`` are the messages its outbox held (they never left): their
        DELIVER bytes are free again, and their PINGs will never be answered.
        """
        identity = peer.identity
        windows = self._windows
        windows.cancel(identity)
        peer.starved = False
        unsent = pings = 0
        for frames in dropped:
            frame = frames[0]
            if frame[2] == p.DELIVER:
                unsent += len(frame)
            elif frame[2] == p.PING:
                pings += 1
        for _ in range(min(pings, len(peer.probes))):  # the newest PINGs were the ones still here
            peer.probes.pop()
        free = peer.credit + min(unsent, peer.honoured - peer.credit - peer.acked)
        grants = windows.release(identity, free)
        peer.honoured -= free
        peer.credit = 0
        if peer.honoured > peer.acked:
            gone = self._gone
            gone[identity] = peer
            if len(gone) > self.max_peers:  # bounded: the oldest is forgotten
                grants += windows.forget(gone.pop(next(iter(gone))).identity)
            self._ping_peer(identity)
        else:
            grants += windows.forget(identity)
        self._served(grants)

    def _reclaim(self):
        """Every beat: PING the peers gone with bytes on their way (answered, or unroutable once their
        connection is gone), and the holders whose drain is not known while credit waits."""
        self._beats += 1
        for identity, peer in list(self._gone.items()):
            if len(peer.probes) < _MAX_PROBES:
                self._ping_peer(identity)
            elif self._beats % 16 == 0:  # 64 unanswered: is its connection still there? (its sends are
                self._send(identity, p.PING_FRAME)  # frozen: an unnoted PING's answer frees nothing early)
        self._probe_holders()

    def _probe_holders(self):
        """While credit waits (at most every 50 ms): PING the holders whose drain is not known, and
        put the credit they hold unspent back in line behind the waiters (granted again in turn), so
        that peers sitting on credit they do not use cannot keep the others waiting."""
        now = _monotonic()
        windows = self._windows
        if not windows.waiting or now - self._reclaimed < 0.05:
            return
        self._reclaimed = now
        grants = []
        for identity in windows.holders():
            peer = self._peers.get(identity)
            if peer is None:
                continue
            if not peer.probes:
                self._probe(peer)
            if peer.credit > 0 and identity not in self._replaying:  # (a replay step may be spending it)
                unspent, peer.credit = peer.credit, 0
                peer.honoured -= unspent
                self.stats["credit_revoked"] += 1
                grants += windows.revoke(identity, unspent)
        self._served(grants)

    # -- replay ---------------------------------------------------------------------
    def _pump(self):
        if not self._pumping and self._replaying:
            self._pumping = True
            self.start_task(self._replay(), self._replay_done)

    def _replay(self):
        """The cooperative task serving every replaying subscriber in turn, a batch per step."""
        replaying = self._replaying
        while replaying:
            for identity in list(replaying):
                peer = replaying.get(identity)
                if peer is None:
                    continue
                if not self._replay_step(peer):
                    replaying.pop(identity, None)
                yield

    def _replay_done(self, task):
        self._pumping = False
        if task.error is not None:  # a bug: do not spin on it; the next CREDIT of each peer tries again
            log.error("%s: replay failed: %r", self.name, task.error)
            self.stats["replay_errors"] += 1
            self._replaying.clear()
        self._pump()  # credit may have come in at the very end

    def _replay_step(self, peer):
        """Deliver up to a batch from the journal; True if there is more to do now.

        Replay goes up to the last sequence the publish path has delivered
        live (``stream.delivered_seq``); past it the subscriber is live again
        and the next flush delivers the rest.
        """
        stream = peer.stream
        if peer.held:
            return False
        limit = stream.delivered_seq
        if peer.next > limit:
            self._go_live(peer)
            return False
        try:
            records = self._read(stream.journal, peer.next)
        except SequenceGone as gone:
            self.stats["replay_skipped_retention"] += 1
            log.info("%s: %r asked for %d, retention kept from %d", self.name, peer.identity, peer.next,
                     gone.first_seq)
            if peer.gaps:  # asked to be told; others see the jump in the sequences
                self._send(peer.identity, p.gap(peer.next, gone.first_seq - 1))
            peer.next = gone.first_seq
            return True
        except JournalError as exc:
            self._unreadable(peer, exc)
            return False
        # the whole batch matched and encoded in one call, and sent in one while libzmq takes it
        frames, credit, consumed, short = _frames(records, 0, limit, peer.credit, matcher_of(peer.filter))
        identity = peer.identity
        sock = self.router.socket
        sent = 0 if self._outbox_pending(identity) else send_each(sock, sock.handle, identity, frames)
        stopped = False
        if sent < len(frames):  # the rest behind the kernel outbox (in order), or the peer is gone
            send = self._outbox_send
            for frame in frames[sent:]:
                if not send(identity, [frame]):  # gone (dropped by on_unroutable)
                    stopped = True
                    break
                sent += 1
                if peer.held:  # the transport is full: sent, but go no further now
                    stopped = True
                    break
        more = not short
        if stopped:
            credit += sum(map(len, frames[sent:]))  # not sent: not spent
            if sent:
                peer.next = _unpack_u64(frames[sent - 1], 3)[0] + 1
            more = False
        elif consumed:
            peer.next = records[consumed - 1][0] + 1
        peer.credit = credit
        peer.delivered += sent
        self.stats["replayed"] += sent
        if not more:
            return False
        if peer.next > limit:
            self._go_live(peer)
            return False
        if not records:
            self._unreadable(peer, "the journal returned nothing (written up to %d)" % limit)
            return False
        return True

    def _read(self, journal, seq):
        """Up to a batch of records from ``seq``.  A batch that cannot be read is tried in halves, so
        that the records before a corrupt one are still delivered and the error names its sequence."""
        batch = self.replay_batch
        while True:
            try:
                return journal.read(seq, max_records=batch, max_bytes=4 << 20)
            except SequenceGone:
                raise
            except JournalError:
                if batch == 1:
                    raise
                batch >>= 1

    def _unreadable(self, peer, error):
        """Replay cannot read message ``peer.next``: say so to the peer (INVALID "REPLAY: ..."), never skip it.

        The peer stays where it is; its next CREDIT tries again (a journal
        repaired meanwhile serves it).
        """
        stream = peer.stream
        self.stats["replay_errors"] += 1
        log.error("%s: stream %s: replay cannot read sequence %d: %s", self.name,
                  stream.name.decode("ascii", "replace"), peer.next, error)
        self._send(peer.identity, p.invalid("REPLAY: stream %s: sequence %d cannot be read: %s"
                                            % (stream.name.decode("ascii", "replace"), peer.next, error)))

    def _go_live(self, peer):
        peer.mode = _LIVE
        peer.floor = peer.next
        peer.stream.matcher.add(peer.filter)

    # -- the journal ----------------------------------------------------------------
    def _write_failed(self, stream, exc):
        """GroupCommit's ``on_error``: once per failing streak of writes, or a failed fsync.

        With ``ack="synced"`` the PINGs waiting for an fsync are answered
        INVALID "PING: ..." now (as ``when_written``'s ``on_error`` does for
        ``"written"``): not synced, and maybe never.
        """
        if stream.pings:
            pings, stream.pings = stream.pings, {}
            for identity in pings.values():
                self._invalid(identity, "PING: stream %s cannot write its journal: %s" % (stream.name.decode(), exc))
        if stream.journal.broken:  # a failed fsync: final, the journal refuses until reopened
            self.stats["journal_sync_errors"] += 1
            log.error("%s: stream %s: fsync failed: %s", self.name, stream.name.decode("ascii", "replace"), exc)
        else:
            self.stats["journal_write_errors"] += 1
            log.error("%s: stream %s: journal write failed (retrying every 0.1 s): %s", self.name,
                      stream.name.decode("ascii", "replace"), exc)

    def _retain(self):
        for stream in self._streams.values():
            try:
                stream.journal.apply_retention()
            except (JournalError, OSError) as exc:
                log.error("%s: stream %s: retention failed: %s", self.name, stream.name, exc)

    # -- commands from peers --------------------------------------------------------
    def _attach(self, identity, peer, message):
        if peer is not None:
            self._invalid(identity, "already attached to stream %s" % peer.stream.name.decode())
            return
        if message.version != p.VERSION:
            self._invalid(identity, "protocol version %d not supported (this broker speaks 1)" % message.version)
            return
        name = message.stream
        if len(name) > self.max_stream_name:
            self._invalid(identity, "stream name over %d bytes" % self.max_stream_name)
            return
        if name.startswith(b"$"):
            self._invalid(identity, "stream names starting with $ are reserved")
            return
        if len(self._peers) >= self.max_peers:
            self._invalid(identity, "broker full: %d peerings" % self.max_peers)
            return
        key = None
        if self.permissions is not None:
            key = self._keys.pop(identity, None)
            if not self.permissions.may_attach(key, name):
                self._refuse(identity, "refused by the broker's permissions: this key may not use stream %s"
                             % name.decode(), "refused_attach")
                return
        stream = self._streams.get(name)
        if stream is None and message.existing and name not in self._closed_streams:  # ATTACH-EXISTING
            self.stats["no_stream"] += 1    # a reader asked: not an invalid command
            self._send(identity, p.invalid("NO-STREAM: stream %s does not exist" % name.decode()))
            return
        if stream is None:
            stream = self._open(identity, name, key)
            if stream is None:
                return
        stream.idle_since = None
        peer = self._peers[identity] = stream.peers[identity] = _Peer(identity, stream, key)
        old = self._gone.pop(identity, None)
        if old is not None:  # the same connection, attached again: what is still on its way to it stays counted
            peer.honoured, peer.acked, peer.probes = old.honoured, old.acked, old.probes
        self._alive.touch(identity)
        if self._alive_timer is None:
            self._arm_liveness()
        self.stats["attached"] += 1
        self._send(identity, p.ATTACH_OK_FRAME)

    def _existing(self):
        """Names of the streams whose journals are in ``journal_dir`` already."""
        names = []
        for entry in sorted(os.listdir(self.journal_dir)):
            name = stream_name(entry)
            if name is not None and os.path.isdir(os.path.join(self.journal_dir, entry)):
                names.append(name)
        return names

    def _open(self, identity, name, key=None):
        """Open (or create) stream ``name``; None, and INVALID to ``identity`` if any, when it cannot.

        ``identity`` (and its ``key``) is the peer that asks, None for the broker itself: a
        stream new on disk is then created only within its permission and budgets.
        """
        owner = None
        if identity is not None and name not in self._closed_streams:  # a new stream
            if self.permissions is not None and not self.permissions.allows(key, "create", name):
                self._refuse(identity, "refused by the broker's permissions: this key may not create stream %s"
                             % name.decode(), "refused_create")
                return None
            if len(self._streams) + len(self._closed_streams) >= self.max_streams:
                self._stream_refused(identity, "too many streams (%d)" % self.max_streams)
                return None
            owner = key or identity
            if self._creators.get(owner, 0) >= self.max_streams_per_peer:
                self._stream_refused(identity, "stream quota: this peer created %d streams (at most %d)"
                                     % (self._creators[owner], self.max_streams_per_peer))
                return None
        if len(self._streams) >= self._max_open and not self._close_idlest():
            if identity is not None:
                self._stream_refused(identity, "too many open streams (%d), none idle for %gs" % (
                    self._max_open, _MIN_IDLE))
            return None
        directory = os.path.join(self.journal_dir, stream_directory(name))
        try:
            journal = Journal(directory, **self.journal_options)
        except (JournalError, OSError) as exc:
            self.stats["journal_open_errors"] += 1
            log.error("%s: cannot open stream %s: %s", self.name, name.decode("ascii", "replace"), exc)
            if identity is not None:
                self._invalid(identity, "cannot open stream %s: %s" % (name.decode(), exc))
            return None
        policy = self.fsync if isinstance(self.fsync, str) else "interval"
        interval = self.fsync if policy == "interval" else 0.1
        stream = _Stream(name, journal, None)
        seen = list(journal.producers().items())[-self.max_producers:] if self.max_producers else []
        stream.producers.update((int.from_bytes(pid, "little"), last) for pid, last in seen)  # PUBLISH-ID, kept
        deliver = partial(self._written, stream)
        if self.ack == "synced":  # an fsync after every write round: group commit, off the hub
            stream.commit = GroupCommit(self, journal, fsync="batch", retry=0.1, on_synced=deliver,
                                        on_error=partial(self._write_failed, stream))
        else:
            stream.commit = GroupCommit(self, journal, fsync=policy, interval=interval, retry=0.1,
                                        on_written=deliver, on_error=partial(self._write_failed, stream))
        stream.commit.start()
        self._streams[name] = stream
        self._closed_streams.pop(name, None)
        if owner is not None:
            stream.creator = owner
            self._creators[owner] = self._creators.get(owner, 0) + 1
        stream.samples.append((_monotonic(), journal.last_seq))
        log.info("%s: stream %s open (sequences %d..%d)", self.name, name.decode(), journal.first_seq,
                 journal.last_seq)
        return stream

    def _stream_refused(self, identity, reason):
        self.stats["streams_refused"] += 1
        if self.stats["streams_refused"] % 1000 == 1:
            log.warning("%s: stream refused to %r: %s (%d so far)", self.name, identity, reason,
                        self.stats["streams_refused"])
        self._send(identity, p.invalid(reason))

    def _closable(self, stream, now, idle):
        """No peer for ``idle`` seconds, not declared, and nothing left for its journal to write or sync."""
        since = stream.idle_since
        journal = stream.journal
        return (since is not None and now - since >= idle and not stream.pinned and not stream.fresh
                and journal.written_seq == journal.last_seq
                and (self.fsync == "never" or journal.synced_seq == journal.written_seq))

    def _close_idle(self):
        now = _monotonic()
        for stream in [s for s in self._streams.values() if self._closable(s, now, self.stream_idle)]:
            self._close_stream(stream)

    def _close_idlest(self):
        """Close the stream idle longest (at least _MIN_IDLE) for a new one; False if there is none."""
        now = _monotonic()
        idle = [s for s in self._streams.values() if self._closable(s, now, _MIN_IDLE)]
        if not idle:
            return False
        self._close_stream(min(idle, key=lambda s: s.idle_since))
        return True

    def _close_stream(self, stream):
        """Close ``stream``'s journal (its descriptors); delete it if it never held a message."""
        name = stream.name
        del self._streams[name]
        stream.commit.stop()
        journal = stream.journal
        disk_bytes = journal.stats()["disk_bytes"]
        journal.close(sync=self.fsync != "never")
        self.stats["streams_closed"] += 1
        if journal.last_seq == 0 and not stream.pinned:
            shutil.rmtree(os.path.join(self.journal_dir, stream_directory(name)), ignore_errors=True)
            owner = stream.creator
            if owner is not None:
                left = self._creators.pop(owner) - 1
                if left:
                    self._creators[owner] = left
            log.debug("%s: empty stream %s deleted", self.name, name.decode("ascii", "replace"))
        else:
            last = journal.last_seq
            self._closed_streams[name] = {
                "first_seq": journal.first_seq, "last_seq": last, "written_seq": last, "synced_seq": last,
                "rate": 0.0, "bytes": disk_bytes, "peers": 0, "subscribers": [], "open": False}

    def _subscribe(self, identity, peer, message):
        if peer is None:
            self._unattached(identity, "SUBSCRIBE")
            return
        if not self._allowed(peer, "subscribe"):
            return
        first = peer.filter is None
        flt = peer.filter or Filter(peer)
        if len(flt) >= self.max_patterns and message.pattern not in flt.patterns:
            self._invalid(identity, "at most %d patterns per peering" % self.max_patterns)
            return
        if not first:
            live = peer.mode is _LIVE
            try:
                flt.add(message.pattern)
            except PatternError as exc:
                self._invalid(identity, str(exc))
                return
            if live:
                peer.stream.matcher.add(flt)
            self._send(identity, p.SUBSCRIBE_OK_FRAME)
            return
        try:
            flt.add(message.pattern)
        except PatternError as exc:
            self._invalid(identity, str(exc))
            return
        journal = peer.stream.journal
        if type(message) is p.Subscribe and message.latest != p.NEW and message.latest > journal.last_seq:
            self.stats["rollbacks"] += 1
            reason = ("ROLLBACK: stream %s ends at sequence %d, before the %d you resume after: the journal lost "
                      "messages and sequences from %d on are new ones; subscribe again from sequence %d or earlier"
                      % (peer.stream.name.decode(), journal.last_seq, message.latest, journal.last_seq + 1,
                         journal.last_seq + 1))
            log.warning("%s: %r: %s", self.name, identity, reason)
            self._send(identity, p.invalid(reason))
            return
        if type(message) is p.SubscribeSince:
            start = journal.seq_at_time(message.since / 1e6)
        elif message.latest == p.NEW:
            start = journal.last_seq + 1
        else:
            start = message.latest + 1
        peer.filter = flt
        peer.next = max(start, 1)
        self.stats["subscribed"] += 1
        self._send(identity, p.SUBSCRIBE_OK_FRAME)
        if peer.next > peer.stream.delivered_seq:
            self._go_live(peer)
        else:
            peer.mode = _REPLAY
            if peer.credit:
                self._replaying[identity] = peer
                self._pump()

    def _ping(self, identity, peer):
        if peer is None:  # no peering here (the broker restarted?): tell it to attach again
            self._send(identity, p.DETACH_FRAME)
            return
        stream = peer.stream

        def written(_):
            self._send(identity, p.PING_OK_FRAME)

        def failed(exc):
            # No PING-OK: what it published is not written.  The reason starts with "PING:" so that a
            # client waiting for the PING-OK knows this INVALID is the answer (the write is retried).
            self._invalid(identity, "PING: stream %s cannot write its journal: %s" % (stream.name.decode(), exc))

        if self.ack == "written":
            stream.commit.when_written(written, peer.published, failed)
            return
        token = self._ping_tokens = self._ping_tokens + 1
        stream.pings[token] = identity

        def synced(_):
            if stream.pings.pop(token, None) is not None:  # else answered already by _write_failed
                self._send(identity, p.PING_OK_FRAME)

        stream.commit.when_synced(synced, peer.published)

    def _allowed(self, peer, action):
        if self.permissions is None:
            if action == "publish":
                peer.may_publish = True
            return True
        allowed = self.permissions.allows(peer.key, action, peer.stream.name)
        if action == "publish":
            peer.may_publish = allowed
        if not allowed:
            self._refuse(peer.identity, "refused by the broker's permissions: this key is not allowed to %s on"
                         " stream %s" % (action, peer.stream.name.decode()), "refused_" + action)
        return allowed

    def _refuse(self, identity, reason, counter):
        """INVALID for what the permissions refuse: counted (``refused`` and ``counter``), logged once a period."""
        stats = self.stats
        stats["refused"] += 1
        stats[counter] += 1
        now = _monotonic()
        if now >= self._refuse_logged + _REFUSE_LOG_PERIOD:  # 10,000 forged messages are not 10,000 lines
            self._refuse_logged = now
            log.warning("%s: refused %r: %s (%d refused so far; logged at most every %gs)", self.name, identity,
                        reason, stats["refused"], _REFUSE_LOG_PERIOD)
        self._send(identity, p.invalid(reason))

    # -- peers ----------------------------------------------------------------------
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
        if peer.filter is not None:
            peer.stream.matcher.remove(peer.filter)
        self._replaying.pop(identity, None)
        self._alive.forget(identity)
        self._release(peer, self.router.drop(identity))

    def _on_unroutable(self, identity, frames):
        peer = self._peers.get(identity)
        if peer is not None:
            self.stats["peers_lost"] += 1
            self._drop(peer)
        elif identity not in self._gone and frames[0] != p.DETACH_OK_FRAME:
            # (the answer to a DETACH, or a PING to a peer that left, finds its connection closed: a clean end)
            self.stats["unroutable"] += 1
        if identity in self._gone and identity not in self._peers:  # its connection is gone: so are its bytes
            del self._gone[identity]
            self._served(self._windows.forget(identity))

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
                log.info("%s: peer %r silent for %gs; dropped", self.name, identity, self.expiry)
                self._send(identity, p.DETACH_FRAME)
                self._drop(peer)
        self._arm_liveness()

    def _multicast_heads(self):
        for stream in self._streams.values():
            if stream.delivered_seq:
                self._multicast.head(stream.name, stream.delivered_seq)

    # -- introspection --------------------------------------------------------------
    def _sample(self):
        now = _monotonic()
        for stream in self._streams.values():
            samples = stream.samples
            samples.append((now, stream.journal.last_seq))
            if len(samples) > 11:
                del samples[0]

    @command
    def retain(self) -> None:
        """Apply the retention limits now (they are also applied every 10 s and as segments roll)."""
        self._retain()

    @command(reply=True)
    def info(self) -> dict[str, Any]:
        """Streams, subscribers and counters (see the module docstring)."""
        return self._info(None)

    def _info(self, may_see):
        """:meth:`info`; ``may_see(stream name)`` (None: all) filters the streams, and hides the journal path."""
        streams = {}
        for stream in self._streams.values():
            if may_see is not None and not may_see(stream.name):
                continue
            journal = stream.journal
            (t0, s0), (t1, s1) = stream.samples[0], (_monotonic(), journal.last_seq)
            stats = journal.stats()
            subscribers = []
            for peer in stream.peers.values():
                if peer.filter is None:
                    continue
                lag = journal.last_seq - (peer.next - 1) if peer.mode is _REPLAY else \
                    self.router.backlog_of(peer.identity)
                patterns = [x.decode("utf-8", "replace") for x in peer.filter.patterns]
                subscribers.append({"peer": peer.identity.hex(), "patterns": patterns, "mode": peer.mode,
                                    "lag": lag, "credit": peer.credit, "delivered": peer.delivered})
            streams[stream.name.decode()] = {
                "first_seq": journal.first_seq, "last_seq": journal.last_seq,
                "written_seq": journal.written_seq, "synced_seq": journal.synced_seq,
                "rate": round((s1 - s0) / (t1 - t0), 1) if t1 > t0 else 0.0,
                "bytes": stats["disk_bytes"],
                "peers": len(stream.peers), "subscribers": subscribers, "producers": len(stream.producers),
                "open": True,
            }
        for name, summary in self._closed_streams.items():  # closed while idle: as they were then
            if may_see is None or may_see(name):
                streams[name.decode()] = summary
        windows = self._windows
        info = {"endpoint": self.endpoint, "ack": self.ack, "streams": streams, "peers": len(self._peers),
                "counters": dict(self.stats),
                "delivered": self._delivered_gone + sum(peer.delivered for peer in self._peers.values()),
                "stream_budget": {"open": len(self._streams), "closed": len(self._closed_streams),
                                  "max_open": self._max_open, "max_streams": self.max_streams},
                "credit": {"held": windows.used, "budget": windows.total, "per_subscriber": windows.per_holder,
                           "waiting": windows.waiting, "gone_holding": len(self._gone)}}
        if may_see is None:
            info["journal"] = self.journal_dir
        if self._multicast is not None:
            info["multicast"] = dict(self._multicast.stats, group="%s:%d" % self._multicast.address)
        return info
