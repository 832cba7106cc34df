"""A Harmony node's events: their names, and the conversion from actor events to :class:`NodeEvent`.

The engine emits each event with positional arguments (see
:class:`~.engine.NodeActor`); :func:`convert` turns one into a
:class:`NodeEvent` for the application.  Both sides use the names below.
"""
from collections import namedtuple

__all__ = ["NodeEvent", "convert", "ENTER", "EXIT", "JOIN", "LEAVE", "WHISPER", "SHOUT", "EVASIVE", "SILENT",
           "STOP"]

ENTER = "ENTER"        # id, name, headers, endpoint
EXIT = "EXIT"          # id, name
JOIN = "JOIN"          # id, name, group
LEAVE = "LEAVE"        # id, name, group
WHISPER = "WHISPER"    # id, name, frames
SHOUT = "SHOUT"        # id, name, group, frames
EVASIVE = "EVASIVE"    # id, name
SILENT = "SILENT"      # id, name
STOP = "STOP"          # id, name: the node's own last event, from its handle

NodeEvent = namedtuple("NodeEvent", "type peer name group headers address frames")
NodeEvent.__doc__ = """One event of a node.

``type`` is ENTER, EXIT, JOIN, LEAVE, WHISPER, SHOUT, EVASIVE, SILENT or STOP;
``peer`` the peer's UUID as 32 upper-case hex digits; ``name`` its name;
``group`` for JOIN/LEAVE/SHOUT; ``headers`` and ``address`` (its endpoint)
for ENTER; ``frames`` (list of bytes) for WHISPER/SHOUT.  Unused fields are None.
"""


def convert(event):
    """The :class:`NodeEvent` for an actor event, or None for the actor's own ($EXIT, $DIED)."""
    name, args = event.name, event.args
    if name == WHISPER:
        return NodeEvent(name, args[0], args[1], None, None, None, args[2])
    if name == SHOUT:
        return NodeEvent(name, args[0], args[1], args[2], None, None, args[3])
    if name == ENTER:
        return NodeEvent(name, args[0], args[1], None, args[2], args[3], None)
    if name == JOIN or name == LEAVE:
        return NodeEvent(name, args[0], args[1], args[2], None, None, None)
    if name in (EXIT, EVASIVE, SILENT, STOP):
        return NodeEvent(name, args[0], args[1], None, None, None, None)
    return None


def stop_event(node_id, name):
    """The STOP event a handle gives once its node has stopped."""
    return NodeEvent(STOP, node_id, name, None, None, None, None)
