"""The ZEPS broker's streams: opening, creating and closing them within their budgets, and their
journals' errors and retention (a mixin of :class:`.broker.Broker`).

A stream is a :class:`_Stream`: its journal, the GroupCommit that writes
it, its matcher and peers.  Streams on disk are opened at start; others are
created on an ATTACH within the stream budgets (permission ``create``,
``max_streams_per_peer``, ``max_streams``); at most ``max_open_streams`` are
open at once (the idlest is closed for a new one), and one idle for
``stream_idle`` seconds is closed; one that never held a message is closed
(deleted) once idle for ``_MIN_IDLE``: streams a flood creates and leaves
empty free the ``max_streams`` budget within seconds.

After setup, journals open and close on the threadpool, never in the loop
(each costs fsyncs: tens of milliseconds on a busy disk): at most
``_JOURNAL_JOBS`` at once, first come first served, at most
``_MAX_PENDING`` opening or closing (an ATTACH that needs one more is
refused: busy).  A stream is usable only once its journal is open: an
ATTACH that opens one is answered then, and the commands its peer sends
meanwhile are held (``_MAX_HELD_BYTES`` each, ``_MAX_HELD_TOTAL`` in all;
past that refused) and served in order after the ATTACH-OK.  A name being
closed opens again only once its close is done.  Runs in the broker's loop
(the journal jobs on the threadpool; the only state they share with the loop
is ``_jobs_lock``'s).
"""
from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
import time
from collections import OrderedDict, deque
from functools import partial

from zactors.actors.group_commit import GroupCommit
from zactors.actors.journal import Journal, JournalError
from zactors.actors.journal.files import OS_FILES
from zactors.actors.journal.format import HEADER_SIZE, list_segments
from zactors.actors.journal.replica import position

from . import protocol as p
from .matcher import Matcher
from .names import stream_directory, stream_name

__all__: list[str] = []

log = logging.getLogger("zactors.patterns.zeps.broker")  # one logger for the whole broker
_monotonic = time.monotonic
#: descriptors an open stream may take (journal segment, directory, index, its groups' journal...): for max_open_streams
_FDS_PER_STREAM = 4
#: a stream closes for a new one only once it has been idle (and its journal quiet) this long (s)
_MIN_IDLE = 1.0
#: journals opening or closing on the threadpool at once (the pool also writes, fsyncs and reads)
_JOURNAL_JOBS = 2
#: journals opening or closing at most (their descriptors count beyond max_open_streams)
_MAX_PENDING = 64
#: bytes of commands held for one peer while its ATTACH waits for the journal, and for all of them
_MAX_HELD_BYTES = 4 << 20
_MAX_HELD_TOTAL = 64 << 20


def _open_stream_budget(max_streams, wanted=None):
    """Streams open at once: ``wanted`` (default ``max_streams``), never more than a quarter of half the
    open-file limit (the rest is for connections): a budget the descriptors cannot keep is no budget."""
    wanted = wanted or max_streams
    try:
        import resource
    except ImportError:  # not POSIX
        return wanted
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft // 2 // _FDS_PER_STREAM))


