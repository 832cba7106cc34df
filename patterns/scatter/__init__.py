"""49/SCATTERGATHER: thread-safe, single-part task distribution.

:class:`Scatter` round-robins messages to gather peers through one bounded
queue per peer; :class:`Gather` fair-queues from scatter peers.  Both are
safe to use at once from several OS threads and several greenlets (see
:mod:`.safesocket` for how), carry single-part messages only, and use
libzmq's draft SCATTER/GATHER when ``zmq.has("draft")`` (else an emulation
over PUSH/PULL with the same semantics; see :mod:`.native`)::

    gather = Gather()
    endpoint = gather.bind("tcp://127.0.0.1:*")
    scatter = Scatter(queue_limit=1000)
    scatter.connect(endpoint)
    scatter.send(b"task")          # blocks while no peer can take it
    gather.recv(timeout=5)         # -> b"task"
"""
from .errors import Closed, MultipartError, NoMessage, NoPeerAvailable
from .gather import Gather
from .native import available as native_available
from .scatter import Scatter

__all__ = ["Scatter", "Gather", "MultipartError", "NoPeerAvailable", "NoMessage", "Closed",
           "native_available"]
