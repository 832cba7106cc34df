"""A group of peers, as a Harmony node sees it: who is in it."""

__all__ = ["Group"]


class Group:
    """The peers that joined group ``name``; owned by one node actor."""

    __slots__ = ("name", "peers", "field")

    def __init__(self, name, field):
        self.name = name
        self.peers = {}      # uuid -> Peer
        self.field = field   # the encoded group string of a SHOUT

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
