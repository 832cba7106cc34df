"""The Majordomo broker: an actor owning the ROUTER socket(s) clients and workers use.

::

    broker = Broker("tcp://127.0.0.1:*")        # returns once bound
    broker.endpoint                             # the real endpoint
    broker.call("INFO")                         # services, workers, queues, counters
    broker.destroy()

Behaviour (18/MDP v0.2, and where the spec leaves a choice):

- One ROUTER for clients and workers, or two (``worker_endpoint=``; then each
  takes its own sub-protocol only, anything else is invalid).
- Per-service request queues; idle workers are used least recently used first.
  A queued request goes to a worker the moment one becomes free (READY, or
  after its FINAL).
- Heartbeats both ways: the broker sends HEARTBEAT to every worker each
  ``heartbeat`` seconds and forgets a worker it has heard nothing from for
  ``liveness`` x ``heartbeat`` seconds (no DISCONNECT: the spec says stop
  sending to it).
- A worker that dies, disconnects, times out or breaks the protocol while it
  holds a request: if it said it is idempotent (READY's zactors extension
  frame, see :mod:`.protocol`), the request goes to another worker (first in
  its service's queue; PARTIALs sent by the lost worker may be repeated by
  the next one), until ``max_attempts`` workers lost it (then ``poisoned``:
  it would go on killing workers).  Otherwise, and when poisoned, the client
  gets an error reply (``WorkerLost``: ``lost`` counts them) and the request
  never runs twice.  The client gets exactly one FINAL: only the worker
  holding the request is listened to.
- A valid but unexpected command from a worker (anything but READY from an
  unknown peer, a second READY, a reply it owes nobody) is answered with
  DISCONNECT and the broker forgets that worker.  Invalid messages are
  dropped and counted (``invalid``); a registered worker sending one is
  forgotten the same way.  Nothing a peer sends stops the broker.
- Requests for a service without workers wait ``request_expiry`` seconds in
  its queue (checked every ``min(request_expiry / 4, heartbeat)`` seconds),
  then are dropped and counted (``expired``).  MDP has
  no error reply, so the client sees no answer: its own timeout (and retry)
  decides what happens, as for a lost broker.
- Bounded memory: a service queue holds at most ``max_queue`` requests and all
  queues together ``max_queued``; a request over either limit is dropped and
  counted (``rejected``), again with no answer to its client.
- Bounded frames: a peer that sends a frame over ``max_message`` bytes
  (default 16 MiB) is disconnected by libzmq before the frame is read
  (``ZMQ_MAXMSGSIZE``), so it costs no memory; counted in ``disconnects``
  with every other closed connection.  A message of more than ``max_frames``
  frames (64, the envelope included), or more than 4 * ``max_message``
  bytes in all, is dropped unread and counted (``multipart_refused``).
- Routing ids: the ROUTERs hand an id in use over to the newest connection
  (``ROUTER_HANDOVER``: libzmq would otherwise buffer up to RCVHWM messages of
  each duplicate, unread: 16 GiB each at the default limits).  The connection
  replaced goes idle: for a worker that means its heartbeats stop, so it is
  forgotten at ``liveness``; without CURVE anyone who knows a routing id can
  take it over and get what is routed to it (a client's replies, a worker's
  requests).  With CURVE each worker, and each client with requests in
  flight, is bound to the key it spoke with: a message of another key on its
  routing id ends that peering first (``peers_taken_over``): the worker is
  forgotten as if it had disconnected (its request re-dispatched or answered
  ``WorkerLost``), and the client's queued requests are dropped and their
  replies withheld (``replies_withheld``), so the new key never acts as, or
  hears for, the old one once it speaks.  A connection that takes an id over
  and only listens still gets what is routed there until then: at most the
  one request a worker holds (its worker is forgotten at ``liveness``), or a
  client's replies.  Workers never see a client's routing id: the client
  address of a REQUEST is a number the broker gives each request.
- ``mmi.*`` services are answered by the broker itself (see :mod:`.mmi`).
- Optional CURVE: ``curve=keys`` (an ``actors.auth`` Keypair, or the secret
  key) makes the ROUTER(s) CURVE servers, with ``curve_domain`` as their ZAP
  domain.  Who may connect is the ZAP handler's decision (an
  ``actors.auth.Authenticator`` in this process); without one, any client
  that knows the broker's public key is accepted.

Commands: ``INFO`` (reply: a dict of endpoints, services with their worker,
idle and queued counts, and counters), ``$STATS`` (counters), ``$TERM``.
The handle is an actor handle: safe from many greenlets of its thread, not
across OS threads.
"""
from __future__ import annotations

