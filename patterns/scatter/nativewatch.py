"""Waiting on a native (draft, thread-safe) socket: one watching thread per socket.

libzmq's thread-safe sockets (SCATTER, GATHER) have no ``ZMQ_FD`` to hand to
an event loop.  What libzmq 4.3 does offer is ``zmq_poll`` on them: it
registers a signaler with the socket, which libzmq's I/O threads signal on
every state change, so the call blocks without polling and with the GIL
released.  So a native :class:`~.safesocket.SafeSocket` has a
:class:`NativeWatch`: a plain OS thread (no gevent hub in it) that, while
some caller of the socket waits, blocks in ``zmq_poll`` on the socket and an
``eventfd``, and when the socket is ready wakes every waiter the way any
other caller would (``SafeSocket._wake_all``).  While nobody waits it blocks
on the eventfd alone: idle costs no CPU and one descriptor.

The thread starts with the first wait and ends when the socket is closed
(it is counted among the socket's parked users, so the last one out closes
the socket: never while the thread is inside ``zmq_poll`` on it).
"""
import logging
import os

import zmq
from gevent.monkey import get_original

__all__ = ["NativeWatch"]

log = logging.getLogger(__name__)

_start_new_thread = get_original("_thread", "start_new_thread")
_POLLIN = zmq.POLLIN


class NativeWatch:
    """The watching thread of one native SafeSocket (all methods: its lock held)."""

    __slots__ = ("watching", "_fd", "__weakref__")

    def __init__(self, owner):
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        #: the thread polls the socket (else only its eventfd): a waiter need not kick it
        self.watching = False
        owner._parked += 1  # the thread uses the socket: the last one out closes it
        _start_new_thread(self._run, (owner,))

    def kick(self):
        """Make the thread look again at the owner (new waiter, closing)."""
        os.eventfd_write(self._fd, 1)

    def _run(self, owner):
        fd = self._fd
        lock = owner._lock
        idle = [(fd, _POLLIN)]
        busy = [(fd, _POLLIN), (owner._sock, owner._wait_event)]
        try:
            while True:
                with lock:  # the plain lock: the thread never calls the socket but through poll
                    if owner._closing:
                        return
                    watching = self.watching = bool(owner._waiters)
                zmq.zmq_poll(busy if watching else idle, -1)
                try:
                    os.eventfd_read(fd)
                except BlockingIOError:
                    pass
                if watching:
                    with lock:
                        if owner._waiters and owner._ready():
                            owner._wake_all()
        except zmq.ZMQError as exc:  # ETERM: the context is going; its owner must close the socket
            log.debug("%r: native watch ends: %s", owner, exc)
        except Exception:  # a bug: say so, and let the waiters time out rather than hang unseen
            log.exception("%r: native watch failed", owner)
        finally:
            with lock:
                owner._watch = None
                os.close(fd)
                owner._parked -= 1
                if owner._closing and not owner._parked:
                    owner._sock.close()
