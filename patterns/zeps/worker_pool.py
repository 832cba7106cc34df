"""WorkerPool: an actor that handles a consumer group's messages, acking on success, nacking with backoff.

::

    class Billing(WorkerPool):
        def handle(self, message):        # in a greenlet of the pool (threads=True: a hub thread)
            charge(message.body)          # returns: acked; raises: nacked, delivered again later

    billing = Billing("tcp://127.0.0.1:5570", "orders", "billing", concurrency=16)
    ...
    billing.destroy()                     # stops taking messages, sends the acks noted, leaves the group

The pool is a member of ``group`` (a :class:`~.consumer.Consumer` it owns)
and runs :meth:`WorkerPool.handle` for each message, at most ``concurrency``
at once: in greenlets, or on the hub's threadpool with ``threads=True``
(for blocking code that does not cooperate with gevent).  A handler that
returns acknowledges its message; one that raises gives it back with a
NACK whose delay grows with its delivery count (``backoff`` = (first,
max) seconds, doubling), so the broker delivers it again later, and after
the group's ``max_deliver`` deliveries parks it in the dead-letter stream.
Failures are logged (at most one line a second) and counted.

Commands: ``INFO`` (reply: handled, failed, running, the consumer's counters).
The handle is an actor handle: safe from many greenlets of its thread.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import gevent
from gevent.pool import Pool

from zactors.actors.actor import Actor, command

from .consumer import Consumer, GroupMessage

__all__ = ["WorkerPool"]

log = logging.getLogger(__name__)


class WorkerPool(Actor):
    """A consumer-group member running :meth:`handle` per message.  See the module docstring."""

    def __init__(self, endpoint: str, stream: bytes | str, group: bytes | str, *, concurrency: int = 16,
                 threads: bool = False, backoff: tuple[float, float] = (0.1, 30.0), **consumer_options: Any) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.endpoint = endpoint
        self.stream = stream
        self.group = group
        self.concurrency = concurrency
        self.threads = threads
        self.backoff = backoff
        self.consumer_options = consumer_options

    def handle(self, message: GroupMessage) -> None:
        """Handle one message: return to acknowledge it, raise to have it delivered again later."""
        raise NotImplementedError("subclass WorkerPool and define handle(message)")

    def delay(self, message: GroupMessage) -> float:
        """The NACK delay after a failure of ``message`` (seconds): ``backoff`` doubling per delivery."""
        first, most = self.backoff
        return min(most, first * 2 ** (message.deliveries - 1))

    def setup(self) -> None:
        self.consumer = Consumer(self.endpoint, self.stream, self.group, **self.consumer_options)
        self._pool = Pool(self.concurrency)
        self._logged = 0.0
        self._feeder = gevent.spawn(self._feed)

    def teardown(self) -> None:
        self._feeder.kill()
        self._pool.join(timeout=5.0)  # running handlers finish (and ack) first
        self._pool.kill()
        self.consumer.destroy()

    def _feed(self):
        """Take messages while a worker is free (the pool's size bounds what runs at once)."""
        pool, spawn = self._pool, self._pool.spawn
        for message in self.consumer:
            pool.wait_available()
            spawn(self._work, message)

    def _work(self, message):
        try:
            if self.threads:
                gevent.get_hub().threadpool.apply(self.handle, (message,))
            else:
                self.handle(message)
        except gevent.GreenletExit:
            raise
        except Exception as exc:
            self.stats["failed"] += 1
            now = time.monotonic()
            if now - self._logged >= 1.0:
                self._logged = now
                log.warning("%s: message %d (delivery %d) failed: %s: %s (%d failures so far)", self.name,
                            message.seq, message.deliveries, type(exc).__name__, exc, self.stats["failed"])
            message.nack(self.delay(message))
        else:
            self.stats["handled"] += 1
            message.ack()

    @command(reply=True)
    def info(self) -> dict[str, Any]:
        """INFO (reply): messages handled, failed, running now, and the consumer's counters."""
        return {"handled": self.stats["handled"], "failed": self.stats["failed"], "running": len(self._pool),
                "consumer": dict(self.consumer.stats)}
