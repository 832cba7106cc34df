"""GroupCommit: a journal's write and fsync policy, driven from an actor's loop.

The owner of a :class:`~zactors.actors.journal.Journal` (a ZEPS broker, a
Clone server, :class:`~zactors.actors.journal_actor.JournalActor`) appends in
its loop and calls :meth:`GroupCommit.kick`; the records appended in one
round are handed to the OS together at the start of the next round
(``write()``, fast, in the loop; a write that rolls over to a new segment
fsyncs, so it runs on the threadpool) and fsynced off the hub on its
threadpool (``Actor.run_in_thread``), so the loop keeps serving while the
disk syncs:

- ``fsync="interval"`` (default): an fsync every ``interval`` seconds
  (default 0.1) when something new was written, like Redis ``appendfsync
  everysec`` but ten times tighter;
- ``fsync="batch"``: an fsync after every write; writes made while one fsync
  runs are covered by the next (group commit);
- ``fsync="never"``: the OS decides (records still survive a ``kill -9``
  once written).

Acknowledgement levels (:data:`ACK_LEVELS`, the names used everywhere):

- ``"written"``: handed to the OS.  Survives a crash of the process
  (``kill -9``), not a power loss or a kernel crash.
- ``"synced"``: an fsync covered it.  Survives a power loss too.  Under
  every policy a ``synced`` waiter is served by group commit: one fsync
  covers every record written before it, whoever waits for them.

:meth:`when` (or :meth:`when_written` / :meth:`when_synced`) runs a callback
once everything appended so far (or up to a given sequence) is at that
level; with ``on_error`` a waiter is told of a failure instead of waiting
(a ZEPS broker answers PING with PING-OK or INVALID that way).  A failed
write is reported to ``on_error`` (once) and retried every ``retry`` seconds
(the journal refuses appends meanwhile).  A failed fsync is final: the
journal stops (it logs that once), GroupCommit stops writing and syncing,
reports it to ``on_error`` once and fails every waiter that gave an
``on_error`` (the others are dropped: their records will never be acknowledged).

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

__all__ = ["GroupCommit", "FSYNC_POLICIES", "ACK_LEVELS", "WRITTEN", "SYNCED"]

log = logging.getLogger(__name__)

FSYNC_POLICIES = ("interval", "batch", "never")

#: handed to the OS: survives a crash of the process, not a power loss
WRITTEN = "written"
#: covered by an fsync: survives a power loss
SYNCED = "synced"
#: the acknowledgement levels, weakest first (see the module docstring)
ACK_LEVELS = (WRITTEN, SYNCED)


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
                 "_stopped", "_failing", "_writing", "_write_again", "_halted")

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
        self._writing = False           # a write (a segment roll) runs on the threadpool
        self._write_again = False       # records were appended meanwhile
        self._halted = False            # an fsync failed: the journal stopped for good

    def start(self) -> None:
        """Nothing to arm: under ``"interval"`` a write arms the next fsync (a timer only while something
        written waits for one, so a thousand idle journals cost the loop nothing)."""

    def kick(self) -> None:
        """Records were appended: write them at the start of the next round."""
        if self._write_timer is None and not self._stopped and not self._halted:
            self._write_timer = self.actor.call_later(0, self._write)

    @property
    def halted(self) -> bool:
        """True once an fsync failed: the journal stopped, nothing more is written."""
        return self._halted

    def when(self, level: str, callback: Callable[[int], object], seq: int | None = None,
             on_error: Callable[[JournalError], object] | None = None) -> None:
        """:meth:`when_written` or :meth:`when_synced`, by ``level`` (one of :data:`ACK_LEVELS`)."""
        if level == WRITTEN:
            self.when_written(callback, seq, on_error)
        elif level == SYNCED:
            self.when_synced(callback, seq, on_error)
        else:
            raise ValueError("ack level must be one of %s, not %r" % (", ".join(ACK_LEVELS), level))

    def when_written(self, callback: Callable[[int], object], seq: int | None = None,
                     on_error: Callable[[JournalError], object] | None = None) -> None:
        """``callback(written_seq)`` once every record up to ``seq`` (default:
        all appended so far) is written; runs now if they are.  With
        ``on_error``, a failed write calls ``on_error(exc)`` instead and the
        wait ends; without, the wait lasts until a retried write succeeds."""
        self._wait(self._wait_written, self.journal.written_seq, callback, seq, on_error)

    def when_synced(self, callback: Callable[[int], object], seq: int | None = None,
                    on_error: Callable[[JournalError], object] | None = None) -> None:
        """``callback(synced_seq)`` once every record up to ``seq`` (default:
        all appended so far) is fsynced.  With ``on_error``, a failed write or
        fsync calls ``on_error(exc)`` instead and the wait ends."""
        self._wait(self._wait_synced, self.journal.synced_seq, callback, seq, on_error)
        if self.fsync != "batch":
            self._sync_soon()

    def _wait(self, queue, done, callback, seq, on_error):
        target = self.journal.last_seq if seq is None else min(seq, self.journal.last_seq)
        if target <= done:
            callback(done)
            return
        if self._halted:
            if on_error is not None:
                on_error(self.journal._stopped())
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
        if self._halted:
            return
        if self._writing:               # a roll is being written on the threadpool
            self._write_again = True
            return
        journal = self.journal
        if journal.rolling:             # fsyncs the full segment and the directory: off the hub
            self._writing = True
            self.actor.run_in_thread(journal.write, on_done=self._written)
            return
        try:
            seq = journal.write()
        except JournalError as exc:
            self._written(None, exc)
            return
        self._written(seq, None)

    def _written(self, seq, error):
        if self._writing:
            self._writing = False
            if self._stopped:           # a roll that ran on the threadpool past stop(): nothing to report
                return
            if self._write_again:
                self._write_again = False
                self.kick()
        if error is not None:
            if not isinstance(error, JournalError):
                raise error
            self._write_failed(error)
            return
        if self._failing:
            self._failing = False
            log.info("journal writes resumed (written up to %d)", seq)
        if self.on_written is not None:
            self.on_written(seq)
        self._release(self._wait_written, seq)
        if self.fsync == "batch" or self._sync_again:
            self._sync()
        elif self.fsync == "interval" and self._sync_timer is None and not self._stopped:
            self._sync_timer = self.actor.call_later(self.interval, self._sync_due)

    def _sync_due(self):
        self._sync_timer = None
        self._sync()

    def _write_failed(self, exc):
        if self.journal.broken:
            self._halt(exc)
            return
        if not self._failing:           # report once per failure, not once per retry
            self._failing = True
            log.error("journal write failed: %s (retrying every %ss)", exc, self.retry)
            if self.on_error is not None:
                self.on_error(exc)
        self._fail_waiters(self._wait_written, exc)     # waiters that asked to hear of a failure hear of it now
        self._fail_waiters(self._wait_synced, exc)
        if self._write_timer is None and not self._stopped:
            self._write_timer = self.actor.call_later(self.retry, self._write)

    @staticmethod
    def _fail_waiters(queue, exc):
        if queue:
            waiting = list(queue)
            queue.clear()
            queue.extend(w for w in waiting if w[2] is None)
            for _, _, failed in waiting:
                if failed is not None:
                    failed(exc)

    def _halt(self, exc):
        """The journal stopped (a failed fsync, said once by the journal): stop for good."""
        if self._halted:
            return
        self._halted = True
        for timer in (self._write_timer, self._sync_timer):
            if timer is not None:
                timer.cancel()
        self._write_timer = self._sync_timer = None
        if self.on_error is not None:
            self.on_error(exc)
        for queue in (self._wait_written, self._wait_synced):
            self._fail_waiters(queue, exc)
            queue.clear()               # nothing more will be acknowledged

    def _sync(self):
        journal = self.journal
        if self._halted:
            return
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
        if self._stopped:               # an fsync that ran on the threadpool past stop(): nothing to report
            return
        if error is not None:
            if not isinstance(error, JournalError):
                raise error
            if self.journal.broken:
                self._halt(error)
            elif not self.journal.closed:
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

    def stop(self, sync: bool = True, write: bool = True) -> None:
        """Stop for good: cancel the timers; write (and with ``sync`` fsync) what is left.  For teardown.

        Final: once it returns no callback runs any more (``on_written``,
        ``on_synced``, ``on_error``, waiters), not even for a write or fsync
        already running on the threadpool (its result is dropped); waiters
        still queued are dropped unanswered, and :meth:`kick` does nothing.
        Blocks the calling greenlet (the loop) for the last ``write`` and,
        with ``sync``, the fsync.  ``write=False``: write nothing either (the
        owner drops or closes the journal itself).  Same greenlet as the rest."""
        self._stopped = True
        for timer in (self._write_timer, self._sync_timer):
            if timer is not None:
                timer.cancel()
        self._write_timer = self._sync_timer = None
        self._wait_written.clear()
        self._wait_synced.clear()
        if self.journal.closed or self._halted or not write:
            return
        try:
            self.journal.write()
            if sync and self.fsync != "never":
                self.journal.sync()
        except JournalError as exc:
            log.error("journal: final write failed: %s", exc)
