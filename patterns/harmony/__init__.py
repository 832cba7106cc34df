"""Harmony: true peer networks that speak ZRE v2, as Zyre (C) and pyre (Python) do::

    from zactors.patterns.harmony import Node

    node = Node("alice", {"X-ROLE": "demo"}).start()   # UDP beacons on port 5670
    node.join("chat")
    node.shout("chat", b"hello")
    for event in node.events():                         # ENTER, JOIN, SHOUT, WHISPER, EXIT, ...
        print(event.type, event.name, event.frames)

Without broadcast (docker, cloud, VPN): ``Node("bob", beacon=False,
endpoints=["tcp://192.0.2.7:50123"])``; peers tell each other about peers.
"""
from .engine import NodeActor
from .events import NodeEvent
from .gossip import GOSSIP_HEADER
from .node import Node
from .protocol import ProtocolError

__all__ = ["Node", "NodeActor", "NodeEvent", "ProtocolError", "GOSSIP_HEADER"]
