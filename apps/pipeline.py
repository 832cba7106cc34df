"""A task pipeline on scatter-gather: ventilator -> workers -> sink.

The classic parallel task pattern: a :class:`Ventilator` spreads tasks over
workers through a :class:`~patterns.scatter.Scatter` (round-robin among the
workers whose queue has room, so a faster worker takes more); each
:class:`Worker` takes tasks from a Gather, processes them and scatters the
results to a :class:`Sink`, which gathers them fairly from every worker.

Write a worker by subclassing::

    class Squarer(Worker):
        def process(self, payload):           # bytes in, bytes (or None) out
            return str(int(payload) ** 2).encode()

    worker = Squarer(tasks_endpoint, results_endpoint, threads=2)

``secure`` (on all three) is a function applied to each socket before it
binds or connects, e.g. ``lambda s: curve_server(s, keys)`` from
:mod:`actors.auth` for the ventilator and sink and ``lambda s:
curve_client(s, worker_keys, server_public)`` for workers.  ``native`` (on
all three; default False) chooses the scatter-gather wire: the PUSH/PULL
emulation, or libzmq's draft SCATTER/GATHER (see :mod:`patterns.scatter`);
all the roles of one pipeline must choose alike.

A worker is an actor (``$STATS`` answers its ``done``/``failed`` counters;
``destroy()`` stops it).  It watches its two connections until their
handshakes end: a ventilator or sink that refuses the connection (a CURVE
key it does not accept, a wrong server key, CURVE on one side only) gives
the event ``REFUSED`` with the reason in words.  ``process`` runs in ``concurrency`` greenlets of the
actor's thread (for I/O-bound work) plus ``threads`` OS threads (for work that
releases the GIL); all share the worker's one Gather and one Scatter, which
are thread-safe.  An exception in ``process`` is logged and counted and the
worker goes on.

Wire: a task is one msgpack frame ``[task_id, payload]``, a result
``[task_id, worker_name, payload]``; malformed frames are counted and
dropped, never fatal.
"""
import itertools
import logging
import threading
import uuid
from collections import namedtuple

import gevent
import msgpack
import zmq

from gevent.monkey import get_original

from zactors.actors import Actor
from zactors.actors.monitor import HANDSHAKE, Monitor, Peers, describe, describe_accepted
from zactors.patterns.scatter import Closed, Gather, NoMessage, Scatter

__all__ = ["Ventilator", "Worker", "Sink", "Result", "encode_task", "decode_task",
           "encode_result", "decode_result"]

log = logging.getLogger(__name__)

_pack = msgpack.Packer(use_bin_type=True).pack


# -- wire ---------------------------------------------------------------------
def encode_task(task_id, payload):
    return _pack([task_id, payload])


def decode_task(frame):
    """``(task_id, payload)``; ValueError when malformed."""
    return _decode(frame, (int, bytes), "task")


def encode_result(task_id, worker, payload):
    return _pack([task_id, worker, payload])


def decode_result(frame):
    """``(task_id, worker_name, payload)``; ValueError when malformed."""
    return _decode(frame, (int, str, bytes), "result")


