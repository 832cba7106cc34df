"""The Majordomo client: call services from plain code, greenlets and web handlers.

::

    client = Client("tcp://127.0.0.1:5555")
    replies = client.request(b"echo", b"hello")        # [[b"hello"]]: partials, then the FINAL
    for reply in client.stream(b"count", b"3"):        # each reply as it arrives
        ...
    client.close()

Each request borrows a DEALER socket from a pool (at most ``pool_size`` at
once; more callers wait for one), so any number of greenlets may call one
client concurrently, e.g. from a gevent WSGI handler: MDP/Client is
synchronous per socket, and each request in flight has its own.  A call
parks only its own greenlet.  A client is not safe across OS threads: use one
per thread.

Retries follow the spec's recommendation: if no reply arrives within
``timeout`` seconds (counted afresh after each partial), the socket is closed,
a new one opened and the request sent again, up to ``retries`` attempts in
all; then :class:`RequestTimeout` is raised.  After a retry, or when the
broker gives a request to a second worker because the first one died,
partials may arrive again: MDP workers are idempotent.
"""
import logging

import zmq
from gevent.lock import BoundedSemaphore

from zactors.actors.auth import curve_client
from zactors.actors.sockets import POLLIN, Socket, context

from .protocol import FINAL, ProtocolError, framing as _framing

__all__ = ["Client", "RequestTimeout"]

log = logging.getLogger(__name__)


class RequestTimeout(TimeoutError):
    """No complete reply after every attempt."""


def _bytes(value):
    return value.encode() if isinstance(value, str) else bytes(value)


class Client:
    """An MDP/0.2 client of the broker at ``endpoint``.

    ``curve`` is
    ``(broker_public_key, client_keys)`` (an ``actors.auth`` Keypair or the
    secret key) for a CURVE broker.  ``stats`` counts ``requests``, ``retries``,
    ``failed``, ``invalid`` and ``stale`` replies.
    """

    def __init__(self, endpoint, *, timeout=2.5, retries=3, pool_size=64, framing="spec", curve=None):
        if timeout <= 0 or retries < 1 or pool_size < 1:
            raise ValueError("need timeout > 0, retries >= 1 and pool_size >= 1")
        self.endpoint = endpoint
        self.timeout = timeout
        self.retries = retries
        self.framing = _framing(framing)
        self.curve = curve
        self.stats = dict.fromkeys(("requests", "retries", "failed", "invalid", "stale"), 0)
        self._idle = []
        self._slots = BoundedSemaphore(pool_size)
        self._closed = False

    def request(self, service, *frames, timeout=None, retries=None):
        """Send a request and return every reply: ``[partial, ..., final]``, each a list of frames.

        Blocks the calling greenlet; raises :class:`RequestTimeout`.
        """
        return list(self.stream(service, *frames, timeout=timeout, retries=retries))

    def stream(self, service, *frames, timeout=None, retries=None):
        """Send a request and yield each reply (a list of frames) as it arrives; the FINAL comes last."""
        if self._closed:
            raise RuntimeError("client is closed")
        service = _bytes(service)
        body = [_bytes(f) for f in frames]
        if not body:
            raise ValueError("a request needs at least one body frame")
        timeout = self.timeout if timeout is None else timeout
        attempts = self.retries if retries is None else retries
        message = self.framing.client_request(service, body)
        decode = self.framing.decode_for_client
        stats = self.stats
        stats["requests"] += 1
        self._slots.acquire()
        sock = self._idle.pop() if self._idle else self._socket()
        done = False
        try:
            for attempt in range(attempts):
                if attempt:
                    stats["retries"] += 1
                    log.debug("no reply from %r within %ss; retrying on a new socket", service, timeout)
                    sock.close(0)
                    sock = self._socket()
                try:
                    sock.send_multipart(message, timeout=timeout)
                except zmq.Again:  # not even queued: count it as a lost attempt
                    continue
                while sock.wait(POLLIN, timeout):  # a reply is there (no recv-EAGAIN round first)
                    frames = sock.recv_frames()
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
                        yield reply.body
                        return
                    yield reply.body
            stats["failed"] += 1
            raise RequestTimeout("no reply from service %r at %s after %d attempt(s) of %ss"
                                 % (service.decode("ascii", "replace"), self.endpoint, attempts, timeout))
        finally:
            if done and not self._closed:
                self._idle.append(sock)
            else:  # replies may still be on their way: never reuse this socket
                sock.close(0)
            self._slots.release()

    def _socket(self):
        sock = context().socket(zmq.DEALER, socket_class=Socket)
        sock.linger = 0
        if self.curve:
            curve_client(sock, self.curve[1], self.curve[0])
        sock.connect(self.endpoint)
        return sock

    def close(self):
        """Close the idle sockets; requests in flight close theirs when they end."""
        self._closed = True
        while self._idle:
            self._idle.pop().close(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
