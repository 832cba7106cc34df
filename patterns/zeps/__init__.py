"""ZEPS: journaled publish-subscribe with replay and credit flow control.

``Broker`` journals every message of a stream and delivers it to each
subscriber as its credit allows, live or replayed from the journal;
``Publisher`` and ``Subscriber`` are the clients.  The wire format lives in
:mod:`.protocol`, subscription matching in :mod:`.matcher`.  ``Broker`` (and
the journal under it) is imported on first use, so clients stay light.
"""
from .client import Message, Publisher, Subscriber, ZepsError, query
from .matcher import Filter, Matcher, PatternError
from .protocol import NEW, ProtocolError

__all__ = ["Broker", "Publisher", "Subscriber", "Message", "ZepsError", "query", "Filter", "Matcher",
           "PatternError", "ProtocolError", "NEW"]


def __getattr__(name):
    if name == "Broker":
        from .broker import Broker
        return Broker
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
