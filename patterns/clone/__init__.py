"""Clone (12/CHP): a cluster-wide key-value map with snapshots, subtrees, ephemeral keys and
Binary Star failover.  See :mod:`.protocol`, :mod:`.bstar`, :mod:`.server`, :mod:`.client`."""
from .client import Clone
from .protocol import GUIDE, SPEC, ProtocolError
from .server import CloneServer, endpoints

__all__ = ["Clone", "CloneServer", "endpoints", "GUIDE", "SPEC", "ProtocolError"]