def _decode(frame, types, what):
    try:
        message = msgpack.unpackb(frame, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ValueError("%s is not msgpack: %s" % (what, exc)) from None
    if (type(message) is not list or len(message) != len(types)
            or any(type(value) is not kind for value, kind in zip(message, types))):
        raise ValueError("malformed %s: %r" % (what, message))
    return tuple(message)


# -- ventilator -----------------------------------------------------------------
class Ventilator:
    """Binds a Scatter and sends tasks to the workers connected.

    Distribution: each worker has a bounded queue (``queue_limit``); a task
    goes to the next worker, round-robin, among those whose queue has room,
    so a faster worker takes more tasks than a slow one.

    :meth:`wait_for_workers` blocks until ``n`` workers have connected (so
    the first tasks do not all go to the first one).  A worker counts once
    its ZeroMQ handshake succeeds (:class:`actors.monitor.Peers`): an HTTP
    client, a port scan or a worker whose key was refused never counts.
    The socket's events are watched from creation until that wait ends or
    the first task is sent (libzmq's I/O thread blocks on an event nobody
    reads, so the watch is kept short).  :meth:`send` is thread-safe like
    the Scatter; :meth:`wait_for_workers` and :meth:`close` belong to the
    creating thread.
    """

    def __init__(self, endpoint="tcp://127.0.0.1:*", queue_limit=1000, secure=None, native=False):
        self.scatter = Scatter(queue_limit=queue_limit, linger=None, native=native)
        if secure is not None:
            secure(self.scatter)
        self._watch_lock = get_original("_thread", "allocate_lock")()
        self._monitor = Monitor(self.scatter, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | HANDSHAKE)
        #: the workers' handshakes while watched (``peers.count`` connected, ``peers.failed`` refused)
        self.peers = Peers()
        try:
            self.endpoint = self.scatter.bind(endpoint)
        except BaseException:
            self.close()
            raise
        self._ids = itertools.count()

    @property
    def workers(self):
        """Workers connected when the watch ended (see :meth:`wait_for_workers`)."""
        return self.peers.count

    def wait_for_workers(self, n, timeout=None):
        """Block (this greenlet) until ``n`` workers are connected; False on timeout.

        Ends the watch on connections: call it once, before sending.
        """
        if self._monitor is None:
            raise RuntimeError("wait_for_workers works once, before the first task is sent")
        loop = gevent.get_hub().loop
        deadline = None if timeout is None else loop.now() + timeout
        try:
            while self.peers.count < n:
                remaining = None if deadline is None else deadline - loop.now()
                if remaining is not None and remaining <= 0:
                    return False
                event = self._monitor.recv(remaining)
                if event is None:
                    return False
                self.peers.feed(event)
                if event.event & HANDSHAKE and event.event != zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    log.warning("ventilator: %s", describe_accepted(event))
            return True
        finally:
            self._stop_watch()

    def _stop_watch(self):
        with self._watch_lock:  # the first sends may come from several threads at once
            monitor, self._monitor = self._monitor, None
        if monitor is not None:
            monitor.close()  # stops the monitor first, or libzmq's I/O thread blocks on the next event

    def send(self, payload, timeout=None):
        """Send one task (bytes); returns its id.  Blocks while every worker queue is full."""
        if self._monitor is not None:
            self._stop_watch()
        task_id = next(self._ids)  # atomic in CPython
        self.scatter.send(encode_task(task_id, payload), timeout=timeout)
        return task_id

    @property
    def sent(self):
        return self.scatter.sent

    def close(self):
        self._stop_watch()
        self.scatter.close()


# -- worker ---------------------------------------------------------------------
class Worker(Actor):
    """Takes tasks, runs :meth:`process`, scatters results.  Subclass it.

    Commands: ``$STATS`` (reply: ``done``, ``failed``, ``malformed``,
    ``refused``).  Events: ``REFUSED reason`` (a connection was refused:
    see the module docstring).
    """

    def __init__(self, tasks, results, *, concurrency=1, threads=0, name=None, queue_limit=100, secure=None,
                 native=False):
        self.secure = secure
        self.native = native
        self.tasks_endpoint = tasks
        self.results_endpoint = results
        self.concurrency = concurrency
        self.threads = threads
        self.queue_limit = queue_limit
        self.name = name or "%s-%s" % (type(self).__name__.lower(), uuid.uuid4().hex[:6])

    def process(self, payload):
        """Turn a task payload (bytes) into a result payload (bytes), or None for no result."""
        raise NotImplementedError

    def setup(self):
        self.tasks = Gather(queue_limit=self.queue_limit, native=self.native)
        self.results = Scatter(queue_limit=self.queue_limit, linger=None, native=self.native)
        if self.secure is not None:
            self.secure(self.tasks)
            self.secure(self.results)
        self._watches = {}
        for sock, endpoint, peer in ((self.tasks, self.tasks_endpoint, "the ventilator"),
                                     (self.results, self.results_endpoint, "the sink")):
            watch = Monitor(sock, HANDSHAKE)
            self._watches[watch.pair] = watch
            self.add_reader(watch.pair, lambda frames, watch=watch, peer=peer, endpoint=endpoint:
                            self._on_handshake(watch, frames, "%s at %s" % (peer, endpoint)))
            sock.connect(endpoint)
        self._count_lock = get_original("_thread", "allocate_lock")()
        self._greenlets = [gevent.spawn(self._work) for _ in range(self.concurrency)]
        self._threads = [threading.Thread(target=self._work, name="%s-%d" % (self.name, i), daemon=True)
                         for i in range(self.threads)]
        for thread in self._threads:
            thread.start()

    def _on_handshake(self, watch, frames, peer):
        event = Monitor.decode(frames)
        if event.event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._unwatch(watch)
        elif event.event != zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL or self.secure is not None:
            self._unwatch(watch)
            reason = describe(event, peer, curve=self.secure is not None)
            log.error("%s: %s", self.name, reason)
            self.stats["refused"] += 1
            self.emit("REFUSED", reason)

    def _unwatch(self, watch):
        if self._watches.pop(watch.pair, None) is not None:
            self.remove_reader(watch.pair)
            watch.close()

    def teardown(self):
        for watch in list(getattr(self, "_watches", {}).values()):
            self._unwatch(watch)
        # Closing wakes every loop, blocked on a task or on a full result
        # queue, with Closed; queued results are still flushed (linger).
        self.tasks.close()
        self.results.close()
        gevent.killall(getattr(self, "_greenlets", ()))
        for thread in getattr(self, "_threads", ()):
            thread.join(5)

    def _work(self):
        name = self.name
        recv, send, process = self.tasks.recv, self.results.send, self.process
        while True:
            try:
                frame = recv()
                task_id, payload = decode_task(frame)
            except Closed:
                return
            except ValueError as exc:
                self._count("malformed")
                log.debug("%s: %s", name, exc)
                continue
            try:
                result = process(payload)
            except Exception:
                self._count("failed")
                log.exception("%s: task %d failed", name, task_id)
                continue
            self._count("done")
            if result is not None:
                try:
                    send(encode_result(task_id, name, result))
                except Closed:
                    return


    def _count(self, what):
        with self._count_lock:  # the loops may run in several OS threads
            self.stats[what] += 1


# -- sink -----------------------------------------------------------------------
Result = namedtuple("Result", "task_id worker payload")
Result.__doc__ = "One result at the sink: the task's id, the worker's name, the result payload."


class Sink:
    """Binds a Gather and collects results from every worker."""

    def __init__(self, endpoint="tcp://127.0.0.1:*", queue_limit=1000, secure=None, native=False):
        self.gather = Gather(queue_limit=queue_limit, native=native)
        if secure is not None:
            secure(self.gather)
        try:
            self.endpoint = self.gather.bind(endpoint)
        except BaseException:
            self.gather.close()
            raise
        self.malformed = 0

    def results(self, count, timeout=None, on_result=None):
        """Yield ``count`` :class:`Result` s; stops early (after logging) if none comes for ``timeout`` s."""
        got = 0
        while got < count:
            try:
                frame = self.gather.recv(timeout=timeout)
            except NoMessage:
                log.warning("sink: no result for %ss; %d of %d received", timeout, got, count)
                return
            try:
                result = Result(*decode_result(frame))
            except ValueError as exc:
                self.malformed += 1
                log.debug("sink: %s", exc)
                continue
            got += 1
            if on_result is not None:
                on_result(result)
            yield result

    def close(self):
        self.gather.close()
