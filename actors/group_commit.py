"""GroupCommit: a journal's write and fsync policy, driven from an actor's loop.

The owner of a :class:`~zactors.actors.journal.Journal` (a ZEPS broker, a
Clone server, :class:`~zactors.actors.journal_actor.JournalActor`) appends in
its loop and calls :meth:`GroupCommit.kick`; the records appended in one
round are handed to the OS together at the start of the next round
(``write()``, fast, in the loop) and fsynced off the hub on its threadpool
(``Actor.run_in_thread``), so the loop keeps serving while the disk syncs:

- ``fsync="interval"`` (default): an fsync every ``interval`` seconds
  (default 0.1) when something new was written, like Redis ``appendfsync
  everysec`` but ten times tighter;
- ``fsync="batch"``: an fsync after every write; writes made while one fsync
  runs are covered by the next (group commit);
- ``fsync="never"``: the OS decides (records still survive a ``kill -9``
  once written).

:meth:`when_written` / :meth:`when_synced` run a callback once everything
appended so far (or up to a given sequence) is written / fsynced; with
``on_error`` a waiter is told of a failed write instead of waiting for the
retry (a ZEPS broker answers PING with PING-OK or INVALID that way).
A failed write is reported to ``on_error`` (once) and retried every ``retry``
seconds (the journal refuses appends meanwhile); a failed fsync is final.

Everything here runs in the actor's greenlet; nothing is thread-safe.
"""
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .journal import Journal, JournalError

if TYPE_CHECKING:
    from .actor import Actor
    from .reactor import Timer

__all__ = ["GroupCommit", "FSYNC_POLICIES"]

log = logging.getLogger(__name__)

FSYNC_POLICIES = ("interval", "batch", "never")


def _first(item):
    return item[0]


class GroupCommit:
    """Write and fsync ``journal`` for ``actor`` (see the module docstring).

    ``on_written(seq)`` / ``on_synced(seq)`` run in the loop after each
    write / fsync; ``on_error(exc)`` after a failed one.  Call :meth:`start`
    from the actor's ``setup`` and :meth:`stop` from its ``teardown``.
    """

    __slots__ = ("actor", "journal", "fsync", "interval", "retry", "on_written", "on_synced", "on_error",
                 "_write_timer", "_sync_timer", "_syncing", "_sync_again", "_wait_written", "_wait_synced",
                 "_stopped", "_failing")

    def __init__(self, actor: Actor, journal: Journal, *, fsync: str = "interval", interval: float = 0.1,
                 retry: float = 1.0, on_written: Callable[[int], object] | None = None,
                 on_synced: Callable[[int], object] | None = None,
                 on_error: Callable[[JournalError], object] | None = None) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError("fsync must be one of %s, not %r" % (", ".join(FSYNC_POLICIES), fsync))
        if fsync == "interval" and not interval > 0:
            raise ValueError("fsync interval must be > 0, got %r" % (interval,))
        self.actor = actor
        self.journal = journal
        self.fsync = fsync
        self.interval = interval
        self.retry = retry
        self.on_written = on_written
        self.on_synced = on_synced
        self.on_error = on_error
        self._write_timer: Timer | None = None
        self._sync_timer: Timer | None = None
        self._syncing = False
        self._sync_again = False
        self._wait_written: deque[tuple[int, Callable[[int], object], Any]] = deque()    # (seq, callback, on_error), seq non-decreasing
        self._wait_synced: deque[tuple[int, Callable[[int], object], Any]] = deque()
        self._stopped = False
        self._failing = False           # a write failed and is being retried

    def start(self) -> None:
        if self.fsync == "interval":
            self._sync_timer = self.actor.call_every(self.interval, self._sync)

    def kick(self) -> None:
        """Records were appended: write them at the start of the next round."""
        if self._write_timer is None and not self._stopped:
            self._write_timer = self.actor.call_later(0, self._write)

    def when_written(self, callback: Callable[[int], object], seq: int | None = None,
                     on_error: Callable[[JournalError], object] | None = None) -> None:
        """``callback(written_seq)`` once every record up to ``seq`` (default:
        all appended so far) is written; runs now if they are.  With
        ``on_error``, a failed write calls ``on_error(exc)`` instead and the
        wait ends; without, the wait lasts until a retried write succeeds."""
        self._wait(self._wait_written, self.journal.written_seq, callback, seq, on_error)

    def when_synced(self, callback: Callable[[int], object], seq: int | None = None) -> None:
        """``callback(synced_seq)`` once every record up to ``seq`` (default:
        all appended so far) is fsynced."""
        self._wait(self._wait_synced, self.journal.synced_seq, callback, seq, None)
        if self.fsync != "batch":
            self._sync_soon()

    def _wait(self, queue, done, callback, seq, on_error):
        target = self.journal.last_seq if seq is None else min(seq, self.journal.last_seq)
        if target <= done:
            callback(done)
            return
        if queue and queue[-1][0] > target:  # keep the queue sorted (an explicit seq may be lower)
            items = sorted([*queue, (target, callback, on_error)], key=_first)
            queue.clear()
            queue.extend(items)
        else:
            queue.append((target, callback, on_error))
        self.kick()

    def _sync_soon(self):
        """A durable flush under "interval" or "never": fsync after the next write."""
        self._sync_again = True

    def _write(self):
        self._write_timer = None
        try:
            seq = self.journal.write()
        except JournalError as exc:
            if not self._failing:       # report once per failure, not once per retry
                self._failing = True
                log.error("journal write failed: %s (retrying every %ss)", exc, self.retry)
                if self.on_error is not None:
                    self.on_error(exc)
            if self._wait_written:  # waiters that asked to hear of a failure hear of it now
                waiting = self._wait_written
                self._wait_written = deque(w for w in waiting if w[2] is None)
                for _, _, failed in waiting:
                    if failed is not None:
                        failed(exc)
            if self._write_timer is None and not self._stopped and not self.journal.broken:
                self._write_timer = self.actor.call_later(self.retry, self._write)
            return
        if self._failing:
            self._failing = False
            log.info("journal writes resumed (written up to %d)", seq)
        if self.on_written is not None:
            self.on_written(seq)
        self._release(self._wait_written, seq)
        if self.fsync == "batch" or self._sync_again:
            self._sync()

    def _sync(self):
        journal = self.journal
        if self._syncing:
            self._sync_again = True
            return
        self._sync_again = False
        if journal.written_seq <= journal.synced_seq or journal.closed:
            return
        self._syncing = True
        self.actor.run_in_thread(journal.sync, on_done=self._synced)

    def _synced(self, seq, error):
        self._syncing = False
        if error is not None:
            log.error("journal fsync failed: %s", error)
            if self.on_error is not None:
                self.on_error(error)
            return
        if self.on_synced is not None:
            self.on_synced(seq)
        self._release(self._wait_synced, seq)
        if self._sync_again and not self._stopped:
            self._sync()

    @staticmethod
    def _release(queue, seq):
        while queue and queue[0][0] <= seq:
            queue.popleft()[1](seq)

    def stop(self, sync: bool = True) -> None:

        """Cancel the timers; write (and fsync, blocking) what is left.  For teardown."""
        self._stopped = True
        for timer in (self._write_timer, self._sync_timer):
            if timer is not None:
                timer.cancel()
        self._write_timer = self._sync_timer = None
        if self.journal.closed:
            return
        try:
            self.journal.write()
            if sync and self.fsync != "never":
                self.journal.sync()
        except JournalError as exc:
            log.error("journal: final write failed: %s", exc)
