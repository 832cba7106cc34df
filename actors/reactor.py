"""The reactor: an actor's sockets, descriptors, timers, posts and tasks in one greenlet.

The round contract (see :meth:`Reactor.run`): one clock reading per round;
every ready socket drained until no message waits (at most ``DRAIN_CAP``
each); readable plain descriptors served; only the timers due at the
round's reading fired (one armed or re-armed during the round waits for the
next, so no handler can keep the loop from the hub); posted calls run;
cooperative tasks advanced ``TASK_SLICE`` seconds.  Before it parks until a
``ZMQ_FD`` edge, a descriptor, a post or the nearest timer deadline
(monotonic clock), every reader's ``EVENTS`` is checked as ``zmq_poll``
does, so a send that ate an edge loses no wake-up.

Only :meth:`Reactor.post` is safe across OS threads: everything else belongs
to the greenlet (and so the thread) that runs the reactor.
"""
from __future__ import annotations

import heapq
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import zmq
from gevent import getcurrent
from gevent.hub import Waiter, get_hub
from gevent.monkey import get_original

from .sockets import POLLIN, Socket
from .speedups import events, recv_message
from .task import Task

__all__ = ["Reactor", "Timer", "Task", "DRAIN_CAP", "TASK_SLICE"]

#: messages drained from one socket before the reactor yields to other greenlets
DRAIN_CAP = 64
#: cancelled timers tolerated in the heap before it is compacted (then: once they are half of it)
COMPACT_MIN = 64
#: seconds of task steps per round, shared by the running tasks (each gets one step at least)
TASK_SLICE = 0.001

_monotonic = time.monotonic
_get_ident = get_original("_thread", "get_ident")

log = logging.getLogger(__name__)


def _thread_done(on_done, result, error):
    if on_done is not None:
        on_done(result, error)
    elif error is not None:
        raise error


class Timer:
    """A reactor timer; ``cancel()`` it to stop.  Not for direct construction."""

    __slots__ = ("deadline", "interval", "handler", "args", "cancelled", "_reactor")

    def __init__(self, deadline: float, interval: float | None, handler: Callable[..., object],
                 args: tuple[Any, ...], reactor: Reactor | None) -> None:
        self.deadline = deadline
        self.interval = interval
        self.handler = handler
        self.args = args
        self.cancelled = False
        self._reactor = reactor  # None once it can no longer fire

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            reactor, self._reactor = self._reactor, None
            if reactor is not None:
                reactor._timer_cancelled()


def _recv_zero_copy(sock, _handle, _max_frames, _max_bytes):
    """One whole message as ``zmq.Frame`` objects (their message properties readable), None, or a
    refusal (a bool, as :func:`~.speedups.recv_message`)."""
    try:
        return sock.recv_frames(False, True)
    except zmq.Again:
        return None


class _Reader:
    __slots__ = ("socket", "handler", "watcher", "removed", "recv", "on_refused")

    def __init__(self, socket, handler, watcher, recv, on_refused):
        self.socket = socket
        self.handler = handler
        self.watcher = watcher
        self.removed = False
        self.recv = recv
        self.on_refused = on_refused


class _FdReader:
    __slots__ = ("fd", "handler", "watcher", "ready")

    def __init__(self, fd, handler, watcher):
        self.fd = fd
        self.handler = handler
        self.watcher = watcher
        self.ready = False


