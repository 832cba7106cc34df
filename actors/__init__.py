"""The zactors actor kernel: greenlet actors that own ZeroMQ sockets."""
from .actor import Actor, Reply, command
from .errors import ActorDied, ActorError, ActorExited, ActorTimeout, CommandError, PipeError
from .reactor import Reactor
from .sockets import Socket, context
from .pipe import Event
from .events import Subscription

__all__ = [
    "Actor", "Reply", "command", "Event", "Subscription", "Reactor", "Socket", "context",
    "ActorError", "ActorDied", "ActorExited", "ActorTimeout", "CommandError", "PipeError",
]
