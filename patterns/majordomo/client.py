"""The Majordomo client: call services from plain code, greenlets and web handlers.

::

    client = Client("tcp://127.0.0.1:5555")
    replies = client.request(b"echo", b"hello")        # [[b"hello"]]: partials, then the FINAL
    for reply in client.stream(b"count", b"3"):        # each reply as it arrives
        ...
    client.close()

``Client(endpoint, *, timeout=2.5, retries=3, pool_size=64, framing="spec", curve=None)``:

* ``pool_size``: each request borrows a DEALER socket from a pool of at most
  ``pool_size``; more concurrent callers wait for one.  So any number of
  greenlets may call one client at once, e.g. from a gevent WSGI handler
  (MDP/Client is synchronous per socket; each request in flight has its own).
  A call parks only its own greenlet.  A client is not safe across OS
  threads: use one per thread.
* ``timeout`` and ``retries``: an attempt waits up to ``timeout`` seconds for
  a reply (counted afresh after each partial); without one the socket is
  closed, a new one opened and the request sent again, up to ``retries``
  attempts in all.  The whole call, the wait for a pooled socket included,
  is bounded: without any reply it ends within ``timeout * retries``
  seconds, raising :class:`RequestTimeout`.
* A broker that refuses the connection (a CURVE key it does not accept, a
  wrong server key, CURVE on one side only) raises :class:`HandshakeFailed`
  (a ``ConnectionRefusedError``) within a second or so, from the socket
  monitor, instead of a timeout; ``str()`` says what happened.

Errors travel back: when the handler raises (or the worker holding the
request is lost and its service is not idempotent), the call raises
:class:`ServiceError` at once, with the remote exception's type and
message; the request is not sent again.  Retries happen only when no answer
came within ``timeout``: a worker that got the first attempt may still be
working and answer late (its reply is dropped), so a request can run twice
then, and when the broker gives an idempotent worker's request to a second
worker, partials may arrive again.  Keep ``retries=1`` for requests that
must never repeat.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Self

import zmq
from gevent.lock import BoundedSemaphore

from zactors.actors.auth import Keypair

from zactors.actors.auth import curve_client
from zactors.actors.monitor import HANDSHAKE, HandshakeFailed, Monitor, describe
from zactors.actors.sockets import POLLIN, Socket, context, limit_size
from zactors.actors.speedups import events as _events, recv_message, send_message
from zactors.actors.values import to_bytes

from .protocol import FINAL, MAX_MESSAGE, ProtocolError, frame_limit, framing as _framing, parse_error

__all__ = ["Client", "RequestTimeout", "HandshakeFailed", "ServiceError"]

log = logging.getLogger(__name__)


_monotonic = time.monotonic

#: while a new socket's handshake is not done, replies are awaited in slices this long (s)
_HANDSHAKE_SLICE = 0.05


class RequestTimeout(TimeoutError):
    """No complete reply within the call's bound (see the module docstring).

    ``connected`` is True when a handshake with the broker completed during
    the call (no reply then means no worker answered in time), False when
    none did (most likely no broker at the endpoint).
    """

    def __init__(self, message: str, connected: bool = False) -> None:
        super().__init__(message)
        self.connected = connected


class ServiceError(Exception):
    """The service answered with an error: its handler raised, or the worker holding the request was lost.

    ``service`` (bytes), ``kind`` (the remote exception's type name, or ``WorkerLost``) and ``message``
    (str) say which; ``str()`` says all three in one line.
    """

    def __init__(self, service: bytes, kind: str, message: str) -> None:
        super().__init__("service %r failed: %s: %s" % (service.decode("ascii", "replace"), kind, message))
        self.service = service
        self.kind = kind
        self.message = message


class Client:
    """An MDP/0.2 client of the broker at ``endpoint``.

    ``timeout`` (seconds per attempt, > 0), ``retries`` (attempts in all,
    >= 1) and ``pool_size`` (sockets, >= 1): see the module docstring.
    ``curve`` is ``(broker_public_key, client_keys)`` (an ``actors.auth``
    Keypair or the secret key) for a CURVE broker.  ``stats`` counts
    ``requests``, ``retries``, ``failed`` (no answer), ``errors`` (error
    replies), ``invalid`` and ``stale`` replies.
    """

    def __init__(self, endpoint: str, *, timeout: float = 2.5, retries: int = 3, pool_size: int = 64,
                 framing: str = "spec", curve: tuple[bytes | str, Keypair | bytes | str] | None = None,
                 max_message: int = MAX_MESSAGE) -> None:
        if not timeout > 0:
            raise ValueError("timeout must be above 0 seconds, not %r" % (timeout,))
        if retries < 1:
            raise ValueError("retries must be 1 or more, not %r" % (retries,))
        if pool_size < 1:
            raise ValueError("pool_size must be 1 or more, not %r" % (pool_size,))
        self.endpoint = endpoint
        self.timeout = timeout
        self.retries = retries
        self.framing = _framing(framing)
        self.curve = curve
        self.max_message = max_message
        self.stats = dict.fromkeys(("requests", "retries", "failed", "errors", "invalid", "stale"), 0)
        self._idle: list[Socket] = []
        self.pool_size = pool_size
        self._slots = BoundedSemaphore(pool_size)
        self._watches: dict[Socket, Monitor] = {}      # socket -> Monitor, until its first handshake ends
        self._handshakes = 0    # handshakes seen to succeed
        self._closed = False

    def request(self, service: bytes | str, *frames: bytes | str, timeout: float | None = None,
                retries: int | None = None) -> list[list[bytes]]:
        """Send a request and return every reply: ``[partial, ..., final]``, each a list of frames.

        Blocks the calling greenlet; raises :class:`ServiceError`, :class:`RequestTimeout` or
        :class:`HandshakeFailed`.
        """
        return list(self.stream(service, *frames, timeout=timeout, retries=retries))

    def stream(self, service: bytes | str, *frames: bytes | str, timeout: float | None = None,
               retries: int | None = None) -> Iterator[list[bytes]]:
        """Send a request and yield each reply (a list of frames) as it arrives; the FINAL comes last."""
        if self._closed:
            raise RuntimeError("client is closed")
        if type(service) is not bytes:
            service = to_bytes(service, "service")
        if not service:
            raise ValueError("a service name cannot be empty")
        body = [f if type(f) is bytes else to_bytes(f, "a request frame") for f in frames]
        if not body:
            raise ValueError("a request needs at least one body frame")
        timeout = self.timeout if timeout is None else timeout
        attempts = self.retries if retries is None else retries
        message = self.framing.client_request(service, body)
        decode = self.framing.decode_for_client
        stats = self.stats
        stats["requests"] += 1
        deadline = _monotonic() + timeout * attempts  # the whole call, pool wait included
        handshakes = self._handshakes
        if not self._slots.acquire(True, timeout * attempts):
            stats["failed"] += 1
            raise RequestTimeout("no reply from service %r at %s within %gs: all %d pooled sockets stayed busy"
                                 % (service.decode("ascii", "replace"), self.endpoint, timeout * attempts,
                                    self.pool_size), connected=self._handshakes > handshakes)
        sock = self._idle.pop() if self._idle else self._socket()
        watches = self._watches
        connected = sock not in watches  # a pooled socket has answered before
        if connected and _events(sock, sock.handle) & POLLIN:  # (nearly never: look before reading)
            self._drop_stale(sock)
        done = False
        try:
            for attempt in range(attempts):
                wait = min(timeout, deadline - _monotonic())
                if wait <= 0:
                    break
                if attempt:
                    stats["retries"] += 1
                    log.debug("no reply from %r within %ss; retrying on a new socket", service, timeout)
                    self._discard(sock)
                    sock = self._socket()
                try:
                    send_message(sock, sock.handle, message)  # one C call, when libzmq takes it now
                except zmq.Again:
                    try:
                        sock.send_multipart(message, timeout=wait)
                    except zmq.Again:  # not even queued: count it as a lost attempt
                        continue
                # a reply is there (no recv-EAGAIN round first); a new socket also watches its handshake
                while sock.wait(POLLIN, wait) if sock not in watches else self._wait(sock, wait):
                    connected = True
                    frames = recv_message(sock, sock.handle)  # the reply's (the request's are in message)
                    if frames is None:
                        continue
                    try:
                        reply = decode(frames)
                    except ProtocolError as exc:
                        stats["invalid"] += 1
                        log.debug("invalid reply dropped: %s", exc)
                        continue
                    if reply.service is not None and reply.service != service:
                        stats["stale"] += 1
                        continue
                    if reply.command is FINAL:
                        done = True
                        error = parse_error(reply.body) if len(reply.body) == 3 else None
                        if error is not None:
                            stats["errors"] += 1
                            raise ServiceError(service, *error)
                        yield reply.body
                        return
                    yield reply.body
                    # progress: this attempt's clock starts again, and the call's bound moves with it
                    wait = timeout
                    deadline = max(deadline, _monotonic() + timeout * (attempts - attempt))
            stats["failed"] += 1
            connected = connected or self._handshakes > handshakes
            raise RequestTimeout("no reply from service %r at %s after %d attempt(s) of %gs"
                                 % (service.decode("ascii", "replace"), self.endpoint, attempts, timeout),
                                 connected=connected)
        finally:
            if done and not self._closed:
                self._idle.append(sock)
            else:  # replies may still be on their way: never reuse this socket
                self._discard(sock)
            self._slots.release()

    def _drop_stale(self, sock):
        """Drop what a reused socket received after its last FINAL (a broker's or
        worker's extra replies): MDP has no request id, so they would pass for
        the next request's answer."""
        while sock.ready(POLLIN):  # nearly always empty: look before a recv that would raise
            try:
                sock.recv_frames()
            except zmq.Again:
                return
            self.stats["stale"] += 1

    def _wait(self, sock, timeout):
        """Wait up to ``timeout`` s for a reply on ``sock``; raise HandshakeFailed if the broker refused it.

        While the socket's first handshake has not ended, waits in short
        slices and reads its monitor between them.
        """
        watch = self._watches.get(sock)
        if watch is None:
            return sock.wait(POLLIN, timeout)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if sock.wait(POLLIN, max(0.0, min(_HANDSHAKE_SLICE, remaining))):
                self._handshakes += 1
                self._unwatch(sock)  # a reply proves the handshake
                return True
            for event in watch.events():
                if event.event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self._handshakes += 1
                    self._unwatch(sock)
                    return sock.wait(POLLIN, max(0.0, deadline - time.monotonic()))
                if event.event != zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL or self.curve:
                    self._unwatch(sock)
                    raise HandshakeFailed("%s at %s" % (describe(event, "the broker", bool(self.curve)),
                                                        self.endpoint), event)
            if remaining <= 0:
                return False

    def _unwatch(self, sock):
        watch = self._watches.pop(sock, None)
        if watch is not None:
            watch.close()

    def _discard(self, sock):
        self._unwatch(sock)
        sock.close(0)

    def _socket(self):
        sock = context().socket(zmq.DEALER, socket_class=Socket)
        sock.linger = 0
        limit_size(sock, frame_limit(self.max_message))  # a reply frame over it drops the connection
        if self.curve:
            curve_client(sock, self.curve[1], self.curve[0])
        # watched until its first handshake ends: how a refused key is told from silence
        self._watches[sock] = Monitor(sock, HANDSHAKE)
        sock.connect(self.endpoint)
        return sock

    def close(self) -> None:
        """Close the idle sockets; requests in flight close theirs when they end."""
        self._closed = True
        while self._idle:
            self._discard(self._idle.pop())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:

        self.close()