import itertools
import logging
import struct
import time
from collections import OrderedDict, deque
from functools import partial
from typing import Any

from zactors.actors.auth import Keypair

from zactors.actors.actor import Actor, command
from zactors.actors.auth import curve_server
from zactors.actors.heartbeat import Liveness
from zactors.actors.router import Router, fd_budget

from . import mmi
from .protocol import (CLIENT, DISCONNECT, FINAL, HEARTBEAT, IDEMPOTENT, MAX_MESSAGE, PARTIAL, READY, WORKER,
                       ProtocolError, error_body, frame_limit, framing as _framing)

__all__ = ["Broker"]

log = logging.getLogger(__name__)

_monotonic = time.monotonic

#: frames a message to the broker may have (envelope and body): more are dropped unread
MAX_FRAMES = 64

#: the client address a worker sees: a number per request, not the client's routing id (workers
#: would learn ids that, handed over to their newest connection, route another client's replies)
_ADDRESS = struct.Struct(">Q").pack


class _Request:
    __slots__ = ("client", "address", "service", "body", "deadline", "attempts", "lost_by", "peering")

    def __init__(self, client, address, service, body, deadline, peering):
        self.client = client
        self.address = address  # what the worker sees for the client: opaque, never its routing id
        self.service = service
        self.body = body
        self.deadline = deadline
        self.attempts = 0
        self.lost_by = set()    # identities of the workers that lost it (one may reconnect and lose it again)
        self.peering = peering  # the client's (Router.peering): ended, its reply goes to no one


class _Worker:
    __slots__ = ("identity", "service", "request", "idempotent", "peering")

    def __init__(self, identity, service, idempotent, peering):
        self.identity = identity
        self.service = service
        self.request = None
        self.idempotent = idempotent
        self.peering = peering  # ended (another key took the id over): the worker is gone


class _Service:
    __slots__ = ("name", "requests", "idle", "workers")

    def __init__(self, name):
        self.name = name
        self.requests = deque()
        self.idle = OrderedDict()   # identity -> _Worker, least recently used first
        self.workers = 0


