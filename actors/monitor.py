"""Socket monitor: what libzmq says about a socket's connections, decoded.

libzmq reports a socket's connection life (connects, accepts, handshakes,
disconnects) on an inproc PAIR when asked (``zmq_socket_monitor``).  That is
the only place a CURVE client learns that the server refused its key, or a
bound socket learns which of its connections are real ZeroMQ peers::

    watch = Monitor(sock, HANDSHAKE)      # before connect/bind
    sock.connect(endpoint)
    event = watch.recv(timeout=2.0)       # a MonitorEvent, or None at the deadline
    if event and event.event & HANDSHAKE_FAILED:
        print(describe(event, "the server", curve=True))   # why, in words
    watch.close()                         # always: see below

:func:`probe` does that for a server you connect to, raising
:class:`HandshakeFailed` when it refuses.

Beware: libzmq's I/O thread blocks on an event its reader does not take, and
with it every socket of the context.  Read events while the monitor runs
(:meth:`Monitor.events` drains without blocking; an actor may
``add_reader(watch.pair, ...)``), and :meth:`Monitor.close` (which stops the
monitor before closing the reader) as soon as the events are no longer
needed.

:class:`Peers` counts the peers of a bound socket that completed a ZeroMQ
handshake, from the same events: failed handshakes, port scanners and HTTP
clients never count.

A :class:`Monitor` belongs to the greenlet (and thread) that created it,
like the kernel's sockets.
"""
from __future__ import annotations

import errno
import struct
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import zmq

from .sockets import POLLIN, Socket, context, limit_size

__all__ = ["Monitor", "MonitorEvent", "HandshakeFailed", "Peers", "describe", "describe_accepted", "probe", "HANDSHAKE_FAILED", "HANDSHAKE"]

class MonitorEvent(NamedTuple):
    """One monitor event: ``event`` (a ``zmq.EVENT_*`` int), ``value`` (int), ``endpoint`` (str)."""

    event: int
    value: int
    endpoint: str

_EVENT = struct.Struct("=HI")

#: every "handshake failed" event
HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                    | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
HANDSHAKE = HANDSHAKE_FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED

