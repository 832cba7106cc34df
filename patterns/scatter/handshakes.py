"""Peers refused at the ZeroMQ handshake: reported, never silent.

ZMTP checks socket types at the handshake: an emulated Scatter (PUSH) and a
native GATHER, or a native SCATTER and an emulated Gather (PULL), refuse each
other.  libzmq 4.3 then just closes the connection (and retries, every
``reconnect_ivl``), saying so only on the socket's monitor: a connection that
ends before its handshake completes, with no handshake event at all.  Without
a look there, sends are accepted and receives time out, with no error.

So every Scatter and Gather is watched, from the first, for connections whose
handshake fails: closed before completing (``kind`` "wire": most likely the
other wire, or not a ZeroMQ peer), a protocol error ("protocol": another
security mechanism, bad keys) or a refused key ("auth").  These are
per-connection events, never the hot path.  One thread per process reads all
the monitors (libzmq's I/O thread blocks on a monitor nobody reads, so somebody
always must) and, for each refusal, appends a :class:`Refusal` to the socket's
``refused`` list (once per endpoint and reason) and logs it (a WARNING the
first time, with the fix).  A blocking call that times out says why in its
error when its socket has refusals.

The thread blocks in ``zmq_poll`` on the monitors and an ``eventfd``: idle, it
costs nothing.  It ends when the context is terminated.
"""
import logging
import os
import uuid
from collections import namedtuple

import zmq
from gevent.monkey import get_original

from zactors.actors.monitor import Monitor, describe, describe_accepted
from zactors.actors.sockets import context

__all__ = ["Refusal", "watch", "unwatch"]

log = logging.getLogger(__name__)

Refusal = namedtuple("Refusal", "endpoint kind reason")
Refusal.__doc__ = ("A peer refused at the handshake: ``endpoint`` (str), ``kind`` (\"wire\", "
                   "\"protocol\" or \"auth\"), ``reason`` (words).")

#: the protocol error for a peer of an incompatible socket type (libzmq 4.3 closes instead)
_INVALID_METADATA = int(zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA)
_OPENED = frozenset((zmq.EVENT_CONNECTED, zmq.EVENT_ACCEPTED))
_HANDSHAKE = frozenset((zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
                        zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_AUTH))
_EVENTS = sum(_OPENED | _HANDSHAKE) | zmq.EVENT_DISCONNECTED
#: refusals kept per socket (the oldest are dropped; each is logged anyway)
KEEP = 100

_allocate_lock = get_original("_thread", "allocate_lock")
_start_new_thread = get_original("_thread", "start_new_thread")
_lock = _allocate_lock()
_reader = None  # the process's _Reader, while it runs


def watch(owner):
    """Start reporting ``owner``'s refused peers (a SafeSocket, before bind/connect)."""
    global _reader
    endpoint = "inproc://zactors-scatter-handshakes-%s" % uuid.uuid4().hex
    owner._sock.monitor(endpoint, _EVENTS)
    pair = context().socket(zmq.PAIR, socket_class=zmq.Socket)
    pair.linger = 0
    pair.connect(endpoint)
    with _lock:
        if _reader is None:
            _reader = _Reader()
        _reader.changes.append((pair, owner))
        _reader.kick()
    return pair


def unwatch(owner, pair):
    """Stop it (``owner``'s lock held, socket still open): monitor first, then its reader."""
    try:
        owner._sock.disable_monitor()
    except zmq.ZMQError:
        pass
    with _lock:
        if _reader is not None:
            _reader.changes.append((pair, None))
            _reader.kick()
        else:  # the context went, and the reader with it
            pair.close(0)


