"""Native libzmq SCATTER/GATHER or the emulation over PUSH/PULL: which socket types.

libzmq's SCATTER and GATHER are draft socket types.  The standard pyzmq wheel
has no draft support, yet it still *creates* such sockets; using them over
tcp then aborts the whole process.  So native sockets are used only when
``zmq.has("draft")`` is true, and asking for them otherwise is an error.

The emulation speaks PUSH/PULL on the wire: PUSH keeps one queue per peer
(``SNDHWM``), round-robins over peers whose queue is not full and refuses a
message when none is; PULL fair-queues (``RCVHWM`` per peer).  Scatter and
Gather add the single-part rule and thread safety on top.  An emulated
Scatter talks to emulated Gathers and to PULL sockets; a native one only to
native GATHER sockets: both ends of a link must make the same choice.
"""
import zmq

__all__ = ["available", "socket_types"]


def available():
    """True when this libzmq has the draft API, and so real SCATTER/GATHER."""
    return bool(zmq.has("draft")) and hasattr(zmq, "SCATTER") and hasattr(zmq, "GATHER")


def socket_types(native=None):
    """``(scatter_type, gather_type, native)`` for ``native`` True, False or None (auto)."""
    if native is None:
        native = available()
    if not native:
        return zmq.PUSH, zmq.PULL, False
    if not available():
        raise RuntimeError("native SCATTER/GATHER needs libzmq built with the draft API "
                           "(zmq.has('draft') is False here); use native=False or leave it to auto")
    return zmq.SCATTER, zmq.GATHER, True
