"""Native libzmq SCATTER/GATHER or the emulation over PUSH/PULL: which wire.

Which wire a Scatter or Gather speaks is the user's choice, never an accident
of the pyzmq build, so that two processes running zactors can always talk:

* ``native=False`` (the default): the emulation, PUSH/PULL on the wire.  As
  fast as native, works with every pyzmq, and talks to any PUSH or PULL peer
  and to every other emulated Scatter or Gather.
* ``native=True``: libzmq's draft SCATTER/GATHER, for talking to other
  libzmq SCATTER/GATHER peers.  Needs pyzmq and libzmq built with the draft
  API (``zmq.has("draft")``; the standard wheel has none, yet still *creates*
  such sockets, and using them over tcp aborts the process): asking for it
  elsewhere raises at once.

The emulation speaks PUSH/PULL on the wire: PUSH keeps one queue per peer
(``SNDHWM``), round-robins over peers whose queue is not full and refuses a
message when none is; PULL fair-queues (``RCVHWM`` per peer).  Scatter and
Gather add the single-part rule and thread safety on top.  An emulated
Scatter talks to emulated Gathers and to PULL sockets; a native one only to
native GATHER sockets: both ends of a link must make the same choice.  ZMTP
checks the socket types at the handshake, so a mismatch is refused there:
Scatter and Gather report it (see :mod:`.handshakes`).
"""
import zmq

from . import nativepoll

__all__ = ["available", "socket_types"]


def available():
    """True when this libzmq has the draft API, and so real SCATTER/GATHER (and a
    ``zmq_poller_fd`` to wait on them with: libzmq 4.3.2+)."""
    return (bool(zmq.has("draft")) and hasattr(zmq, "SCATTER") and hasattr(zmq, "GATHER")
            and nativepoll.available())


def socket_types(native=False):
    """``(scatter_type, gather_type, native)``: the emulation's PUSH/PULL, or with
    ``native`` true libzmq's SCATTER/GATHER (RuntimeError without the draft API)."""
    if native not in (True, False):
        raise TypeError("native is True (libzmq's draft SCATTER/GATHER) or False (the PUSH/PULL "
                        "emulation, the default), not %r" % (native,))
    if not native:
        return zmq.PUSH, zmq.PULL, False
    if not available():
        if zmq.has("draft") and hasattr(zmq, "SCATTER"):
            raise RuntimeError("native SCATTER/GATHER needs zmq_poller_fd (libzmq 4.3.2+ with drafts, on "
                               "Linux) to wait on them, and this pyzmq's libzmq %s has none: use the "
                               "emulation (native=False, the default)" % zmq.zmq_version())
        raise RuntimeError("native SCATTER/GATHER needs libzmq built with the draft API "
                           "(zmq.has('draft') is False here): use the emulation (native=False, the default), "
                           "or a pyzmq built with ZMQ_DRAFT_API=1 (see .ci/draft)")
    return zmq.SCATTER, zmq.GATHER, True
