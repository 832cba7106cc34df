"""Clone (12/CHP): a cluster-wide key-value map with snapshots, subtrees, ephemeral keys and
Binary Star failover.  See :mod:`.protocol`, :mod:`.bstar`, :mod:`.server`, :mod:`.client`."""
from .client import Clone, UpdateRefused
from .protocol import GUIDE, SPEC, ProtocolError
from .server import CloneServer, endpoints

__all__ = ["Clone", "UpdateRefused", "CloneServer", "endpoints", "GUIDE", "SPEC", "ProtocolError"]
