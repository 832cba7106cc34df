"""One remote peer of a Harmony node: its DEALER, sequence numbers and backlog.

A :class:`Peer` belongs to one node actor and is used only from its greenlet.
Messages go out on a DEALER (identity 0x01 + our UUID) connected to the
peer's ROUTER; ZRE sequence numbers count from 1 (HELLO) and wrap at 65536.
When the DEALER is at its high-water mark, messages wait in order in the
peer's backlog; the node decides what happens when that fills up.
"""
from collections import deque

import zmq

from .protocol import identity_of

__all__ = ["Peer", "next_sequence"]

NOBLOCK = 1
SNDMORE = 2


def next_sequence(sequence):
    """The sequence number after ``sequence`` (wraps 65535 -> 0, as Zyre)."""
    return (sequence + 1) & 0xFFFF


class Peer:
    """State of one peer; ``uuid`` is None while only its endpoint is known."""

    __slots__ = ("uuid", "id", "identity", "endpoint", "dealer", "name", "headers", "groups", "status",
                 "ready", "sent_sequence", "want_sequence", "backlog", "evasive", "gossip", "probe")

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
        self.backlog = deque()
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

    def send(self, frames):
        """Send now, or queue behind the backlog; True if it had to queue."""
        backlog = self.backlog
        if backlog:
            backlog.append(frames)
            return True
        try:
            self._send(frames)
        except zmq.Again:
            backlog.append(frames)
            return True
        return False

    def _send(self, frames):
        send = self.dealer.send
        last = len(frames) - 1
        send(frames[0], NOBLOCK if last == 0 else NOBLOCK | SNDMORE)
        for i in range(1, last + 1):
            send(frames[i], NOBLOCK if i == last else NOBLOCK | SNDMORE)

    def flush(self):
        """Send what the backlog holds until the DEALER is full; messages sent."""
        backlog = self.backlog
        sent = 0
        while backlog:
            try:
                self._send(backlog[0])
            except zmq.Again:
                break
            backlog.popleft()
            sent += 1
        return sent

    def __repr__(self):
        return "<Peer %s %r %s>" % (self.id and self.id[:8], self.name, self.endpoint)
