"""Exceptions raised by the actor kernel."""

__all__ = ["ActorError", "ActorExited", "ActorDied", "ActorTimeout", "CommandError", "PipeError",
           "WrongThread"]


class ActorError(Exception):
    """Base class for errors of the actor kernel."""


class ActorExited(ActorError):
    """The actor has stopped (``$TERM``, :meth:`Actor.stop` or destroy)."""


class ActorDied(ActorError):
    """The actor stopped because of an unexpected exception in a handler."""


class ActorTimeout(ActorError, TimeoutError):
    """No reply from the actor in time."""


class CommandError(ActorError):
    """The actor rejected a command or its handler raised.

    ``kind`` names the exception type raised inside the actor.
    """

    def __init__(self, kind: str = "Error", message: str = "") -> None:
        super().__init__("%s: %s" % (kind, message))
        self.kind = kind
        self.message = message


class PipeError(ActorError, ValueError):
    """A pipe message that does not follow the pipe codec."""


class WrongThread(ActorError, RuntimeError):
    """An actor's parent side was used from an OS thread other than the one that made it.

    An actor's pipe belongs to the gevent hub of the thread that created it.
    From another thread, :meth:`Actor.post` runs a function in the actor's loop.
    """
