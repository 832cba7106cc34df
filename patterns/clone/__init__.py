"""Clone (12/CHP): a cluster-wide key-value map with snapshots, subtrees, ephemeral keys and
Binary Star failover.  See :mod:`.protocol`, :mod:`.server` (with :mod:`.hashmap`, :mod:`.snapshots`,
:mod:`.resync`, :mod:`.persist`), :mod:`.client`, and :mod:`zactors.actors.bstar`."""
from .client import Clone, UpdateRefused
from .protocol import GUIDE, SPEC, ProtocolError
from .server import CloneServer, endpoints

__all__ = ["Clone", "UpdateRefused", "CloneServer", "endpoints", "GUIDE", "SPEC", "ProtocolError"]