def _lock_directory(directory):
    """An exclusive ``flock`` on ``directory`` itself, held while the broker runs: its closed streams
    are its own.  Raises if another broker holds it."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise RuntimeError("journal directory %s is in use by another broker" % directory) from None
    return fd


def _headers_only(directory):
    """True if every segment file in ``directory`` is a bare header (a journal that never held a record;
    the reader also sees a damaged one as empty, and that one is kept)."""
    try:
        return all(os.path.getsize(path) <= HEADER_SIZE for _, path in list_segments(directory, OS_FILES))
    except OSError:
        return False


def _disk_bytes(directory):
    """Bytes of the files in ``directory`` (0 if it cannot be listed)."""
    try:
        with os.scandir(directory) as entries:
            return sum(e.stat().st_size for e in entries if e.is_file())
    except OSError:
        return 0


class _Stream:
    __slots__ = ("name", "journal", "commit", "matcher", "peers", "fresh", "delivered_seq", "samples",
                 "publishes", "pings", "producers", "idle_since", "creator", "pinned", "reads")

    def __init__(self, name, journal, commit):
        self.name = name
        self.journal = journal
        self.commit = commit      # its GroupCommit: writes, fsyncs, PING-OK waits
        self.matcher = Matcher()
        self.peers = {}           # identity -> _Peer attached here
        self.fresh = []           # journal Records appended this round: written, then delivered live
        self.delivered_seq = journal.last_seq  # the publish path delivered up to here
        self.samples = []         # (monotonic, last_seq) for the rate
        self.publishes = 0
        self.pings = {}           # ack="synced": token -> identity of a PING waiting for its fsync
        self.idle_since = _monotonic()  # no peer since then (None while it has peers)
        self.creator = None       # the peer (key or identity) that created it, for its quota
        self.pinned = False       # declared: never closed for idleness
        self.reads = 0            # replay reads of its journal under way off the hub (it stays open)


class _Opening:
    """A stream whose journal opens on the threadpool, and the ATTACHes waiting for it."""

    __slots__ = ("name", "owner", "new", "waiters")

    def __init__(self, name, owner, new):
        self.name = name
        self.owner = owner        # the creator counted in its quota, or None
        self.new = new            # not on disk yet: counts in max_streams
        self.waiters = {}         # identity -> key of each ATTACH waiting


class _Held(list):
    """The commands held for one peer, and their bytes."""

    __slots__ = ("size",)

    def __init__(self):
        super().__init__()
        self.size = 0


class Streams:
    """Stream lifecycle.  State: ``_streams`` (name -> open _Stream), ``_closed_streams`` (name -> its INFO
    when closed), ``_idle`` (name -> open _Stream without peers, the idlest first), ``_creators`` (peer ->
    streams it created), ``_max_open``; the journal jobs:
    ``_opening`` (name -> _Opening), ``_closing`` (name -> _Stream whose journal closes), ``_deleting``
    (how many of those are deleted after), ``_attaching`` (identity -> commands held), ``_held_bytes``,
    ``_jobs`` (queued), ``_jobs_running``, and under ``_jobs_lock``: ``_jobs_in_thread``,
    ``_unclaimed`` (journals opened, not yet taken by the loop), ``_jobs_stopped``."""

    def _setup_streams(self):
        self._dir_lock = _lock_directory(self.journal_dir)
        self._closed_streams = {}       # on disk, not open: name -> its INFO then
        self._idle = {}                 # open streams without peers, in the order they became so
        self._creators = {}             # peer (key or identity) -> existing streams it created
        self._opening = {}
        self._closing = {}
        self._deleting = 0
        self._attaching = {}
        self._held_bytes = 0
        self._jobs = deque()
        self._jobs_running = 0
        self._jobs_lock = threading.Lock()
        self._jobs_in_thread = 0
        self._unclaimed = set()
        self._jobs_stopped = False

    def _existing(self):
        """Names of the streams whose journals are in ``journal_dir`` already."""
        names = []
        for entry in sorted(os.listdir(self.journal_dir)):
            name = stream_name(entry)
            if name is not None and os.path.isdir(os.path.join(self.journal_dir, entry)):
                names.append(name)
        return names

    def _start_streams(self):
        """At start: the declared streams open (pinned; one that cannot open stops the start), and those
        on disk up to the open budget; the rest are listed from their files, closed (each opens on its
        first ATTACH), so a node with more journals than descriptors starts.  A journal that cannot
        open is logged, counted and listed closed (an ATTACH tries again, INVALID if it fails).  One
        that never held a message is deleted.  Blocks on the disk: setup only."""
        for name in self.declared:
            stream = self._streams.get(name) or self._open_now(name)
            if stream is None:
                raise RuntimeError("cannot open declared stream %s under %s" % (name.decode(), self.journal_dir))
            stream.pinned = True
            self._idle.pop(name, None)
        for name in self._existing():
            if name in self._streams:
                continue
            directory = os.path.join(self.journal_dir, stream_directory(name))
            first = last = 0   # a journal that cannot be read is kept as it is: listed, its ATTACHes refused
            if len(self._streams) < self._max_open:
                stream = self._open_now(name)
                if stream is not None:
                    stream.idle_since -= _MIN_IDLE  # no peer yet: closed first for the first ATTACH of another
                    if not stream.journal.last_seq:
                        self._close_stream(stream, block=True)  # never used: deleted
                    continue
            else:
                try:
                    _, first, last = position(directory)
                except (JournalError, OSError) as exc:
                    self.stats["journal_open_errors"] += 1
                    log.error("%s: cannot read stream %s: %s", self.name, name.decode("ascii", "replace"), exc)
                else:
                    if last == 0 and _headers_only(directory):
                        shutil.rmtree(directory, ignore_errors=True)  # never used: deleted
                        continue
            self._closed_streams[name] = {
                "first_seq": first, "last_seq": last, "written_seq": last, "synced_seq": last, "rate": 0.0,
                "bytes": _disk_bytes(directory), "peers": 0, "subscribers": [], "open": False}

    # -- opening ----------------------------------------------------------------------
    def _open_now(self, name):
        """Open stream ``name`` in the loop (at start only: it blocks on the disk); None if it cannot."""
        try:
            journal = Journal(os.path.join(self.journal_dir, stream_directory(name)), **self.journal_options)
        except (JournalError, OSError) as exc:
            self.stats["journal_open_errors"] += 1
            log.error("%s: cannot open stream %s: %s", self.name, name.decode("ascii", "replace"), exc)
            return None
        return self._opened(name, journal, None)

    def _open(self, identity, name, key=None):
        """ATTACH ``identity`` (key ``key``) to stream ``name``, which is not open: within the budgets,
        its journal opens (or is created) on the threadpool and :meth:`_attached` then completes the
        ATTACH; else INVALID with the reason.  Until then the peer's commands are held."""
        opening = self._opening.get(name)
        if opening is None:
            owner = self._admit(identity, name, key)
            if owner is False:
                return
            opening = self._opening[name] = _Opening(name, owner, name not in self._closed_streams)
            if owner is not None:
                self._creators[owner] = self._creators.get(owner, 0) + 1
            if name not in self._closing:  # (else it opens once that close is done)
                self._open_job(opening)
        opening.waiters[identity] = key
        self._attaching[identity] = _Held()

    def _open_soon(self, name):
        """Stream ``name`` for the broker's own use (a dead-letter stream): the stream if it is open, else
        None, its journal then opening on the threadpool when the budgets allow (ask again later: no
        waiter is told).  Runs in the loop; never blocks."""
        stream = self._streams.get(name)
        if stream is not None or name in self._opening:
            return stream
        if len(self._opening) + len(self._closing) >= _MAX_PENDING or (
                len(self._streams) + len(self._opening) >= self._max_open and not self._close_idlest()):
            return None
        opening = self._opening[name] = _Opening(name, None, name not in self._closed_streams)
        if name not in self._closing:  # (else it opens once that close is done)
            self._open_job(opening)
        return None

    def _admit(self, identity, name, key):
        """The budgets for opening ``name``: the peer to count it against (None: not new), or False (refused)."""
        owner = None
        if name not in self._closed_streams:  # a new stream
            if self.permissions is not None and not self.permissions.allows(key, "create", name):
                self._refuse(identity, "refused by the broker's permissions: this key may not create stream %s"
                             % name.decode(), "refused_create")
                return False
            new = sum(1 for o in self._opening.values() if o.new)
            if len(self._streams) + len(self._closed_streams) + new + self._deleting >= self.max_streams:
                self._stream_refused(identity, "too many streams (%d)" % self.max_streams)
                return False
            owner = key or identity
            if self._creators.get(owner, 0) >= self.max_streams_per_peer:
                self._stream_refused(identity, "stream quota: this peer created %d streams (at most %d)"
                                     % (self._creators[owner], self.max_streams_per_peer))
                return False
        pending = len(self._opening) + len(self._closing)
        if pending >= _MAX_PENDING:
            self._stream_refused(identity, "busy: %d stream journals opening or closing; try again" % pending)
            return False
        if len(self._streams) + len(self._opening) >= self._max_open and not self._close_idlest():
            self._stream_refused(identity, "too many open streams (%d), none idle for %gs" % (
                self._max_open, _MIN_IDLE))
            return False
        return owner

    def _open_job(self, opening):
        directory = os.path.join(self.journal_dir, stream_directory(opening.name))
        self._journal_job(partial(self._open_journal, directory), partial(self._journal_opened, opening))

    def _open_journal(self, directory):
        """On the threadpool: the journal, noted as not yet taken by the loop (or closed if the broker is gone)."""
        journal = Journal(directory, **self.journal_options)
        with self._jobs_lock:
            if not self._jobs_stopped:
                self._unclaimed.add(journal)
                return journal
        journal.close()
        return None

    def _journal_opened(self, opening, journal, error):
        name = opening.name
        with self._jobs_lock:
            self._unclaimed.discard(journal)
        del self._opening[name]
        if error is not None:
            if not isinstance(error, (JournalError, OSError)):
                raise error
            self.stats["journal_open_errors"] += 1
            log.error("%s: cannot open stream %s: %s", self.name, name.decode("ascii", "replace"), error)
            self._uncount(opening.owner)
            for identity in opening.waiters:
                self._invalid(identity, "cannot open stream %s: %s" % (name.decode(), error))
                self._serve_held(identity)
            return
        stream = self._opened(name, journal, opening.owner)
        for identity, key in opening.waiters.items():
            self._attached(identity, stream, key)
            self._serve_held(identity)

    def _opened(self, name, journal, owner):
        """Stream ``name`` with its open ``journal``, in service."""
        policy = self.fsync if isinstance(self.fsync, str) else "interval"
        interval = self.fsync if policy == "interval" else 0.1
        stream = _Stream(name, journal, None)
        deliver = partial(self._written, stream)
        if self._pair is not None:  # a pair: the active replicates (and may wait for it), the passive ACKs
            deliver = self._pair.at_level(stream, deliver)
        if self.level == "synced":  # an fsync after every write round: group commit, off the hub
            stream.commit = GroupCommit(self, journal, fsync="batch", retry=0.1, on_synced=deliver,
                                        on_error=partial(self._write_failed, stream))
        else:
            stream.commit = GroupCommit(self, journal, fsync=policy, interval=interval, retry=0.1,
                                        on_written=deliver, on_error=partial(self._write_failed, stream))
        stream.commit.start()
        self._streams[name] = stream
        self._idle.pop(name, None)
        self._idle[name] = stream       # (no peer yet: the last in idle order)
        self._closed_streams.pop(name, None)
        stream.creator = owner
        stream.samples.append((_monotonic(), journal.last_seq))
        log.debug("%s: stream %s open (sequences %d..%d)", self.name, name.decode(), journal.first_seq,
                 journal.last_seq)
        return stream

    def _hold(self, identity, frames):
        """A command from a peer whose ATTACH waits for its journal: held (True), or refused when over
        the bounds (True too); False if ``identity`` waits for nothing."""
        held = self._attaching.get(identity)
        if held is None:
            return False
        size = sum(len(frame) for frame in frames)
        if held.size + size > max(_MAX_HELD_BYTES, 2 * self.max_message) or \
                self._held_bytes + size > _MAX_HELD_TOTAL:
            # Not this one command alone: a PING-OK later would then confirm a PUBLISH dropped here.  The
            # whole ATTACH is refused (nothing it held was answered); its later commands find no peering.
            self.stats["held_refused"] += 1
            self._cancel_attach(identity)
            self._invalid(identity, "busy: ATTACH refused: over %d bytes of commands came while the stream's "
                          "journal opened; attach again" % held.size)
            return True
        held.append(frames)
        held.size += size
        self._held_bytes += size
        return True

    def _cancel_attach(self, identity):
        """Forget ``identity``'s ATTACH that waits for a journal, and what it held."""
        held = self._attaching.pop(identity, None)
        self._held_bytes -= getattr(held, "size", 0)
        for opening in self._opening.values():
            opening.waiters.pop(identity, None)

    def _serve_held(self, identity):
        """The commands held while ``identity``'s ATTACH waited, in order (a held ATTACH that waits
        in turn holds the rest again)."""
        held = self._attaching.pop(identity, ())
        self._held_bytes -= getattr(held, "size", 0)
        for frames in held:
            if identity in self._attaching:
                self._hold(identity, frames)
            else:
                self._on_frames([identity, *frames])

    def _stream_refused(self, identity, reason):
        self.stats["streams_refused"] += 1
        if self.stats["streams_refused"] % 1000 == 1:
            log.warning("%s: stream refused to %r: %s (%d so far)", self.name, identity, reason,
                        self.stats["streams_refused"])
        self._send(identity, p.invalid(reason))

    # -- closing ----------------------------------------------------------------------
    def _closable(self, stream, now, idle):
        """No peer for ``idle`` seconds (``_MIN_IDLE`` for a stream that never held a message: closing
        deletes it, and a flood's junk does not hold the stream budget), not declared, and nothing left
        for its journal to write or sync."""
        since = stream.idle_since
        journal = stream.journal
        if not journal.last_seq:
            idle = min(idle, _MIN_IDLE)
        return (since is not None and now - since >= idle and not stream.pinned and not stream.fresh
                and not stream.reads
                and journal.written_seq == journal.last_seq
                and (self.fsync == "never" or journal.synced_seq == journal.written_seq))

    def _close_idle(self):
        now = _monotonic()
        room = _MAX_PENDING - len(self._opening) - len(self._closing)   # the rest at the next sweep
        for stream in [s for s in self._streams.values() if self._closable(s, now, self.stream_idle)][:room]:
            self._close_stream(stream)

    def _close_idlest(self):
        """Close the stream idle longest (at least _MIN_IDLE) for a new one; False if there is none.
        Walks ``_idle`` from its oldest, up to the first idle less than that: not every open stream
        for each new one (a stream flood's every ATTACH)."""
        now = _monotonic()
        gone = []
        found = None
        for name, stream in self._idle.items():
            if self._streams.get(name) is not stream or stream.idle_since is None:
                gone.append(name)       # closed or attached since (stale): forgotten below
            elif now - stream.idle_since < _MIN_IDLE:
                break                   # (and every later one)
            elif self._closable(stream, now, _MIN_IDLE):
                found = stream
                break
        for name in gone:
            del self._idle[name]
        if found is None:
            return False
        self._close_stream(found)
        return True

    def _close_stream(self, stream, block=False):
        """Close ``stream``'s journal (its descriptors) on the threadpool (``block``: here, at start); delete
        it if it never held a message."""
        name = stream.name
        del self._streams[name]
        self._idle.pop(name, None)
        stream.commit.stop(sync=False)  # (nothing left to write: _closable) the close fsyncs, off the loop
        journal = stream.journal
        self.stats["streams_closed"] += 1
        delete = journal.last_seq == 0 and not stream.pinned
        if delete:
            self._uncount(stream.creator)
            self._deleting += 1
        else:
            last = journal.last_seq
            self._closed_streams[name] = {
                "first_seq": journal.first_seq, "last_seq": last, "written_seq": last, "synced_seq": last,
                "rate": 0.0, "bytes": journal.stats()["disk_bytes"], "peers": 0, "subscribers": [],
                "open": False}
        self._closing[name] = stream
        table = self._tables.get(name)
        if table is not None:           # its groups' journal too (it opens again when they log)
            table.store.close_soon()
        directory = os.path.join(self.journal_dir, stream_directory(name)) if delete else None
        if block:
            self._close_journal(journal, directory)
            self._journal_closed(name, delete, None, None)
        else:
            self._journal_job(partial(self._close_journal, journal, directory),
                              partial(self._journal_closed, name, delete))

    def _close_journal(self, journal, directory):
        """On the threadpool: close ``journal``; then remove ``directory`` (an empty stream's) if given."""
        journal.close(sync=self.fsync != "never" and directory is None)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def _journal_closed(self, name, deleted, result, error):
        del self._closing[name]
        if deleted:
            self._deleting -= 1
            log.debug("%s: empty stream %s deleted", self.name, name.decode("ascii", "replace"))
        if error is not None:
            if not isinstance(error, OSError):
                raise error
            log.error("%s: stream %s: close failed: %s", self.name, name.decode("ascii", "replace"), error)
        opening = self._opening.get(name)
        if opening is not None:  # ATTACHed while it closed: it opens now
            self._open_job(opening)

    def _uncount(self, owner):
        """A stream ``owner`` created is gone (or never came): one less in its quota."""
        if owner is not None:
            left = self._creators.pop(owner, 1) - 1
            if left:
                self._creators[owner] = left

    # -- the journal jobs -------------------------------------------------------------
    def _journal_job(self, func, on_done):
        """Run ``func()`` on the threadpool, after the jobs queued before it; ``on_done(result, error)`` in the loop."""
        self._jobs.append((func, on_done))
        self._next_jobs()

    def _next_jobs(self):
        while self._jobs and self._jobs_running < _JOURNAL_JOBS:
            func, on_done = self._jobs.popleft()
            self._jobs_running += 1
            with self._jobs_lock:
                self._jobs_in_thread += 1
            self.run_in_thread(self._in_thread, func, on_done=partial(self._job_done, on_done))

    def _in_thread(self, func):
        try:
            return func()
        finally:
            with self._jobs_lock:
                self._jobs_in_thread -= 1

    def _job_done(self, on_done, result, error):
        self._jobs_running -= 1
        try:
            on_done(result, error)
        finally:
            self._next_jobs()

    def _stop_journal_jobs(self):
        """Teardown: wait (up to 10 s) for the jobs under way, then close every journal left."""
        deadline = _monotonic() + 10.0
        while True:
            with self._jobs_lock:
                if not self._jobs_in_thread or _monotonic() > deadline:
                    self._jobs_stopped = True    # an open still under way closes its own journal
                    unclaimed, self._unclaimed = self._unclaimed, set()
                    break
            time.sleep(0.002)  # (teardown only: a job is a few fsyncs)
        for journal in unclaimed:
            journal.close(sync=self.fsync != "never")
        for stream in self._closing.values():  # queued closes that never ran
            stream.journal.close(sync=self.fsync != "never")

    # -- errors and retention ---------------------------------------------------------
    def _write_failed(self, stream, exc):
        """GroupCommit's ``on_error``: once per failing streak of writes, or a failed fsync.

        With ``ack="synced"`` the PINGs waiting for an fsync are answered
        INVALID "PING: ..." now (as ``when_written``'s ``on_error`` does for
        ``"written"``): not synced, and maybe never.
        """
        if stream.pings:
            pings, stream.pings = stream.pings, {}
            for identity in pings.values():
                peer = self._peers.get(identity)
                self._invalid(identity, "PING: %sstream %s cannot write its journal: %s"
                              % (self._journaled(peer) if peer is not None else "", stream.name.decode(), exc))
        if stream.journal.broken:  # a failed fsync: final, the journal refuses until reopened
            self.stats["journal_sync_errors"] += 1
            log.error("%s: stream %s: fsync failed: %s", self.name, stream.name.decode("ascii", "replace"), exc)
        else:
            self.stats["journal_write_errors"] += 1
            log.error("%s: stream %s: journal write failed (retrying every 0.1 s): %s", self.name,
                      stream.name.decode("ascii", "replace"), exc)

    def _retain(self):
        for stream in self._streams.values():
            try:
                stream.journal.apply_retention()
            except (JournalError, OSError) as exc:
                log.error("%s: stream %s: retention failed: %s", self.name, stream.name, exc)
