"""Majordomo workers: subclass :class:`Worker` and implement ``handle``.

::

    class Echo(Worker):
        service = b"echo"

        def handle(self, request):          # request: list of body frames
            return request                  # the FINAL reply

    class Count(Worker):
        service = b"count"

        def handle(self, request):
            for i in range(3):
                yield [b"%d" % i]           # each yield: a PARTIAL reply
            return [b"done"]                # the FINAL reply

    worker = Echo("tcp://127.0.0.1:5555")   # connects, sends READY
    ...
    worker.destroy()                        # sends DISCONNECT, closes

A reply is a list of frames (bytes or str) or one bytes/str.  A generator
that returns nothing ends with a FINAL of one empty frame.  ``yield None``
sends nothing: it only lets the worker's loop run.

``handle`` runs in the worker actor's greenlet.  A generator runs as a
cooperative task (:meth:`~zactors.actors.actor.Actor.start_task`): the loop
advances it a bounded slice per round, so between its steps the worker reads
its socket and pipe and runs its timers: heartbeats flow, ``$STATS`` is
answered and ``$TERM`` (``destroy()``) ends a stream at once.  A plain
``handle`` holds the loop until it returns, so long work should be a
generator (``yield None`` now and then) or the broker will count the worker
dead after ``liveness`` x ``heartbeat``.  If ``handle`` raises, or returns
or yields something that is not a reply (``42``), :meth:`Worker.on_error`
decides, and the worker counts it (``failed`` in ``$STATS``) and lives on.
By default it logs the error and answers with an error reply (the remote
exception's type and message: a zactors client raises ``ServiceError`` at
once; see :mod:`.protocol`), so the request runs once.  An ``on_error`` may
instead return an ordinary FINAL, or None to give the request back: the
worker reconnects (DISCONNECT, READY) and the broker gives the request to
another worker only if this one said it is ``idempotent``, else it answers
the client with an error reply.

``idempotent=True`` promises that running a request twice is harmless: the
broker may then give the request of a worker that died or vanished to
another (READY carries the zactors extension frame; leave it off with a
broker that is not zactors').

The worker heartbeats every ``heartbeat`` seconds when it has sent nothing
else, counts the broker lost after ``liveness`` x ``heartbeat`` seconds of
silence (with ``framing="majortomo"``, not while it holds a request: that
broker does not heartbeat busy workers), and then (or on DISCONNECT) reconnects on a new socket, with a delay
growing from ``reconnect`` to ``reconnect_max`` while the broker stays
silent.  Events: ``CONNECTED`` (READY sent, after each (re)connect),
``DISCONNECTED reason``.  The handle is an actor handle: safe from many
greenlets of its thread, not across OS threads.
"""
from __future__ import annotations

import functools
import logging
import time
import types
from collections.abc import Generator, Sequence
from typing import Union

import zmq

from zactors.actors.actor import Actor
from zactors.actors.auth import curve_client
from zactors.actors.sockets import NOBLOCK, Socket, context, limit_size
from zactors.actors.speedups import send_message
from zactors.actors.values import to_bytes

from zactors.actors.auth import Keypair

from .protocol import (DISCONNECT, MAJORTOMO, MAX_MESSAGE, REQUEST, ProtocolError, error_body, frame_limit,
                       framing as _framing)

__all__ = ["Worker"]

log = logging.getLogger(__name__)

_monotonic = time.monotonic

#: one reply from :meth:`Worker.handle`: frames (bytes or str), one bytes/str, or None (one empty frame)
WorkerReply = Union[bytes, str, Sequence[Union[bytes, str]], None]


def _frames(reply):
    """The frames of a reply; TypeError unless it is None, bytes/str, or an iterable of bytes-like/str."""
    if reply is None:
        return [b""]
    if isinstance(reply, (bytes, str)):
        reply = [reply]
    try:
        frames = [f if type(f) is bytes else to_bytes(f, "a reply frame") for f in reply]
    except TypeError:
        raise TypeError("a reply is bytes, str or a list of them, not %.200r" % (reply,)) from None
    return frames or [b""]


