"""The command verbs between a Harmony node's handle and its engine, written once.

:class:`~.node.Node` sends these and :class:`~.engine.NodeActor` registers
its ``@command`` handlers under the same names, so neither side retypes the
other's strings.

===========  ==================  ======================================
verb         arguments           reply
===========  ==================  ======================================
JOIN         group               -
LEAVE        group               -
WHISPER      peer id, frames     -
SHOUT        group, frames       -
CONNECT      endpoint            -
PEERS        -                   peer ids (hex) that said HELLO
PEER         peer id             ``{id, name, headers, address, groups, backlog}`` or None
OWN_GROUPS   -                   our groups
PEER_GROUPS  -                   groups some peer is in
GROUP_PEERS  group               peer ids in it
INFO         -                   ``{uuid, name, endpoint, beacon}``
===========  ==================  ======================================
"""

__all__ = ["JOIN", "LEAVE", "WHISPER", "SHOUT", "CONNECT", "PEERS", "PEER", "OWN_GROUPS", "PEER_GROUPS",
           "GROUP_PEERS", "INFO"]

JOIN = "JOIN"
LEAVE = "LEAVE"
WHISPER = "WHISPER"
SHOUT = "SHOUT"
CONNECT = "CONNECT"
PEERS = "PEERS"
PEER = "PEER"
OWN_GROUPS = "OWN_GROUPS"
PEER_GROUPS = "PEER_GROUPS"
GROUP_PEERS = "GROUP_PEERS"
INFO = "INFO"
