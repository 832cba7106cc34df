"""The ZEPS broker: journaled publish-subscribe with replay and credit flow control.

::

    broker = Broker("/var/lib/zeps", "tcp://127.0.0.1:*")   # returns once bound
    broker.endpoint                                          # the real endpoint
    broker.call("INFO")                                      # streams, subscribers, counters
    broker.destroy()

Behaviour (the ZEPS spec, and :mod:`.protocol` for what it leaves open):

- Streams whose journals are in ``journal_dir`` are served from start (opened
  up to the open budget, the rest listed from their files and opened on
  their first ATTACH; one whose journal cannot be opened is logged, counted
  in ``journal_open_errors`` and its ATTACHes refused with the reason), and
  ``streams=`` pre-declares more (these must open, or the broker does not
  start); ``journal_dir`` is locked: one broker at a time.  Others are created on their first ATTACH,
  within budgets (each refusal is an INVALID with the reason, counted in
  ``streams_refused``): with ``permissions`` only by a key granted
  ``create`` on the name; without (no CURVE: a local, unauthenticated
  setup, as before) by anyone; at most ``max_streams_per_peer`` existing
  streams created by one peer (its key, else its connection); at most
  ``max_streams`` in all.  A stream without peers for ``stream_idle``
  seconds is closed, its descriptors released (reopened by the next
  ATTACH; INFO shows it as it was, ``"open": false``), and at most
  ``max_open_streams`` are open at once (never more than a quarter of half
  the open-file limit, ~4 descriptors a stream, which is also the default; the idlest
  is closed first for a new one).  A stream that never held a message is
  closed a second after its last peer left, and deleted then (and at start):
  junk names do not outlive their peers, nor a restart, nor hold the
  ``max_streams`` budget.  Without CURVE the quota is per connection (its
  routing id): a client that reconnects again and again can still fill
  ``max_streams`` with streams holding a message; give such a node CURVE and
  the ``create`` permission.  Journals open and close on the threadpool, never
  in the loop (a few fsyncs each), a few at once and at most 64 pending (an
  ATTACH past that is refused: busy); a peer's commands sent before its
  ATTACH-OK wait for the journal and are served in order.
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
- A pair (``role="primary"|"backup"``, ``peer``, ``pair_endpoint``: :mod:`.pair`): Binary Star
  failover, the active replicates every record to the passive (:mod:`.replication`), which refuses
  clients with INVALID "PASSIVE: ...".  ``ack="replicated"``: PING-OK and delivery once the passive
  has the record at ``replica_ack`` (``"written"`` or ``"synced"``, also our own level); a passive
  lost or lagging ``passive_timeout`` s: ``on_passive_lost="wait"`` (PING answered INVALID
  "PING: replication: ...") or ``"degrade"`` (to ``replica_ack``, logged, INFO ``pair.degraded``).
  With ``curve``, the pair link is CURVE too and accepts only ``peer_key`` (the other broker's public key).
- Credit flow, as the spec says: a subscriber whose credit covers a message
  (its DELIVER frame size) gets it straight from the publish path, with no
  disk read.  One whose credit does not is switched to replay at that
  sequence; once credit comes back it is replayed from the journal (the
  journal's tail cache in the loop; the disk on the hub's threadpool, never
  on the loop, at most ``replay_reads`` reads at once) by one cooperative
  task for all replaying subscribers (``tail_cache``: bytes of recent
  messages each open stream keeps in memory, default 32 MiB), filtered by its patterns, and switched back to live
  when it has caught up.  Every subscriber gets each matching message once,
  in sequence order, with no gap, whatever its speed.
- Resuming: a SUBSCRIBE after sequence N that the journal lost (N past the
  stream's end, or, told by the client's EPOCH, lost in an epoch since:
  ``Journal.check_resume``, whatever broker runs came between) is refused
  with INVALID "ROLLBACK: ..." (counted ``rollbacks``): those sequences are
  other messages now.  See :mod:`.protocol`.
- Credit budget: what the broker may have to hold for subscribers is the
  credit it honours, so credit is honoured from one budget of
  ``max_credit_total`` bytes (default 64 MiB) for all subscribers, at most
  ``max_credit`` (default 32 MiB) each (the kernel's
  :class:`~zactors.actors.budget.Budget`).
  A subscriber holds what it was granted until it has drained it: the
  broker PINGs it after a CREDIT (a probe), and its PING-OK says that
  everything sent before the PING left the broker.  Credit beyond the
  budget waits for others to drain: counted in ``credit_deferred``, and
  told once (INVALID "credit budget: ...") until it is granted; what
  comes back goes to each waiter up to its fair share (the budget split
  evenly among the subscribers holding or waiting), then first come first
  served; meanwhile credit others hold unspent beyond their fair share goes
  back in line (``credit_revoked``; granted again in turn), so peers
  sitting on credit cannot keep the others waiting, and a subscriber that
  reads keeps its share whatever the others ask.  A subscriber whose credit
  runs out while more waits (a stall) is PINGed at once, so what it read
  comes back within a round trip: INFO ``credit.stalls`` counts the stalls
  and how long they were (``credit_stalls``, ``credit_stalls_over_100ms``, ...).
  A subscriber that leaves with bytes still on their way
  (a peer that stopped reading) keeps them in the budget under its
  identity until it answers a PING or its connection is gone, for
  ``expiry`` at most: then (or at once, if it was dropped as silent, or
  as holding credit with no PING answered for ``expiry``:
  ``peers_stalled``) they are set apart (``credit_abandoned``) in a ledger of ``max_credit_total``
  bytes (past it they stay in the budget, ``credit_stale_full``), so the
  broker holds at most twice ``max_credit_total`` for subscribers.
  Drained is known from PING-OKs: a peering that asked for them (FEATURES
  ``tokens``, as our Subscriber and Consumer do) gets PROBEs carrying a random
  token it must echo, which it sees only by reading all that was sent before
  (:mod:`.protocol`): a peer that does not read cannot say it did.  A
  spec-only subscriber's bare PING-OK is trusted, as the spec has it: one
  that sends PING-OKs without reading is bounded only by libzmq's send queue
  to it (``sndhwm`` messages); ``require_tokens=True`` refuses the CREDIT of
  a peering that did not ask for tokens (INVALID, ``refused_spec_only``),
  for nodes that expect hostile peers.
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
  duplicate, by (producer id, producer sequence), as the stream's journal
  remembers them (its one producer table, :meth:`Journal.producer`): at most
  ``max_producers`` producers per stream (the least recently appended
  evicted first, counted ``producers_evicted``), kept in the journal, so a
  stream reopened after a restart or a crash decides as before it.
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

Where each part lives (the :class:`Broker` is assembled from one mixin per
concept; all its state is the broker's, each mixin's docstring names what it
uses):

- :mod:`.broker_hot_path`: PUBLISH in, the journal append, live delivery;
- :mod:`.broker_replay`: the replay task and its reads off the hub;
- :mod:`.broker_commands`: ATTACH, SUBSCRIBE (and ROLLBACK), PING, FEATURES, EPOCH, QUERY, permissions;
- :mod:`.broker_peers`: peerings, transport events, liveness;
- :mod:`.broker_credit`: the credit budget;
- :mod:`.broker_streams`: streams opened, created and closed within their budgets;
- :mod:`.broker_introspection`: INFO and QUERY's report;
- :mod:`.broker_groups`: consumer groups (JOIN, ACK, NACK, CLAIM, redelivery, dead letters), with
  ``group_ack_wait``, ``group_max_deliver``, ``group_dlq`` and the budgets ``max_groups`` (per
  stream), ``max_groups_per_peer``, ``max_group_members``, ``max_group_pending``;
- here: the options, setup and teardown.
"""
from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from zactors.actors.actor import Actor, command
from zactors.actors.auth import Keypair, curve_server
from zactors.actors.budget import Budget
from zactors.actors.heartbeat import Liveness
from zactors.actors.router import Router, fd_budget