class Worker(Actor):
    """An MDP/0.2 worker of one service.  Subclass it and implement :meth:`handle`.

    ``service`` and ``idempotent`` may be given here or as class attributes.
    ``curve`` is ``(broker_public_key, worker_keys)`` (an ``actors.auth``
    Keypair or the secret key) to connect to a CURVE broker.
    """

    service: bytes | str | None = None
    idempotent: bool = False

    def __init__(self, endpoint: str, service: bytes | str | None = None, *, heartbeat: float = 2.5,
                 liveness: int = 3, reconnect: float = 0.1, reconnect_max: float = 5.0, framing: str = "spec",
                 curve: tuple[bytes | str, Keypair | bytes | str] | None = None, linger: float = 1.0,
                 max_message: int = MAX_MESSAGE, name: str | None = None, idempotent: bool | None = None) -> None:
        self.endpoint = endpoint
        self.max_message = max_message
        if idempotent is not None:
            self.idempotent = idempotent
        service = service or self.service
        if not service:
            raise ValueError("a worker needs a service name")
        self.service = service.encode("ascii") if isinstance(service, str) else bytes(service)
        self.heartbeat = heartbeat
        self.liveness = liveness
        self.reconnect = reconnect
        self.reconnect_max = reconnect_max
        self.framing = _framing(framing)
        self.curve = curve
        self.linger = linger
        if name:
            self.name = name

    # -- to override ----------------------------------------------------------
    def handle(self, request: list[bytes]) -> WorkerReply | Generator[WorkerReply, None, WorkerReply]:
        """Serve one request (list of frames): return the FINAL, or yield PARTIALs."""
        raise NotImplementedError

    def on_error(self, request: list[bytes], exc: BaseException) -> WorkerReply:
        """``handle`` raised (or gave no valid reply): return the FINAL to send, or None to give the request
        back.  The default logs the error and returns an error reply naming the exception's type and message
        (:func:`~zactors.patterns.majordomo.protocol.error_body`)."""
        log.error("%s: handler failed on a %r request: %r", self.name, self.service, exc)
        return error_body(type(exc).__name__, exc)

    # -- lifecycle ------------------------------------------------------------
    def setup(self) -> None:
        self._sock = None
        self._job = None          # the Task streaming a generator's replies
        self._busy = None         # client address of the request in hand
        self._delay = self.reconnect
        self._heard = _monotonic()
        self._sent = 0.0
        self._watchdog = None
        self._connect()
        self.call_every(self.heartbeat, self._tick)

    def teardown(self) -> None:

        sock = self._sock
        if sock is not None:
            self._sock = None
            self.remove_reader(sock)
            try:
                sock.send_multipart(self.framing.disconnect, NOBLOCK)
            except zmq.ZMQError:
                pass
            sock.close(int(self.linger * 1000))  # let DISCONNECT leave

    def _connect(self):
        sock = self._sock = context().socket(zmq.DEALER, socket_class=Socket)
        sock.linger = 0
        limit_size(sock, frame_limit(self.max_message))  # a request frame over it drops the connection
        if self.curve:
            curve_client(sock, self.curve[1], self.curve[0])
        sock.connect(self.endpoint)
        self.add_reader(sock, self._on_frames)
        self._heard = _monotonic()
        self._arm_watchdog(self.heartbeat * self.liveness)
        self._send(self.framing.ready(self.service, self.idempotent))
        self.stats["connects"] += 1
        self.emit("CONNECTED")

    def _reconnect(self, reason, delay):
        """Drop the socket (and any request in hand); connect again after ``delay``."""
        self._abandon()
        sock, self._sock = self._sock, None
        if sock is not None:
            self.remove_reader(sock)
            # Closed from a timer: the reactor may still be draining it right now.
            self.call_later(0, sock.close, 0)
        self.stats["reconnects"] += 1
        log.info("%s: %s; reconnecting in %.3gs", self.name, reason, delay)
        self.emit("DISCONNECTED", reason)
        self.call_later(delay, self._connect)

    def _abandon(self):
        job, self._job = self._job, None
        if job is not None:
            job.cancel()  # closes the handler's generator
        self._busy = None

    def _send(self, frames):
        sock = self._sock
        if sock is None:
            return
        try:
            send_message(sock, sock.handle, frames)  # one C call, when libzmq takes it now
        except zmq.Again:
            try:
                sock.send_multipart(frames, timeout=self.heartbeat * self.liveness)
            except zmq.Again:
                self.stats["send_timeouts"] += 1
                return
        self._sent = _monotonic()

    def _tick(self):
        if self._sock is not None and _monotonic() - self._sent >= self.heartbeat * 0.9:
            self._send(self.framing.heartbeat)

    def _arm_watchdog(self, delay):
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = self.call_later(delay, self._check_broker)

    def _check_broker(self):
        """Fires ``liveness`` x ``heartbeat`` after the last word from the broker, or re-arms."""
        self._watchdog = None
        if self._sock is None:
            return
        limit = self.heartbeat * self.liveness
        silent = _monotonic() - self._heard
        if silent < limit or (self._busy is not None and self.framing is MAJORTOMO):
            # (majortomo's broker sends no heartbeats to a busy worker)
            self._arm_watchdog(max(limit - silent, 0.001) if silent < limit else limit)
            return
        self._reconnect("broker silent for %.3gs" % silent, self._delay)
        self._delay = min(self._delay * 2, self.reconnect_max)

    # -- input ----------------------------------------------------------------
    def _on_frames(self, frames):
        if self._sock is None:  # left over from a socket we dropped
            return
        try:
            message = self.framing.decode_for_worker(frames)
        except ProtocolError as exc:
            self.stats["invalid"] += 1
            log.debug("%s: invalid message from broker dropped: %s", self.name, exc)
            return
        self._heard = _monotonic()
        command = message.command
        if command is DISCONNECT:
            self._reconnect("broker sent DISCONNECT", self._delay)
            self._delay = min(self._delay * 2, self.reconnect_max)
            return
        self._delay = self.reconnect
        if command is REQUEST:
            if self._busy is not None:
                self.stats["unexpected"] += 1
                return
            self._serve(message.address, message.body)
        # HEARTBEAT: hearing it was the point

    def _serve(self, address, body):
        self.stats["requests"] += 1
        self._busy = address
        try:
            result = self.handle(body)
        except Exception as exc:
            self._failed(address, body, exc)
            return
        if isinstance(result, types.GeneratorType):
            self._job = self.start_task(self._stream(address, result),
                                        on_done=functools.partial(self._streamed, address, body))
        else:
            self._finish(address, body, result)

    def _stream(self, address, parts):
        """The task: send each PARTIAL the handler yields, one per step; return its FINAL."""
        try:
            while True:
                try:
                    part = next(parts)
                except StopIteration as stop:
                    return stop.value
                if part is not None:
                    frames = _frames(part)
                    self.stats["partials"] += 1
                    self._send(self.framing.worker_reply(False, address, frames))
                yield
        finally:
            parts.close()

    def _streamed(self, address, body, task):
        if task.cancelled:  # abandoned: the socket went, or the actor ends
            return
        self._job = None
        if task.error is not None:
            self._failed(address, body, task.error)
        else:
            self._finish(address, body, task.result)

    def _finish(self, address, body, reply):
        try:
            frames = _frames(reply)
        except TypeError as exc:
            self._failed(address, body, exc)
            return
        self._busy = None
        self._send(self.framing.worker_reply(True, address, frames))

    def _failed(self, address, body, exc):
        """The handler failed: on_error's FINAL, or give the request back and reconnect."""
        self.stats["failed"] += 1
        self._job = None
        try:
            reply = self.on_error(body, exc)
            frames = None if reply is None else _frames(reply)
        except Exception as error:
            log.error("%s: on_error failed on a %r request: %r", self.name, self.service, error)
            frames = None
        self._busy = None
        if frames is not None:
            self._send(self.framing.worker_reply(True, address, frames))
        else:
            self._send(self.framing.disconnect)
            self._reconnect("handler failed", self.reconnect)
