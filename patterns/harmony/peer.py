"""One remote peer of a Harmony node: its DEALER and sequence numbers.

A :class:`Peer` belongs to one node actor and is used only from its greenlet.
Messages go out on a DEALER (identity 0x01 + our UUID) connected to the
peer's ROUTER, through the node's outbox (which queues them in order while
the DEALER is at its high-water mark); ZRE sequence numbers count from 1
(HELLO) and wrap at 65536.
"""
import zmq

from zactors.actors.sockets import limit_size

from .protocol import identity_of

__all__ = ["Peer", "next_sequence"]

def next_sequence(sequence):
    """The sequence number after ``sequence`` (wraps 65535 -> 0, as Zyre)."""
    return (sequence + 1) & 0xFFFF


class Peer:
    """State of one peer; ``uuid`` is None while only its endpoint is known."""

    __slots__ = ("uuid", "id", "identity", "endpoint", "dealer", "name", "headers", "groups", "status",
                 "ready", "sent_sequence", "want_sequence", "evasive", "gossip", "probe")

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

    def set_uuid(self, uuid):
        self.uuid = uuid
        self.id = uuid.hex().upper()
        self.identity = identity_of(uuid)

    def connect(self, actor, own_uuid, hwm):
        """Open the DEALER to ``endpoint`` (an actor-owned socket)."""
        self.dealer = actor.socket(zmq.DEALER, identity=identity_of(own_uuid), sndhwm=hwm, linger=0)
        limit_size(self.dealer, 1024)  # it only sends: the peer answers on our inbox
        self.dealer.connect(self.endpoint)

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
