"""Clone (12/CHP): a cluster-wide key-value map with snapshots, subtrees, ephemeral keys and
Binary Star failover.  See :mod:`.protocol`, :mod:`.bstar`, :mod:`.server`, :mod:`.client`."""
from .protocol import GUIDE, SPEC, ProtocolError

__all__ = ["GUIDE", "SPEC", "ProtocolError"]
