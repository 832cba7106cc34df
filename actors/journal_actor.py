"""JournalActor: a :class:`~zactors.actors.journal.Journal` as an actor, for standalone use.

A pattern that consults its journal per message (the ZEPS broker) owns a
plain ``Journal`` and a :class:`~zactors.actors.group_commit.GroupCommit`;
this actor wraps the two for everyone else (a service that wants a durable
log beside its own loop).

Commands (arguments and replies are msgpack values):

``APPEND key body [timestamp]``
    reply: the record's sequence.  Buffered; written next round.
``FLUSH [durable]``
    deferred reply: ``written_seq`` once every record appended before it is
    written (survives ``kill -9``), or with ``durable`` true ``synced_seq``
    once fsynced (survives power loss).  Error: the write or fsync failed
    (the journal error's message; after a failed fsync the journal stopped).
``READ from_seq [max_records] [max_bytes]``
    reply: ``[[seq, timestamp, key, body], ...]`` (read on the threadpool,
    so a cold disk never stalls the actor).  Error ``SequenceGone`` (its
    message names the first available sequence) before ``first_seq``.
``SEQ_AT_TIME timestamp``
    reply: the first sequence at or after it (on the threadpool).
``RANGE``
    reply: ``[first_seq, last_seq, written_seq, synced_seq]``.
``STATS``
    reply: the journal's ``stats()`` dict.
``RETAIN``
    reply: the number of segments retention removed (unlinks and a directory
    fsync, on the threadpool).

Events: ``JOURNAL_ERROR message`` when a write fails (appends are refused
with the same error until a retried write succeeds), or once when an fsync
fails (the journal stopped: appends are refused until the actor is restarted).
"""
from .actor import Actor, command
from .group_commit import SYNCED, WRITTEN, GroupCommit
from .journal import Journal

__all__ = ["JournalActor"]


class JournalActor(Actor):
    """A journal directory served by an actor (see the module docstring).

    ``fsync`` / ``interval`` / ``retry``: the group-commit policy
    (:class:`GroupCommit`); other keyword arguments go to :class:`Journal`.  The journal is opened in
    ``setup`` (errors are raised in the parent) and closed in ``teardown``.
    """

    def __init__(self, directory, *, fsync="interval", interval=0.1, retry=1.0, **journal_options):
        self.directory = directory
        self._fsync = fsync
        self._interval = interval
        self._retry = retry
        self._options = journal_options
        self.journal = None
        self.commit = None

    def setup(self):
        self.journal = Journal(self.directory, **self._options)
        self.commit = GroupCommit(self, self.journal, fsync=self._fsync, interval=self._interval,
                                  retry=self._retry, on_error=self._on_error)
        self.commit.start()

    def teardown(self):
        if self.commit is not None:
            self.commit.stop()
        if self.journal is not None:
            self.journal.close()

    def _on_error(self, exc):
        self.stats["journal_errors"] += 1
        self.emit("JOURNAL_ERROR", str(exc))

    @command(reply=True)
    def append(self, key, body, timestamp=None):
        seq = self.journal.append(key, body, timestamp)
        self.commit.kick()
        return seq

    @command(deferred=True)
    def flush(self, reply, durable=False):
        self.commit.when(SYNCED if durable else WRITTEN, reply, None, reply.error)

    @command(deferred=True)
    def read(self, reply, from_seq, max_records=1024, max_bytes=1 << 20):
        def done(records, error):
            if error is not None:
                reply.error(error)
            else:
                reply([list(rec) for rec in records])

        self.run_in_thread(self.journal.read, from_seq, max_records, max_bytes, on_done=done)

    def _in_thread(self, reply, func, *args):
        """Run a call that may touch the disk on the threadpool; answer with its result or error."""
        def done(result, error):
            if error is not None:
                reply.error(error)
            else:
                reply(result)

        self.run_in_thread(func, *args, on_done=done)

    @command(deferred=True)
    def seq_at_time(self, reply, timestamp):
        self._in_thread(reply, self.journal.seq_at_time, timestamp)

    @command("RANGE", reply=True)
    def range_(self):
        j = self.journal
        return [j.first_seq, j.last_seq, j.written_seq, j.synced_seq]

    @command("STATS", reply=True)
    def stats_(self):
        return self.journal.stats()

    @command(deferred=True)
    def retain(self, reply):
        self._in_thread(reply, self.journal.apply_retention)