class Reactor:
    """Run socket, descriptor and timer handlers, posted calls and tasks in the calling greenlet.

    ``handler(frames)`` is called for every whole message that arrives on a
    registered socket; ``handler(*args)`` for timers; see :meth:`run` for
    the order within a round.  The wait between rounds is bounded by the
    nearest timer deadline (monotonic clock).  A handler (or posted call, or
    task without ``on_done``) that raises stops the reactor and the
    exception propagates out of :meth:`run`.
    """

    def __init__(self, drain_cap: int = DRAIN_CAP, task_slice: float = TASK_SLICE) -> None:
        self._readers: list[_Reader] = []
        self._fds: list[_FdReader] = []
        self._timers: list[tuple[float, int, Timer]] = []  # heap of (deadline, seq, Timer)
        self._cancelled = 0  # cancelled timers still in the heap
        self._seq = 0  # arming order: breaks deadline ties, and tells this round's timers from the next
        self._waiter = None
        self._wake_queued = False
        self._running = False
        self._fresh = False
        self._tasks: deque[Task] = deque()  # running (not paused) tasks, in turn order
        self._posted: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()  # (func, args) from post(), any thread
        # ref=False: a reactor waiting for posts alone must not keep the hub alive
        hub = get_hub()
        self._thread = hub.thread_ident  # posts from it need no async watcher
        self._async = hub.loop.async_(ref=False)
        self._async.start(self._wake)
        self.drain_cap = drain_cap
        self.task_slice = task_slice

    # -- registration -------------------------------------------------------
    def add_reader(self, socket: Socket, handler: Callable[[list[Any]], object], copy: bool = True,
                   on_refused: Callable[[], object] | None = None) -> None:
        """Call ``handler(frames)`` for each message on ``socket``.

        ``frames`` are bytes (the C receive when built); with ``copy=False``
        they are ``zmq.Frame`` objects, slower but carrying the message
        properties (``frame.get("User-Id")``, the ZAP identity) that libzmq
        gives only to such a receive.  A message over the socket's
        ``max_frames``/``max_bytes`` (:func:`~.sockets.limit_size`) is dropped
        unread and ``on_refused()`` called instead.
        """
        if not isinstance(socket, Socket):
            raise TypeError("reactor sockets must be zactors.actors.sockets.Socket, "
                            "created with Actor.socket() or context().socket(type, Socket)")
        self.remove_reader(socket)
        watcher = get_hub().loop.io(socket.getsockopt(zmq.FD), 1)
        watcher.start(self._wake)
        self._readers.append(_Reader(socket, handler, watcher, recv_message if copy else _recv_zero_copy,
                                     on_refused))
        # Messages may wait already, their ZMQ_FD edge long gone: go round once.
        self._fresh = True
        self._wake()

    def remove_reader(self, socket: Socket) -> bool:
        """Stop reading ``socket`` (safe mid-drain); False if it was not read."""
        for reader in self._readers:
            if reader.socket is socket:
                reader.removed = True  # a handler may remove (and close) mid-drain
                reader.watcher.close()
                self._readers.remove(reader)
                return True
        return False

    def add_fd(self, fd: int, handler: Callable[[], object]) -> None:
        """Call ``handler()`` when the plain file descriptor ``fd`` is readable.

        For non-ZeroMQ sockets (UDP, pipes).  Level-triggered: whatever the
        handler leaves unread wakes it again on the next round.
        """
        self.remove_fd(fd)
        watcher = get_hub().loop.io(fd, 1)
        entry = _FdReader(fd, handler, watcher)
        watcher.start(self._fd_ready, entry)
        self._fds.append(entry)

    def remove_fd(self, fd: int) -> bool:
        """Stop watching ``fd``; False if it was not watched."""
        for entry in self._fds:
            if entry.fd == fd:
                entry.watcher.close()
                self._fds.remove(entry)
                return True
        return False

    def _fd_ready(self, entry):
        entry.ready = True
        self._wake()

    def call_later(self, delay: float, handler: Callable[..., object], *args: Any) -> Timer:
        """Run ``handler(*args)`` once after ``delay`` seconds."""
        return self._push(Timer(_monotonic() + delay, None, handler, args, self))

    def call_every(self, interval: float, handler: Callable[..., object], *args: Any) -> Timer:
        """Run ``handler(*args)`` every ``interval`` seconds (first after one interval)."""
        if interval <= 0:
            raise ValueError("interval must be positive")
        return self._push(Timer(_monotonic() + interval, interval, handler, args, self))

    def _timer_cancelled(self):
        """Cancelled timers stay in the heap until popped; compact it once they are most of it."""
        self._cancelled += 1
        timers = self._timers
        if self._cancelled > COMPACT_MIN and self._cancelled * 2 > len(timers):
            timers[:] = [entry for entry in timers if not entry[2].cancelled]  # in place: run() holds it
            heapq.heapify(timers)
            self._cancelled = 0

    def _push(self, timer):
        self._seq += 1
        timers = self._timers
        heapq.heappush(timers, (timer.deadline, self._seq, timer))
        if timers[0][2] is timer:  # a nearer deadline than the one a parked reactor waits for
            self._wake()
        return timer

    # -- tasks --------------------------------------------------------------
    def start_task(self, work: Iterator[Any], on_done: Callable[[Task], object] | None = None) -> Task:
        """Advance the generator ``work`` a bounded slice per round; returns its :class:`Task`.

        Steps run after the round's sockets, descriptors and timers, round
        robin across tasks, ``task_slice`` seconds a round in all (one step
        per task at least); while a task can run, the reactor does not park.
        ``on_done(task)`` runs in this loop when the task ends.  A task that
        raises with no ``on_done`` stops :meth:`run` with its exception.
        """
        task = Task(self, work, on_done)
        self._schedule(task)
        return task

    def _schedule(self, task):
        if not task._active:
            task._active = True
            self._tasks.append(task)
            self._wake()

    def _unschedule(self, task):
        if task._active:
            task._active = False
            self._tasks.remove(task)

    def _run_tasks(self):
        """One turn of the task queue: each task steps until its share of the slice is spent."""
        tasks = self._tasks
        n = len(tasks)
        clock = _monotonic
        end = clock() + self.task_slice
        share = self.task_slice / n
        for _ in range(n):
            if not tasks:
                return
            task = tasks[0]
            step = task._next
            turn_end = min(end, clock() + share)
            try:
                while True:
                    step()
                    if tasks and tasks[0] is task:
                        if clock() >= turn_end or not self._running:
                            tasks.rotate(-1)
                            break
                        continue
                    # it paused or cancelled itself (or another task did it)
                    if task.done:
                        task._close()  # cancelled inside its own step: close it now
                    break
            except StopIteration as stop:
                self._task_ended(task, stop.value, None)
            except Exception as exc:
                if task.done:  # cancelled itself, then raised
                    log.error("task %r raised after it was cancelled: %r", task, exc)
                elif task.on_done is None:
                    self._task_ended(task, None, exc)
                    raise
                else:
                    self._task_ended(task, None, exc)
            if not self._running or clock() >= end:
                return

    def _task_ended(self, task, result, error):
        self._unschedule(task)
        if task.done:  # cancelled during the step that then finished
            return
        task.done = True
        task.result = result
        task.error = error
        task._ended()

    # -- background work ----------------------------------------------------
    def post(self, func: Callable[..., object], *args: Any) -> None:
        """Run ``func(*args)`` in this reactor's loop, in its next round.

        Safe from any OS thread and any greenlet: it never blocks, and wakes
        the reactor if it parked.  Posted calls run in order, after the
        round's timers; one that raises stops :meth:`run`, as a handler
        would.  Calls posted after :meth:`close` are dropped.
        """
        self._posted.append((func, args))  # deque.append is atomic
        if _get_ident() == self._thread:
            # Our own thread (an actor's parent or child, say): a hub callback wakes
            # us, without the async watcher's system calls and loop iteration.
            if self._waiter is not None and not self._wake_queued:
                self._wake_queued = True
                get_hub().loop.run_callback(self._wake_from_hub)
            return
        watcher = self._async
        if watcher is not None:
            try:
                watcher.send()  # libev's ev_async_send: safe from any thread
            except (AttributeError, ValueError):  # closed under us by the loop's thread
                pass

    def run_in_thread(self, func: Callable[..., Any], *args: Any,
                      on_done: Callable[[Any, BaseException | None], object] | None = None) -> None:
        """Run the blocking ``func(*args)`` on the hub's threadpool.

        ``on_done(result, error)`` then runs in this loop (``error`` is the
        exception ``func`` raised, or None).  Without ``on_done`` an error
        stops :meth:`run`, as a handler's would.  Parks the calling greenlet
        only while every thread of the pool is busy (``get_hub().threadpool``,
        ``maxsize`` threads).  Call it from this reactor's thread.
        """
        post = self.post

        def call():
            try:
                result = func(*args)
            except Exception as exc:
                post(_thread_done, on_done, None, exc)
            else:
                post(_thread_done, on_done, result, None)

        get_hub().threadpool.spawn(call)

    def _run_posted(self):
        """Run the calls posted before this round (later ones wait for the next)."""
        posted = self._posted
        for _ in range(len(posted)):
            func, args = posted.popleft()
            func(*args)
            if not self._running:
                return

    # -- running ------------------------------------------------------------
    def stop(self) -> None:
        """Make :meth:`run` return after the current handler."""
        self._running = False
        self._wake()

    def _wake(self, *_):
        waiter = self._waiter
        if waiter is not None:
            hub = get_hub()
            if getcurrent() is not hub:
                # Waiter.switch is for the hub only; let it do the waking (once).
                if not self._wake_queued:
                    self._wake_queued = True
                    hub.loop.run_callback(self._wake_from_hub)
                return
            self._waiter = None
            waiter.switch(None)

    def _wake_from_hub(self):
        self._wake_queued = False
        self._wake()

    def run(self) -> None:
        """Serve sockets, timers, posts and tasks until :meth:`stop`.

        One round: read the clock once; drain each ready socket (``drain_cap``
        messages at most); serve ready descriptors; fire the timers due at
        that reading (a timer armed or re-armed during the round waits for
        the next); run the calls posted before the round; advance the tasks
        a slice.  Then park until a wake-up, unless work is left or a
        reader's ``EVENTS`` already says readable (a send in a handler can
        eat a ``ZMQ_FD`` edge); if it does not park, it lets the hub run
        one full loop iteration (I/O and every due gevent timer) first.
        """
        self._running = True
        cap = self.drain_cap
        loop = get_hub().loop
        readers = self._readers
        fds = self._fds
        timers = self._timers
        posted = self._posted
        tasks = self._tasks
        # a zero timer yields one full libev iteration (gevent.sleep(0) may
        # not poll for 50 callbacks: a busy reactor would starve the hub)
        tick = loop.timer(0)
        try:
            while self._running:
                now = _monotonic()
                busy = False
                self._fresh = False
                for reader in tuple(readers):
                    if reader.removed:
                        continue
                    # Drain to "none waiting" (that also re-reads the FD edge a
                    # handler's send may have consumed), at most `cap` a round.
                    sock = reader.socket
                    handle = sock.handle
                    handler = reader.handler
                    recv = reader.recv
                    max_frames = sock.max_frames
                    max_bytes = sock.max_bytes
                    n = 0
                    while True:
                        frames = recv(sock, handle, max_frames, max_bytes)
                        if frames is None:
                            break
                        if frames.__class__ is not list:    # over the socket's bounds: dropped unread
                            if frames is False and reader.on_refused is not None:
                                reader.on_refused()
                            n += 1
                            if frames is True or n >= cap:  # more of it to drop: the others first
                                busy = True
                                break
                            continue
                        handler(frames)
                        if not self._running:
                            return
                        if reader.removed:
                            break
                        n += 1
                        if n >= cap:
                            busy = True
                            break
                if fds:
                    for entry in tuple(fds):
                        if entry.ready:
                            entry.ready = False
                            entry.handler()
                            if not self._running:
                                return
                if timers and timers[0][0] <= now:
                    self._run_timers(now)
                    if not self._running:
                        return
                if posted:
                    self._run_posted()
                    if not self._running:
                        return
                if tasks:
                    self._run_tasks()
                    if not self._running:
                        return
                if not (busy or tasks or posted or self._fresh):
                    timeout = None
                    if timers:
                        timeout = timers[0][0] - _monotonic()
                    if (timeout is None or timeout > 0) and not self._readable():
                        self._park(loop, timeout)
                        continue
                waiter = Waiter()
                tick.start(waiter.switch, None)
                try:
                    waiter.get()
                finally:
                    tick.stop()
        finally:
            self._running = False
            tick.close()

    def _readable(self):
        """True if a reader has a message waiting (its FD edge may be gone)."""
        for reader in self._readers:
            sock = reader.socket
            if events(sock, sock.handle) & POLLIN:
                return True
        return False

    def _park(self, loop, timeout):
        waiter = self._waiter = Waiter()
        timer = None
        if timeout is not None:
            timer = loop.timer(timeout)
            # update: libev's cached "now" may be stale after a long round
            timer.start(self._wake, update=True)
        try:
            waiter.get()
        finally:
            self._waiter = None
            if timer is not None:
                timer.close()

    def _run_timers(self, now):
        """Fire the timers due at ``now`` that were armed before this round."""
        timers = self._timers
        limit = self._seq  # timers (re-)armed from here on have a greater seq
        while timers:
            deadline, seq, timer = timers[0]
            if deadline > now or seq > limit:
                return
            heapq.heappop(timers)
            if timer.cancelled:
                self._cancelled -= 1
                continue
            if timer.interval is not None:
                # Skip missed ticks rather than bursting to catch up.
                timer.deadline = max(deadline + timer.interval, now)
                self._seq += 1
                heapq.heappush(timers, (timer.deadline, self._seq, timer))
            else:
                timer._reactor = None  # fired: a late cancel() has nothing to count
                timer.cancelled = True
            timer.handler(*timer.args)
            if not self._running:
                return

    def close(self) -> None:

        """Release the io watchers and close unfinished tasks' generators (their
        ``finally`` runs; ``on_done`` does not).  Sockets stay open: their owner closes them.
        """
        for reader in self._readers + self._fds:
            reader.watcher.close()
        self._readers.clear()
        self._fds.clear()
        self._timers.clear()
        self._cancelled = 0
        if self._async is not None:
            self._async.close()
            self._async = None
        self._posted.clear()
        tasks, self._tasks = self._tasks, deque()
        for task in tasks:
            task._active = False
            task.done = task.cancelled = True
            try:
                task._close()
            except Exception:
                log.exception("a task failed while closing")
