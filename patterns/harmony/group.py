"""A group of peers, as a Harmony node sees it: who is in it."""

from .protocol import shout_head

__all__ = ["Group"]


class Group:
    """The peers that joined group ``name``; owned by one node actor."""

    __slots__ = ("name", "peers", "field")

    def __init__(self, name):
        self.name = name
        self.peers = {}      # uuid -> Peer
        try:                 # the encoded group string of a SHOUT
            self.field = shout_head(name)
        except ValueError:   # longer than a ZRE string (legal in a HELLO): no SHOUT can name it
            self.field = None

    def join(self, peer):
        self.peers[peer.uuid] = peer

    def leave(self, peer):
        return self.peers.pop(peer.uuid, None) is not None

    def __len__(self):
        return len(self.peers)

    def __contains__(self, peer):
        return peer.uuid in self.peers

    def __repr__(self):
        return "<Group %s (%d peers)>" % (self.name, len(self.peers))
