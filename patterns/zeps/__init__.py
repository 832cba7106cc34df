"""ZEPS: journaled publish-subscribe with replay and credit flow control.

``Broker`` (also ``ZepsBroker``, beside Majordomo's ``MajordomoBroker``) journals every message of a stream and delivers it to each
subscriber as its credit allows, live or replayed from the journal;
``Publisher`` and ``Subscriber`` are the clients.  The wire format lives in
:mod:`.protocol`, subscription matching in :mod:`.matcher`.  The re-exports
are lazy (PEP 562): ``from zactors.patterns.zeps import Publisher`` works,
and a submodule that needs no gevent (the Spark reader in Spark's worker
processes) does not import the clients, gevent or zmq.
"""
import importlib

_EXPORTS = {
    "Broker": ".broker", "ZepsBroker": ".broker",
    "Message": ".client", "Publisher": ".client", "Subscriber": ".client", "ZepsError": ".client",
    "MessagesLost": ".client", "ReplayError": ".client", "StreamRolledBack": ".client", "query": ".client",
    "HandshakeFailed": ".client", "NoSuchStream": ".client",
    "Filter": ".matcher", "Matcher": ".matcher", "PatternError": ".matcher",
    "NEW": ".protocol", "ProtocolError": ".protocol",
}

__all__ = ["Broker", "ZepsBroker", "Publisher", "Subscriber", "Message", "ZepsError", "MessagesLost", "ReplayError",
           "StreamRolledBack", "NoSuchStream", "HandshakeFailed", "query", "Filter", "Matcher",
           "PatternError", "ProtocolError", "NEW"]


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value         # resolve once; later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
