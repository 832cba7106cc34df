"""One remote peer of a Harmony node: its DEALER and sequence numbers.

A :class:`Peer` belongs to one node actor and is used only from its greenlet.
Messages go out on a DEALER (identity 0x01 + our UUID) connected to the
peer's ROUTER, through the node's outbox (which queues them in order while
the DEALER is at its high-water mark); ZRE sequence numbers count from 1
(HELLO) and wrap at 65536.

The DEALER of a peer reached through a configured endpoint (a probe) is
watched (:class:`~zactors.actors.monitor.Monitor`, disconnects only): libzmq
reconnects a DEALER silently, but what it had sent on the lost connection
(a HELLO taken by a node that was dying) is gone, so the node must know.
"""
import zmq

from zactors.actors.monitor import Monitor
from zactors.actors.sockets import limit_size

from .protocol import identity_of

__all__ = ["Peer", "next_sequence"]

def next_sequence(sequence):
    """The sequence number after ``sequence`` (wraps 65535 -> 0, as Zyre)."""
    return (sequence + 1) & 0xFFFF


class Peer:
    """State of one peer; ``uuid`` is None while only its endpoint is known."""

    __slots__ = ("uuid", "id", "identity", "endpoint", "dealer", "name", "headers", "groups", "status",
                 "ready", "sent_sequence", "want_sequence", "evasive", "gossip", "probe", "watch", "redials")

    def __init__(self, uuid, endpoint):
        self.uuid = None
        self.id = None
        self.identity = None
        if uuid is not None:
            self.set_uuid(uuid)
        self.endpoint = endpoint
        self.dealer = None
        self.name = ""
        self.headers = {}
        self.groups = set()
        self.status = 0
        self.ready = False         # said HELLO
        self.sent_sequence = 0
        self.want_sequence = 0
        self.evasive = False       # reported EVASIVE, no word since
        self.gossip = False        # speaks the zactors gossip extension
        self.probe = False         # created for a configured endpoint
        self.watch = None          # the Monitor of a probe's DEALER (its disconnects)
        self.redials = 0           # probes of this endpoint since its node last said HELLO

    def set_uuid(self, uuid):
        self.uuid = uuid
        self.id = uuid.hex().upper()
        self.identity = identity_of(uuid)

    def connect(self, actor, own_uuid, hwm, on_disconnect=None):
        """Open the DEALER to ``endpoint`` (an actor-owned socket).

        With ``on_disconnect``, the DEALER is watched: ``on_disconnect(self)``
        runs in ``actor``'s loop each time one of its connections drops.
        """
        self.dealer = actor.socket(zmq.DEALER, identity=identity_of(own_uuid), sndhwm=hwm, linger=0)
        limit_size(self.dealer, 1024)  # it only sends: the peer answers on our inbox
        if on_disconnect is not None:  # before connecting: no event missed
            self.watch = Monitor(self.dealer, zmq.EVENT_DISCONNECTED)
            actor.add_reader(self.watch.pair, lambda frames: on_disconnect(self))
        self.dealer.connect(self.endpoint)

    def close(self, actor, linger=0):
        """Close the DEALER (after ``linger`` s for what is queued) and its watch; never raises."""
        if self.watch is not None:
            actor.remove_reader(self.watch.pair)
            self.watch.close()  # stops the monitor before the DEALER goes
            self.watch = None
        if self.dealer is not None:
            actor.close_socket(self.dealer, linger)
            self.dealer = None

    def sequence(self):
        """The sequence number for the next message sent to this peer."""
        self.sent_sequence = seq = (self.sent_sequence + 1) & 0xFFFF
        return seq

    def check_sequence(self, sequence, is_hello):
        """True if ``sequence`` is the one expected next (HELLO must be 1)."""
        want = 1 if is_hello else (self.want_sequence + 1) & 0xFFFF
        self.want_sequence = want
        return sequence == want

    def __repr__(self):
        return "<Peer %s %r %s>" % (self.id and self.id[:8], self.name, self.endpoint)
