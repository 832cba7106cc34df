"""Cooperative tasks: long work inside an actor, a bounded slice per round.

A task wraps a generator (any iterator will do).  The reactor that runs it
(see :meth:`zactors.actors.reactor.Reactor.start_task`) calls ``next()`` on
it repeatedly, after the round's sockets, descriptors and timers, until the
round's task slice is spent, then moves on: every yield is a point where the
actor's pipe, its sockets and its timers get their turn.  The value yielded
is ignored; the generator's ``return`` value becomes :attr:`Task.result`.

A task ends when its generator returns (``error`` None), raises (``error``
holds the exception) or is cancelled (``cancelled`` True); then
``on_done(task)`` runs in the actor's loop.  A task that raises and has no
``on_done`` is a bug: the exception leaves the reactor and the actor dies,
as for a handler.

A task that must wait for something other than time (room on a socket, a
reply) calls :meth:`Task.pause` and is resumed by whatever handler sees the
condition change; a paused task costs nothing and does not keep the reactor
from parking.

Nothing here is safe across OS threads: use a task from its actor's loop
(to reach it from another thread, ``Reactor.post`` a call that does).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .reactor import Reactor

__all__ = ["Task"]


class Task:
    """A running cooperative task.  Made by ``start_task``, not directly."""

    __slots__ = ("_next", "work", "on_done", "_reactor", "done", "cancelled", "paused", "error", "result",
                 "_active")

    def __init__(self, reactor: Reactor, work: Iterator[Any], on_done: Callable[[Task], object] | None) -> None:
        try:
            self._next = work.__next__
        except AttributeError:
            raise TypeError("a task is a generator (or another iterator), not %s" % type(work).__name__) from None
        self.work = work
        self.on_done: Callable[[Task], object] | None = on_done
        self._reactor = reactor
        #: True once the task has ended (finished, failed or cancelled)
        self.done = False
        #: True if :meth:`cancel` ended it
        self.cancelled = False
        #: True while :meth:`pause` holds it
        self.paused = False
        #: the exception that ended it, or None
        self.error: BaseException | None = None
        #: the generator's return value, once it has returned
        self.result: Any = None
        self._active = False  # in the reactor's run queue

    def cancel(self) -> bool:
        """End the task now: close its generator (its ``finally`` runs), then ``on_done``.

        False if it had ended already.  A task may cancel itself: its
        generator is then closed as soon as the current step returns.
        """
        if self.done:
            return False
        self.done = self.cancelled = True
        self._reactor._unschedule(self)
        if not getattr(self.work, "gi_running", False):
            self._close()
        self._ended()
        return True

    def pause(self) -> None:
        """Stop advancing the task until :meth:`resume` (no-op once ended)."""
        if not self.done and not self.paused:
            self.paused = True
            self._reactor._unschedule(self)

    def resume(self) -> None:
        """Advance the task again from the next round, waking the reactor if it parked."""
        if self.paused and not self.done:
            self.paused = False
            self._reactor._schedule(self)

    def _close(self):
        close = getattr(self.work, "close", None)
        if close is not None:
            close()

    def _ended(self):
        on_done = self.on_done
        if on_done is not None:
            self.on_done = None
            on_done(self)

    def __repr__(self) -> str:

        state = ("cancelled" if self.cancelled else "failed" if self.error is not None else "done" if self.done
                 else "paused" if self.paused else "running")
        return "<Task %r %s>" % (self.work, state)