class Broker(Actor):
    """An MDP/0.2 broker.  See the module docstring for its behaviour.

    ``endpoint`` is bound for clients and workers (``tcp://127.0.0.1:*`` picks
    a port; read ``broker.endpoint``); ``worker_endpoint``, if given, is a
    second ROUTER for workers (``broker.worker_endpoint``).
    """

    def __init__(self, endpoint: str = "tcp://127.0.0.1:*", *, worker_endpoint: str | None = None,
                 heartbeat: float = 2.5, liveness: int = 3, request_expiry: float = 10.0, max_queue: int = 10000,
                 max_queued: int = 100000, max_attempts: int = 3, framing: str = "spec",
                 curve: Keypair | bytes | str | None = None, curve_domain: str | None = None,
                 max_message: int = MAX_MESSAGE, max_frames: int = MAX_FRAMES, name: str | None = None) -> None:
        if heartbeat <= 0 or liveness < 1 or request_expiry <= 0:
            raise ValueError("heartbeat and request_expiry must be > 0, liveness >= 1")
        self.endpoint = endpoint
        self.worker_endpoint = worker_endpoint
        self.heartbeat = heartbeat
        self.liveness = liveness
        self.request_expiry = request_expiry
        self.max_queue = max_queue
        self.max_queued = max_queued
        self.max_attempts = max_attempts
        self.max_message = max_message
        self.max_frames = max_frames
        self.framing = _framing(framing)
        self.curve = curve
        self.curve_domain = curve_domain
        if name:
            self.name = name

    # -- setup ----------------------------------------------------------------
    def setup(self) -> None:
        self._services: dict[bytes, _Service] = {}
        self._workers: dict[bytes, _Worker] = {}
        self._queued = 0
        self._addresses = itertools.count(1)
        self._alive: Liveness[bytes] = Liveness(self.heartbeat * self.liveness, self.heartbeat * self.liveness)
        self._alive_timer = None
        if self.worker_endpoint:  # clients on one ROUTER, workers on the other
            self._crouter = self._router(partial(self._on_message_for, CLIENT))
            self._wrouter = self._router(partial(self._on_message_for, WORKER))
            self.worker_endpoint = self._wrouter.bind(self.worker_endpoint)
        else:
            self._crouter = self._wrouter = self._router(self._on_message)
        self.endpoint = self._crouter.bind(self.endpoint)
        if not self.worker_endpoint:
            self.worker_endpoint = self.endpoint
        self.call_every(self.heartbeat, self._send_heartbeats)
        self.call_every(min(self.request_expiry / 4.0, self.heartbeat), self._expire_requests)
        log.debug("%s: serving %s (workers %s), %s framing", self.name, self.endpoint,
                  self.worker_endpoint, self.framing.name)

    def _router(self, on_message):
        router = Router(self, on_message, on_unroutable=self._on_unroutable, on_overflow=self._on_overflow,
                        max_message=frame_limit(self.max_message), max_frames=self.max_frames,
                        max_bytes=4 * frame_limit(self.max_message),
                        keys=self.curve is not None, on_taken_over=self._on_taken_over,
                        # half the fds for connections (a quarter a ROUTER with two): the rest is the process's
                        max_connections=fd_budget(0.25, 32) if self.worker_endpoint else fd_budget())
        if self.curve is not None:
            curve_server(router.socket, self.curve, self.curve_domain)
        return router

    # -- the hot path ---------------------------------------------------------
    def _on_message(self, identity, frames):
        try:
            message = self.framing.decode_for_broker(frames)
        except ProtocolError as exc:
            self._invalid(identity, exc)
            return
        if message.header is CLIENT:
            self._on_request(identity, message.service, message.body)
        else:
            self._on_worker(identity, message)

    def _on_message_for(self, header, identity, frames):
        """Two endpoints: each takes one sub-protocol only."""
        try:
            message = self.framing.decode_for_broker(frames)
        except ProtocolError as exc:
            self._invalid(identity, exc)
            return
        if message.header is not header:
            self._invalid(identity, ProtocolError("%s command on the %s endpoint" % (
                message.header.decode(), "client" if header is CLIENT else "worker")))
        elif header is CLIENT:
            self._on_request(identity, message.service, message.body)
        else:
            self._on_worker(identity, message)

    def _on_request(self, client, name, body):
        stats = self.stats
        stats["requests"] += 1
        if name.startswith(mmi.PREFIX):
            stats["mmi"] += 1
            self._crouter.send(client, self.framing.client_reply(True, name, mmi.answer(name, body, self._has_workers)))
            return
        service = self._services.get(name)
        if service is None:
            service = self._services[name] = _Service(name)
        if not service.idle and (len(service.requests) >= self.max_queue or self._queued >= self.max_queued):
            stats["rejected"] += 1
            log.debug("%s: queue full, request for %r dropped", self.name, name)
            return
        request = _Request(client, _ADDRESS(next(self._addresses)), name, body, 0.0, self._crouter.peering(client))
        if service.idle:
            self._dispatch(service.idle.popitem(last=False)[1], request)
            return
        request.deadline = _monotonic() + self.request_expiry
        service.requests.append(request)
        self._queued += 1

    def _dispatch(self, worker, request):
        worker.request = request
        self.stats["dispatched"] += 1
        # Last thing we do: a dead peer makes send() call _on_unroutable at once.
        self._wrouter.send(worker.identity, self.framing.worker_request(request.address, request.body))

    def _on_worker(self, identity, message):
        command = message.command
        worker = self._workers.get(identity)
        if command is FINAL or command is PARTIAL:
            request = worker.request if worker is not None else None
            if request is None or request.address != message.address:
                self._unexpected(identity, worker, command)
                return
            self._alive.touch(identity)
            final = command is FINAL
            if request.peering.live:
                self._crouter.send(request.client, self.framing.client_reply(final, request.service, message.body))
            else:   # another key holds the client's id now: not for it
                self.stats["replies_withheld"] += 1
            if not final:
                self.stats["partials"] += 1
                return
            self.stats["replies"] += 1
            worker.request = None
            self._crouter.release(request.peering)
            self._next(worker)
        elif command is HEARTBEAT:
            if worker is None:
                self._unexpected(identity, None, command)
            else:
                self._alive.touch(identity)
        elif command is READY:
            if worker is not None or mmi.is_mmi(message.service):
                self._unexpected(identity, worker, command)
            else:
                self._add_worker(identity, message.service, IDEMPOTENT in message.body, self._wrouter.peering(identity))
        elif command is DISCONNECT:
            if worker is not None:
                self.stats["worker_disconnects"] += 1
                self._remove_worker(worker, "it disconnected")

    # -- workers --------------------------------------------------------------
    def _add_worker(self, identity, name, idempotent, peering):
        service = self._services.get(name)
        if service is None:
            service = self._services[name] = _Service(name)
        worker = self._workers[identity] = _Worker(identity, service, idempotent, peering)
        service.workers += 1
        self._alive.touch(identity)
        if self._alive_timer is None:
            self._arm_liveness()
        self.stats["workers_ready"] += 1
        log.debug("%s: worker %r ready for %r", self.name, identity, name)
        self._next(worker)

    def _next(self, worker):
        """``worker`` is free: give it the next queued request (of a client whose peering lives), or idle it."""
        service = worker.service
        requests = service.requests
        while requests:
            request = requests.popleft()
            self._queued -= 1
            if request.peering.live:
                self._dispatch(worker, request)
                return
            self._withdrawn(request)
        service.idle[worker.identity] = worker

    def _withdrawn(self, request):
        """A queued request whose client's id another key took over: dropped unrun."""
        self.stats["requests_withdrawn"] += 1
        self._crouter.release(request.peering)

    def _remove_worker(self, worker, reason):
        """Forget a worker; re-dispatch the request it held (idempotent workers), else answer it with an error."""
        identity = worker.identity
        if self._workers.pop(identity, None) is None:
            return
        self._alive.forget(identity)
        self._wrouter.drop(identity)
        self._wrouter.release(worker.peering)
        service = worker.service
        service.idle.pop(identity, None)
        service.workers -= 1
        request, worker.request = worker.request, None
        if request is not None:
            request.attempts += 1
            request.lost_by.add(identity)
            if worker.idempotent and request.attempts < self.max_attempts:
                self.stats["redispatched"] += 1
                request.deadline = _monotonic() + self.request_expiry
                service.requests.appendleft(request)
                self._queued += 1
                while service.requests and service.idle:
                    self._next(service.idle.popitem(last=False)[1])
            else:
                self._lost(request, reason, worker.idempotent)
        self._forget_if_unused(service)

    def _lost(self, request, reason, idempotent):
        """Tell the client its request is not run again: an error reply (an MDP extension)."""
        name = request.service.decode("ascii", "replace")
        workers = len(request.lost_by)
        if idempotent:
            self.stats["poisoned"] += 1
            log.warning("%s: request for %r lost %d time(s) by %d worker(s); dropped", self.name, name,
                        request.attempts, workers)
            message = ("the request was lost %d time(s), by %d worker(s) of %r (last: %s); it is not tried again"
                       % (request.attempts, workers, name, reason))
        else:
            self.stats["lost"] += 1
            log.info("%s: worker of %r lost a request (%s); not run again (not idempotent)", self.name, name, reason)
            message = ("the worker of %r handling the request was lost (%s); a worker that is not idempotent "
                       "does not get it again" % (name, reason))
        if request.peering.live:
            self._crouter.send(request.client, self.framing.client_reply(True, request.service,
                                                                         error_body("WorkerLost", message)))
        self._crouter.release(request.peering)

    def _forget_if_unused(self, service):
        if not service.workers and not service.requests and self._services.get(service.name) is service:
            del self._services[service.name]

    def _unexpected(self, identity, worker, command):
        """A valid command the protocol does not allow here: DISCONNECT that peer."""
        self.stats["unexpected"] += 1
        log.debug("%s: unexpected %s from %r; disconnecting it", self.name, command, identity)
        self._wrouter.send(identity, self.framing.disconnect)
        if worker is not None:
            self._remove_worker(worker, "it sent %s unexpectedly" % command)

    def _invalid(self, identity, exc):
        stats = self.stats
        stats["invalid"] += 1
        if stats["invalid"] % 1000 == 1:
            log.warning("%s: invalid message from %r dropped (%s); %d so far", self.name, identity, exc,
                        stats["invalid"])
        worker = self._workers.get(identity)
        if worker is not None:
            self._remove_worker(worker, "it sent an invalid message")

    def _on_taken_over(self, identity, peering):
        """A message of another key came on ``identity``, which ``peering`` held (CURVE): end it.  A
        worker is forgotten as if it had disconnected; a client's requests are dropped or, running,
        answered to no one (``peering.live`` is False now)."""
        worker = self._workers.get(identity)
        if worker is not None and worker.peering is peering:
            self._remove_worker(worker, "another key took its routing id over")

    def _on_unroutable(self, identity, frames):
        worker = self._workers.get(identity)
        if worker is not None:  # its connection is gone: as good as dead
            self.stats["workers_lost"] += 1
            self._remove_worker(worker, "its connection is gone")
        else:
            self.stats["unroutable"] += 1

    def _on_overflow(self, identity, frames):
        self.stats["overflow"] += 1
        worker = self._workers.get(identity)
        if worker is not None:  # a worker this far behind is stuck
            self._remove_worker(worker, "it fell too far behind")

    def _has_workers(self, name):
        service = self._services.get(name)
        return service is not None and service.workers > 0

    # -- timers ---------------------------------------------------------------
    def _send_heartbeats(self):
        send, frames = self._wrouter.send, self.framing.heartbeat
        for identity in list(self._workers):
            send(identity, frames)

    def _arm_liveness(self):
        deadline = self._alive.next_deadline()
        self._alive_timer = None if deadline is None else self.call_later(
            max(0.0, deadline - _monotonic()), self._check_liveness)

    def _check_liveness(self):
        _, expired = self._alive.check()
        for identity in expired:
            worker = self._workers.get(identity)
            if worker is not None:
                self.stats["workers_expired"] += 1
                log.info("%s: worker %r silent for %.3gs; forgotten", self.name, identity,
                         self.heartbeat * self.liveness)
                self._remove_worker(worker, "it was silent for %.3gs" % (self.heartbeat * self.liveness))
        self._arm_liveness()

    def _expire_requests(self):
        now = _monotonic()
        for service in list(self._services.values()):
            if service.workers:
                continue
            requests = service.requests
            while requests and requests[0].deadline <= now:
                self._crouter.release(requests.popleft().peering)
                self._queued -= 1
                self.stats["expired"] += 1
            self._forget_if_unused(service)

    # -- commands ---------------------------------------------------------------
    @command(reply=True)
    def info(self) -> dict[str, Any]:

        """Endpoints, services (workers, idle, queued), worker count and counters."""
        return {
            "endpoint": self.endpoint,
            "worker_endpoint": self.worker_endpoint,
            "framing": self.framing.name,
            "services": {s.name.decode("ascii"): {"workers": s.workers, "idle": len(s.idle),
                                                   "queued": len(s.requests)}
                         for s in self._services.values()},
            "workers": len(self._workers),
            "queued": self._queued,
            "counters": dict(self.stats),
        }