class _Connections:
    """One socket's connections whose handshake has not ended, from its monitor events."""

    __slots__ = ("owner", "pending", "logged")

    def __init__(self, owner):
        self.owner = owner
        self.pending = {}  # fd -> endpoint, oldest first
        self.logged = set()  # (endpoint, kind) already logged as a WARNING

    def feed(self, frames):
        event = Monitor.decode(frames)
        kind, endpoint = event.event, event.endpoint
        if kind in _OPENED:
            self.pending[event.value] = endpoint
        elif kind in _HANDSHAKE:
            # Handshake events name the endpoint, not the connection: the newest
            # pending one there (a bound socket's are all on its one endpoint).
            for fd in reversed([fd for fd, at in self.pending.items() if at == endpoint]):
                del self.pending[fd]
                break
            if kind != zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.refuse(event)
        elif kind == zmq.EVENT_DISCONNECTED and self.pending.pop(event.value, None) is not None:
            self.refuse(event)  # closed before its handshake ended: no reason given

    def refuse(self, event):
        owner = self.owner
        bound = owner._bound(event.endpoint)
        where = ("a peer connected to %s" if bound else "the peer at %s") % event.endpoint
        if event.event == zmq.EVENT_DISCONNECTED or event.value == _INVALID_METADATA:
            kind = "wire"
            reason = ("%s closed the handshake: most likely it speaks another wire (a %s must meet "
                      "a %s; native SCATTER/GATHER on one side only? both ends must choose alike, "
                      "native=%s here) or it is not a ZeroMQ peer"
                      % (where, owner.wire, _PEERS.get(owner.wire, "matching peer"), owner.native))
        else:
            kind = "auth" if event.event == zmq.EVENT_HANDSHAKE_FAILED_AUTH else "protocol"
            reason = (describe_accepted(event) if bound else describe(event, where)) or (
                "%s failed the handshake (event 0x%x, value %d)" % (where, event.event, event.value))
        refusal = Refusal(event.endpoint, kind, reason)
        refused = owner.refused
        if refusal not in refused:
            refused.append(refusal)
            if len(refused) > KEEP:
                del refused[0]
        first = (event.endpoint, kind) not in self.logged
        self.logged.add((event.endpoint, kind))
        log.log(logging.WARNING if first else logging.DEBUG, "%r: refused at the handshake: %s",
                owner, reason)


_PEERS = {"PUSH": "PULL or an emulated Gather", "PULL": "PUSH or an emulated Scatter",
          "SCATTER": "GATHER (native)", "GATHER": "SCATTER (native)"}


class _Reader:
    """The thread reading every watched socket's monitor (its attributes: ``_lock`` held)."""

    __slots__ = ("changes", "_fd")

    def __init__(self):
        self.changes = []  # (pair, owner) to add, (pair, None) to close
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        _start_new_thread(self._run, ())

    def kick(self):
        os.eventfd_write(self._fd, 1)

    def _run(self):
        global _reader
        fd = self._fd
        owners = {}  # pair -> its socket's _Connections
        items = [(fd, zmq.POLLIN)]
        try:
            while True:
                with _lock:
                    changes, self.changes = self.changes, []
                if changes:
                    for pair, owner in changes:
                        if owner is None:
                            owners.pop(pair, None)
                            pair.close(0)
                        else:
                            owners[pair] = _Connections(owner)
                    items = [(fd, zmq.POLLIN)] + [(pair, zmq.POLLIN) for pair in owners]
                for sock, _ in zmq.zmq_poll(items, -1):
                    if isinstance(sock, int):
                        try:
                            os.eventfd_read(fd)
                        except BlockingIOError:
                            pass
                        continue
                    while True:
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        try:
                            owners[sock].feed(frames)
                        except Exception:  # a malformed event must not end the reporting
                            log.exception("scatter handshakes: cannot report %r", frames)
        except zmq.ZMQError as exc:  # ETERM: the context is going; let it
            log.debug("scatter handshakes: reader ends: %s", exc)
        finally:
            with _lock:
                _reader = None
                for pair in list(owners) + [pair for pair, _ in self.changes]:
                    pair.close(0)
                os.close(fd)
