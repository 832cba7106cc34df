"""Majordomo (18/MDP v0.2): a broker, clients and workers on the zactors kernel.

``Broker`` routes requests by service name to workers; ``Worker`` is the base
class of a service; ``Client`` calls services from any greenlet.  The wire
format lives in :mod:`.protocol`, the broker's own services in :mod:`.mmi`.
"""
from .broker import Broker

#: the same class under a name that cannot be confused with ZEPS's ``Broker`` in one import
MajordomoBroker = Broker
from .client import Client, HandshakeFailed, RequestTimeout, ServiceError
from .protocol import MAJORTOMO, SPEC, ProtocolError
from .worker import Worker

__all__ = ["Broker", "MajordomoBroker", "Client", "RequestTimeout", "HandshakeFailed", "ServiceError", "Worker", "ProtocolError", "SPEC", "MAJORTOMO"]