from . import protocol as p
from .broker_commands import _REFUSE_LOG_PERIOD, Commands
from .broker_credit import CreditBudget
from .broker_groups import Groups
from .broker_hot_path import HotPath
from .broker_introspection import Introspection
from .broker_peers import _Peer, Peers
from .broker_replay import Replay
from .broker_streams import Streams, _open_stream_budget, _Stream
from .pair import Pair, check_pair_options

if TYPE_CHECKING:
    from .permissions import Permissions

__all__ = ["Broker", "ZepsBroker", "ACK_LEVELS"]

#: what a PING-OK (and a delivery) waits for: the OS has the message, or an fsync covered it
ACK_LEVELS = ("written", "synced", "replicated")

log = logging.getLogger(__name__)  # the whole broker logs here: see each part

#: a PUBLISH frame beyond its key and body: signature, command, key length, body length
_PUBLISH_OVERHEAD = 8
#: room for every other command (strings of at most 255 bytes, numbers)
_MAX_COMMAND = 1024


class Broker(HotPath, Replay, Commands, CreditBudget, Peers, Streams, Introspection, Groups, Actor):
    """A ZEPS broker journaling under ``journal_dir``.  See the module docstring."""

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
                 segment_bytes: int = 64 << 20, tail_cache: int = 32 << 20, retain_bytes: int | None = None,
                 retain_seconds: float | None = None, curve: Keypair | bytes | str | None = None,
                 curve_domain: str | None = None, permissions: Permissions | None = None,
                 multicast: tuple[str, int] | None = None, multicast_interface: str | None = None,
                 multicast_ttl: int = 1, streams: Iterable[bytes | str] = (), group_ack_wait: float = 30.0,
                 group_max_deliver: int = 5, group_dlq: str = "{stream}.dlq.{group}", max_groups: int = 16384,
                 max_groups_per_peer: int = 1024, max_group_members: int = 4096, max_group_pending: int = 100000,
                 name: str | None = None, role: str | None = None, peer: str | None = None,
                 pair_endpoint: str = "tcp://127.0.0.1:*", replica_ack: str = "written",
                 on_passive_lost: str = "wait", passive_timeout: float = 5.0, replication_window: int = 16 << 20,
                 peer_key: bytes | str | None = None, require_tokens: bool = False) -> None:
        if fsync not in ("never", "batch") and not (isinstance(fsync, (int, float)) and fsync > 0):
            raise ValueError("fsync must be 'never', 'batch' or a period in seconds > 0, got %r" % (fsync,))
        if ack not in ACK_LEVELS:
            raise ValueError("ack must be one of %s, got %r" % (", ".join(ACK_LEVELS), ack))
        if (ack == "synced" or ack == "replicated" and replica_ack == "synced") and fsync == "never":
            raise ValueError("ack='synced' needs fsync: it cannot be 'never'")
        check_pair_options(role, ack, replica_ack, on_passive_lost, passive_timeout)
        if not 0 < heartbeat <= expiry:
            raise ValueError("need 0 < heartbeat <= expiry")
        if "://" in str(journal_dir):   # Broker(endpoint, dir), as the Majordomo broker is made: libzmq's EINVAL
            raise ValueError("Broker(journal_dir, endpoint): the journal directory comes first, not %r"
                             % (journal_dir,))
        self.journal_dir = os.path.abspath(journal_dir)
        self.endpoint = endpoint
        self.fsync = fsync
        self.ack = ack
        self.level = replica_ack if ack == "replicated" else ack  # this journal's own level (pair: both)
        self.role, self.peer_endpoint, self.pair_endpoint = role, peer, pair_endpoint
        self.on_passive_lost, self.passive_timeout = on_passive_lost, passive_timeout
        self.replication_window = replication_window
        self.peer_key = peer_key.encode() if isinstance(peer_key, str) else peer_key
        if role is not None and curve is not None and not peer_key:
            raise ValueError("a pair with CURVE needs peer_key: the other broker's public key")
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
        self.require_tokens = require_tokens
        self.max_streams_per_peer = max_streams_per_peer
        self.max_open_streams = max_open_streams
        self.stream_idle = stream_idle
        if max_streams_per_peer < 1 or (max_open_streams is not None and max_open_streams < 1) or stream_idle <= 0:
            raise ValueError("max_streams_per_peer and max_open_streams must be >= 1, stream_idle > 0")
        if min(max_credit, max_credit_total) < max_message + 64:
            raise ValueError("max_credit and max_credit_total must hold a message of max_message bytes")
        self.journal_options = dict(segment_bytes=segment_bytes, tail_cache_bytes=tail_cache,
                                    retain_bytes=retain_bytes, retain_seconds=retain_seconds,
                                    max_producers=max_producers)
        self.curve = curve
        self.curve_domain = curve_domain
        self.permissions = permissions
        self.multicast = multicast
        self.multicast_interface = multicast_interface
        self.multicast_ttl = multicast_ttl
        if group_ack_wait <= 0 or group_max_deliver < 1 or min(max_groups, max_groups_per_peer, max_group_members,
                                                               max_group_pending) < 1:
            raise ValueError("group_ack_wait must be > 0, group_max_deliver and the group budgets >= 1")
        self.group_ack_wait = group_ack_wait
        self.group_max_deliver = group_max_deliver
        try:
            group_dlq.format(stream="s", group="g")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError("group_dlq %r: a name with {stream} and {group} only (%s)" % (group_dlq, exc)) from None
        self.group_dlq = group_dlq
        self.max_groups = max_groups
        self.max_groups_per_peer = max_groups_per_peer
        self.max_group_members = max_group_members
        self.max_group_pending = max_group_pending
        self.declared = [x.encode() if isinstance(x, str) else bytes(x) for x in streams]
        if permissions is not None and curve is None:
            raise ValueError("permissions need CURVE: they are granted to client keys")
        if name:
            self.name = name

    # -- setup and teardown ---------------------------------------------------------
    def setup(self) -> None:
        os.makedirs(self.journal_dir, mode=0o700, exist_ok=True)
        self._streams: dict[bytes, _Stream] = {}
        self._setup_streams()
        self._peers: dict[bytes, _Peer] = {}
        self._delivered_gone = 0  # messages delivered to peers since dropped (INFO "delivered": all of them)
        self._replaying: dict[bytes, _Peer] = {}        # peers with credit waiting to be replayed (ordered set)
        self._pumping = False
        self._cold_reads = 0      # replay reads under way off the hub
        self._cold_waiting: OrderedDict[bytes, _Peer] = OrderedDict()  # peers waiting for one (ordered set)
        self._ping_tokens = 0     # ack="synced": numbers the PINGs waiting for an fsync
        self._alive: Liveness[bytes] = Liveness(self.heartbeat, self.expiry)
        self._alive_timer = None
        self._heard: set[bytes] = set()         # identities heard from since the last liveness sweep
        self._refuse_logged = -_REFUSE_LOG_PERIOD  # when a refusal was last logged
        self._windows = Budget(self.max_credit_total, self.max_credit)  # credit honoured, not yet drained
        self._gone: dict[bytes, _Peer] = {}     # left with bytes not known drained: held in the budget
        self._stale: dict[bytes, _Peer] = {}    # expired with bytes not known drained: held apart, bounded
        self._stale_bytes = 0                   # what they hold (at most max_credit_total)
        self._reclaimed = 0.0
        self._beats = 0
        self.router = Router(self, self._on_message, on_unroutable=self._on_unroutable,
                             on_overflow=self._on_overflow, on_held=self._on_held, on_drained=self._on_drained,
                             high=self.transport_high, backlog=self.transport_high * 2,
                             sndhwm=self.sndhwm,
                             router_handover=1,  # a routing id in use goes to the newest connection (below)
                             max_message=max(self.max_message + _PUBLISH_OVERHEAD, _MAX_COMMAND),
                             max_frames=8, max_bytes=max(self.max_message + _PUBLISH_OVERHEAD, _MAX_COMMAND) + 256,
                             max_connections=fd_budget())  # half the fds: the other half is the streams'
        # (every ZEPS message is one frame after the ROUTER's identity, of 255 bytes at most: a few frames
        # more get INVALID "one ZEPS command per message", a larger message is dropped unread and counted)
        # Handover: without it libzmq never reads a connection whose routing id is in use, yet buffers up
        # to RCVHWM frames of it (1,000 of max_message each): five such took the broker to 1.5 GiB.  Now
        # its messages are read (and refused, counted); the connection it replaced is left idle, counted
        # in the connection budget; with permissions a message of another key ends the peering it took.
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
        self._pair = None if self.role is None else Pair(self, self.role, self.peer_endpoint, self.pair_endpoint,
                                                         min(self.heartbeat, 0.25))
        if self._pair is not None:
            self.pair_endpoint = self._pair.endpoint
        self._multicast = None
        if self.multicast is not None:
            from .multicast import MulticastSender
            group, port = self.multicast
            self._multicast = MulticastSender(group, port, interface=self.multicast_interface, ttl=self.multicast_ttl)
            self.call_every(self.heartbeat, self._multicast_heads)
        self._max_open = _open_stream_budget(self.max_streams, self.max_open_streams)
        self._groups_setup()  # before the streams: their journals' first writes reach the groups
        self._start_streams()  # pre-declared streams, and journals already there
        self.call_every(max(0.5, min(self.stream_idle / 2, 1.0)), self._close_idle)  # (empty ones: after 1 s)
        self.call_every(1.0, self._sample)
        self.call_every(self.heartbeat, self._reclaim)
        self.call_every(10.0, self._retain)
        log.debug("%s: serving %s, journal %s", self.name, self.endpoint, self.journal_dir)

    def teardown(self) -> None:
        try:
            self._teardown()
        finally:
            if vars(self).get("_dir_lock") is not None:
                os.close(self._dir_lock)   # (last: no journal of ours is open now)
                self._dir_lock = None

    def _teardown(self):
        if "_multicast" not in vars(self): return  # noqa: E701 - setup failed before binding: nothing to close
        if self._multicast is not None:
            self._multicast.close()
        if self._pair is not None:
            self._pair.close()
        for identity in list(self._peers):
            self._send(identity, p.DETACH_FRAME)
        self._stop_journal_jobs()
        for stream in self._streams.values():
            stream.commit.stop()      # the last write (and fsync); logs what it could not write
            stream.journal.close(sync=self.fsync != "never")
        self._groups_teardown()

    # -- commands from the parent ---------------------------------------------------
    @command
    def retain(self) -> None:
        """Apply the retention limits now (they are also applied every 10 s and as segments roll)."""
        self._retain()

    @command(reply=True)
    def peer(self, endpoint: str) -> None:
        """Connect to the pair's peer (its ``pair_endpoint``), when it was not known at construction."""
        if self._pair is None:
            raise ValueError("not a broker of a pair: give role=")
        self._pair.connect(endpoint)

    @command(reply=True)
    def info(self) -> dict[str, Any]:
        """Streams, subscribers and counters (see the module docstring)."""
        return self._info(None)


#: the same class under a name that cannot be confused with Majordomo's ``Broker`` in one import
ZepsBroker = Broker
