"""A descriptor to wait on for a native (draft, thread-safe) socket: ``zmq_poller_fd``.

libzmq's thread-safe sockets (SCATTER, GATHER) have no ``ZMQ_FD``.  A draft
``zmq_poller`` holding one has a descriptor instead (``zmq_poller_fd``, libzmq
4.3.2+): an eventfd that libzmq's I/O threads signal on every state change of
the socket, so it can be watched by a gevent hub or ``poll`` like any other,
with no thread and no timer in between.  pyzmq does not wrap the poller, so
this calls it through ``ctypes`` in the very libzmq pyzmq has loaded (found in
``/proc/self/maps``: a second copy of libzmq would not know pyzmq's sockets).

:class:`WaitFd` is one waiter's registration: made after its caller found the
socket not ready, checked once more (:meth:`WaitFd.ready`, which also closes
the race with a change in between), watched, then closed.  Each holds one
eventfd until closed.
"""
import ctypes
import errno

import zmq

__all__ = ["available", "WaitFd"]

_lib = None


class _Event(ctypes.Structure):
    _fields_ = [("socket", ctypes.c_void_p), ("fd", ctypes.c_int), ("user_data", ctypes.c_void_p),
                ("events", ctypes.c_short)]


def _libzmq():
    """pyzmq's own libzmq, with the poller's functions typed; OSError/AttributeError if none."""
    global _lib
    if _lib is None:
        import zmq.backend.cython._zmq  # noqa: F401  (loads libzmq, if not yet)
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[-1].strip() for line in maps if "libzmq" in line and ".so" in line}
        paths = [path for path in paths if path.startswith("/")]
        if len(paths) != 1:
            raise OSError(errno.ENOENT, "cannot tell which libzmq pyzmq uses: %r" % (paths,))
        lib = ctypes.CDLL(paths[0], use_errno=True)
        lib.zmq_poller_new.restype = ctypes.c_void_p
        lib.zmq_poller_new.argtypes = []
        lib.zmq_poller_add.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_short]
        lib.zmq_poller_fd.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        lib.zmq_poller_wait.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Event), ctypes.c_long]
        lib.zmq_poller_destroy.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        _lib = lib
    return _lib


def available():
    """True when pyzmq's libzmq has ``zmq_poller_fd`` (draft API, libzmq 4.3.2+, Linux)."""
    try:
        _libzmq()
    except (OSError, AttributeError, ImportError):
        return False
    return True


def _raise():
    number = ctypes.get_errno()
    raise zmq.ZMQError(number)


class WaitFd:
    """A poller on one native socket for ``event`` (POLLIN/POLLOUT); ``fd`` turns readable on change.

    Not thread-safe: one waiter's own.  :meth:`close` it (frees the eventfd).
    """

    __slots__ = ("fd", "_poller", "_event")

    def __init__(self, handle, event):
        lib = _libzmq()
        poller = lib.zmq_poller_new()
        if not poller:
            _raise()
        self._poller = ctypes.c_void_p(poller)
        self._event = _Event()
        fd = ctypes.c_int()
        if lib.zmq_poller_add(poller, handle, None, event) or lib.zmq_poller_fd(poller, ctypes.byref(fd)):
            self.close()
            _raise()
        self.fd = fd.value

    def ready(self):
        """Is the event there now?  (Also takes the pending signal off ``fd``.)"""
        return _lib.zmq_poller_wait(self._poller, ctypes.byref(self._event), 0) == 0

    def close(self):
        if self._poller:
            _lib.zmq_poller_destroy(ctypes.byref(self._poller))  # sets it to NULL