_MECHANISM_MISMATCH = int(zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
_CRYPTOGRAPHIC = int(zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
_ZAP_CODES = {300: "asks to try later (ZAP 300)", 400: "refused our key (ZAP 400)",
              500: "failed to check our key (ZAP 500: its authenticator had an internal error)"}


class HandshakeFailed(ConnectionRefusedError):
    """The peer ended the ZeroMQ handshake: ``str()`` says why; ``event`` is the MonitorEvent."""

    def __init__(self, message: str, event: MonitorEvent) -> None:
        super().__init__(message)
        self.event = event


def describe(event: MonitorEvent, peer: str = "the peer", curve: bool = False) -> str | None:
    """Words for a failed-handshake ``event`` seen by a connecting socket.

    ``curve`` says whether this side uses CURVE (it changes what a silent
    close most likely means).  None for an event that is not a failure.
    """
    kind, value = event.event, event.value
    if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return "%s %s" % (peer, _ZAP_CODES.get(value, "refused us (ZAP %d)" % value))
    if kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == _MECHANISM_MISMATCH:
            return ("%s uses another security mechanism (%s)"
                    % (peer, "it does not use CURVE" if curve else "it uses CURVE: give its public key and ours"))
        if value == _CRYPTOGRAPHIC:
            return "%s failed to decrypt our CURVE handshake (keys do not match)" % peer
        return "%s broke the ZeroMQ protocol (error 0x%x): is it a ZeroMQ peer?" % (peer, value)
    if kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        if curve:
            return "%s closed the CURVE handshake: the server public key we use is not its key" % peer
        return "%s closed the connection during the ZeroMQ handshake (%s)" % (
            peer, errno.errorcode.get(value, value) if value else "no detail")
    return None


def describe_accepted(event: MonitorEvent) -> str | None:
    """Words for a failed-handshake ``event`` seen by a bound (server) socket; None if not a failure."""
    kind, value = event.event, event.value
    if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return "a peer's key was refused (ZAP %d)" % value
    if kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == _MECHANISM_MISMATCH:
            return "a peer uses another security mechanism (CURVE on one side only)"
        if value == _CRYPTOGRAPHIC:
            return "a peer's CURVE handshake did not decrypt (it uses another server public key)"
        return "a peer broke the ZeroMQ protocol (error 0x%x)" % value
    if kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        return "a connection closed during the ZeroMQ handshake"
    return None


class Monitor:
    """Reads the monitor events of ``sock`` (a pyzmq socket, or a scatter-gather one).

    Create it before ``sock`` connects or binds, so that no event is missed.
    ``pair`` is the owned reading socket (for an actor's ``add_reader``).
    """

    __slots__ = ("sock", "pair", "_closed")

    def __init__(self, sock: Any, events: int = zmq.EVENT_ALL) -> None:
        endpoint = "inproc://zactors-monitor-%s" % uuid.uuid4().hex
        self.sock = sock
        self.pair: Socket = context().socket(zmq.PAIR, socket_class=Socket)  # type: ignore[assignment]
        self.pair.linger = 0
        sock.monitor(endpoint, events)
        self.pair.connect(endpoint)
        self._closed = False

    @staticmethod
    def decode(frames: Sequence[bytes]) -> MonitorEvent:
        """The :class:`MonitorEvent` of one monitor message.

        libzmq's v1 format: ``uint16 event, uint32 value`` (native order),
        then the endpoint.  (pyzmq's ``parse_monitor_message`` says the same,
        but importing it imports asyncio: 30 ms on every command's start.)
        """
        event, value = _EVENT.unpack(frames[0])
        endpoint = frames[1] if len(frames) > 1 else b""
        return MonitorEvent(event, value, bytes(endpoint).decode(errors="replace"))

    def events(self) -> list[MonitorEvent]:
        """Every event waiting now (never blocks)."""
        found = []
        while not self._closed:
            try:
                found.append(self.decode(self.pair.recv_frames()))
            except zmq.Again:
                break
        return found

    def recv(self, timeout: float | None = None) -> MonitorEvent | None:
        """The next event; parks this greenlet up to ``timeout`` s; None at the deadline."""
        if self._closed or not self.pair.wait(POLLIN, timeout):
            return None
        return self.decode(self.pair.recv_frames())

    def close(self) -> None:
        """Stop the monitor, then close the reader (in that order: see the module docstring)."""
        if self._closed:
            return
        self._closed = True
        stop = getattr(self.sock, "stop_monitor", None)
        try:
            if stop is not None:
                stop()
            elif not self.sock.closed:
                self.sock.disable_monitor()
        except zmq.ZMQError:  # the socket is closed already: its monitor with it
            pass
        self.pair.close(0)


class Peers:
    """Counts the peers of a bound socket that completed a ZeroMQ handshake.

    Feed it the socket's monitor events (:meth:`feed`).  libzmq names a
    connection by its file descriptor in ACCEPTED and DISCONNECTED only, not
    in the handshake events, so a handshake outcome is given to the newest
    connection still waiting for one (a real peer handshakes within
    milliseconds; an idle one is older).  A connection that never completed
    a handshake (an HTTP client, a port scanner, a refused key) never counts,
    and its disconnect takes nothing away.  ``failed`` counts failed
    handshakes, ``last_failure`` is the latest as a :class:`MonitorEvent`.
    """

    __slots__ = ("count", "failed", "last_failure", "_pending", "_good")

    def __init__(self) -> None:
        self.count = 0
        self.failed = 0
        self.last_failure: MonitorEvent | None = None
        self._pending: list[int] = []  # fds accepted, no handshake outcome yet, oldest first
        self._good: set[int] = set()

    def feed(self, event: MonitorEvent) -> int:
        """Take one :class:`MonitorEvent`; returns the peer count."""
        kind = event.event
        if kind == zmq.EVENT_ACCEPTED:
            self._pending.append(event.value)
        elif kind & HANDSHAKE:
            fd = self._pending.pop() if self._pending else None
            if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                if fd is not None:
                    self._good.add(fd)
                self.count += 1
            else:
                self.failed += 1
                self.last_failure = event
        elif kind == zmq.EVENT_DISCONNECTED:
            fd = event.value
            if fd in self._good:
                self._good.discard(fd)
                self.count -= 1
            elif fd in self._pending:
                self._pending.remove(fd)
        return self.count


def probe(endpoint: str, secure: Callable[[Socket], object] | None = None, timeout: float = 2.0,
          peer: str = "the peer") -> bool:

    """Open a DEALER to ``endpoint`` and see how its handshake ends; for ROUTER-like servers.

    ``secure(sock)`` sets security options first (e.g. ``curve_client``).
    Returns True when the handshake succeeded, False when none ended within
    ``timeout`` s (nobody answered yet); raises :class:`HandshakeFailed`.
    The DEALER sends nothing and is closed before returning, so a server
    that routes by peer sees a peer come and go and nothing else.
    Parks this greenlet up to ``timeout``.
    """
    sock: Socket = context().socket(zmq.DEALER, socket_class=Socket)  # type: ignore[assignment]
    sock.linger = 0
    limit_size(sock, 1024)  # it reads nothing: a server may not make it hold a frame either
    watch = None
    try:
        if secure is not None:
            secure(sock)
        watch = Monitor(sock, HANDSHAKE)
        sock.connect(endpoint)
        deadline = time.monotonic() + timeout
        while True:
            event = watch.recv(max(0.0, deadline - time.monotonic()))
            if event is None:
                return False
            if event.event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                return True
            failure = describe(event, peer, curve=secure is not None)
            if event.event != zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL or secure is not None:
                raise HandshakeFailed(failure, event)  # type: ignore[arg-type]  # a failure: described
    finally:
        if watch is not None:
            watch.close()
        sock.close(0)
