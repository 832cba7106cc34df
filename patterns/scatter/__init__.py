"""49/SCATTERGATHER: thread-safe, single-part task distribution.

:class:`Scatter` round-robins messages to gather peers through one bounded
queue per peer; :class:`Gather` fair-queues from scatter peers.  Both are
safe to use at once from several OS threads and several greenlets (see
:mod:`.safesocket` for how), and carry single-part messages only.  The wire
is the caller's choice, never the build's: an emulation over PUSH/PULL by
default (any pyzmq; talks to PUSH/PULL peers), or libzmq's draft
SCATTER/GATHER with ``native=True`` (needs ``zmq.has("draft")``; talks to
native peers only).  Both ends of a link must choose alike; a peer refused at
the handshake for that reason is reported (see :mod:`.native`)::

    gather = Gather()
    endpoint = gather.bind("tcp://127.0.0.1:*")
    scatter = Scatter(queue_limit=1000)
    scatter.connect(endpoint)
    scatter.send(b"task")          # blocks while no peer can take it
    gather.recv(timeout=5)         # -> b"task"

What is safe, exactly:

* Every method of a Scatter or Gather (``send``, ``send_multipart``,
  ``recv``, ``bind``, ``connect``, ``unbind``, ``disconnect``,
  ``setsockopt``, ``close``) may be called at the same time from any number
  of OS threads and of greenlets in any of them.  Each accepted message is
  queued exactly once; each received message goes to exactly one caller.
* A blocking call parks only the calling greenlet (other greenlets of its
  thread run on); in a plain thread without a gevent hub it blocks that
  thread in ``poll``.  ``timeout`` (seconds) bounds it; ``block=False``
  never waits.  Calls are not fair: under contention any waiter may win.
* ``close`` from any thread wakes every blocked caller with :class:`Closed`.
  A Scatter flushes what it accepted for up to ``linger`` seconds; a
  Gather's undelivered messages are dropped with it.
* Not safe: using an object in a child after ``os.fork``; calling it from a
  signal handler.  The counters (``sent``, ``received``, ``discarded``,
  ``waited``) are statistics, exact only when no call is in progress.
* Losses: none while peers stay connected (a full queue means waiting, not
  dropping).  As the spec says, what is queued for a peer that disconnects
  from a bound Scatter is discarded with its queue; a Scatter that connected
  keeps the queue and delivers when the peer comes back.
"""
from .errors import Closed, MultipartError, NoMessage, NoPeerAvailable
from .gather import Gather
from .native import available as native_available
from .scatter import Scatter

__all__ = ["Scatter", "Gather", "MultipartError", "NoPeerAvailable", "NoMessage", "Closed",
           "native_available"]
