"""The zactors actor kernel: greenlet actors that own ZeroMQ sockets.

The re-exports below are lazy (PEP 562): ``from zactors.actors import Actor``
works as before, but importing a submodule that needs no gevent (for example
``zactors.actors.journal``, which Spark workers read segments with) does not
import the actor machinery, gevent or zmq.
"""
from importlib import import_module as _import_module

_EXPORTS = {
    "Actor": ".actor", "Reply": ".actor", "command": ".actor",
    "Event": ".pipe",
    "Subscription": ".events",
    "Reactor": ".reactor",
    "Socket": ".sockets", "context": ".sockets",
    "ActorError": ".errors", "ActorDied": ".errors", "ActorExited": ".errors",
    "ActorTimeout": ".errors", "CommandError": ".errors", "PipeError": ".errors",
    "Supervisor": ".supervisor", "ChildSpec": ".supervisor", "RestartIntensityExceeded": ".supervisor",
    "Names": ".names", "Proxy": ".names", "NoSuchName": ".names",
    "WrongThread": ".errors",
}

__all__ = [
    "Actor", "Reply", "command", "Event", "Subscription", "Reactor", "Socket", "context",
    "ActorError", "ActorDied", "ActorExited", "ActorTimeout", "CommandError", "PipeError",
    "Supervisor", "ChildSpec", "RestartIntensityExceeded", "Names", "Proxy", "NoSuchName",
    "WrongThread",
]


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_import_module(module, __name__), name)
    globals()[name] = value         # resolve once; later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(__all__) | {n for n in globals() if not n.startswith("_")})
