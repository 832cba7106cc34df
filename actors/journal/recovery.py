"""Recovery when a journal opens: cut the active segment at the first torn or
corrupt record, and keep the epoch history.

A new epoch starts (at the next sequence) when the journal was not closed
cleanly (no ``CLEAN`` marker: a crash, a kill, a power loss) or recovery cut
records: sequences after the cut, or written but not synced before a power
loss, may have been handed out already and will be handed to new records.
Blocks (scans, fsyncs); runs in the writer's constructor.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import os

from .format import CLEAN_NAME, EPOCHS_NAME, FORMAT_VERSION, HEADER_SIZE, JournalError

__all__ = ["recover_active", "open_epochs", "read_epochs", "format_epochs", "collector_paused"]

log = logging.getLogger(__name__)

_EPOCHS_HEAD = "zactors journal epochs 1\n"


def format_epochs(epochs):
    """The epochs file's content for ``[(epoch, start_seq)]``."""
    return (_EPOCHS_HEAD + "".join("%d %d\n" % pair for pair in epochs)).encode("ascii")


def resume_point(epochs, last_seq, epoch, seq):
    """What :meth:`Journal.check_resume` answers for a journal with ``epochs`` ending at ``last_seq``:
    None when a copy that holds ``seq`` of ``epoch`` agrees with it, else the last sequence it agrees up to."""
    if epoch == epochs[-1][0]:
        last = last_seq
    else:
        later = [start for e, start in epochs if e > epoch]
        if not later or not any(e == epoch for e, _ in epochs):
            return 0
        last = min(later) - 1
    return None if seq <= last else last


def read_epochs(path):
    """[(epoch, start_seq)] from the epochs file; None when there is none."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise JournalError("journal epochs file %s unreadable: %s" % (path, exc)) from None
    lines = text.splitlines()
    try:
        if not lines or lines[0] + "\n" != _EPOCHS_HEAD:
            raise ValueError("bad header")
        epochs = [(int(a), int(b)) for a, b in (line.split() for line in lines[1:])]
        if not epochs or any(e2 <= e1 or s2 < 1 for (e1, _), (e2, s2) in zip(epochs, epochs[1:])):
            raise ValueError("epochs out of order")
    except ValueError as exc:
        raise JournalError("journal epochs file %s is damaged (%s): the journal cannot tell "
                           "which sequences clients may hold" % (path, exc)) from None
    return epochs


def open_epochs(journal, fresh, clean, cut, next_seq):
    """Load the epoch history; start a new epoch at ``next_seq`` after an
    unclean shutdown or a cut (written durably before any record of the
    new epoch); then remove the clean-close marker, durably: from now on a
    crash is unclean."""
    files = journal.files
    path = os.path.join(journal.directory, EPOCHS_NAME)
    epochs = None if fresh else read_epochs(path)
    changed = epochs is None
    if epochs is None:              # a new journal, or one from before epochs: the history starts here
        epochs = [(1, 1)]
    if not fresh and (cut or not clean):
        epochs.append((epochs[-1][0] + 1, next_seq))
        changed = True
        log.warning("journal %s: %s; epoch %d starts at sequence %d", journal.directory,
                    "recovery cut records" if cut else "not closed cleanly", epochs[-1][0], next_seq)
    if changed:
        files.write_atomic(path, format_epochs(epochs))
    if clean:
        files.unlink(os.path.join(journal.directory, CLEAN_NAME))
        files.fsync_dir(journal.directory)
    return epochs


@contextlib.contextmanager
def collector_paused():
    """No cyclic garbage collection meanwhile (then as before).

    Decoding a segment makes a record object per record: with the collector
    on, every 700 of them start a collection, and every hundredth of those
    walks every object of the process (a Clone map of a million keys: tenths
    of a second each).  Recovery makes no cycles.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def recover_active(journal, seg, producers=None):
    """Scan the active segment; cut it at the first torn or corrupt record.
    True when records (or a torn header) were cut.  ``producers`` (a
    ProducerTable) learns the producers of the records kept, and only those."""
    size = os.stat(seg.path).st_size
    with collector_paused():
        reason = seg.scan(producers=producers)
    seg.indexed = True
    if size < HEADER_SIZE:
        # torn header of a segment created just before a crash: it holds no record
        log.warning("journal %s: rewriting the torn header of %s", journal.directory, seg.path)
        journal._create_segment_file(seg.base)
        seg.close()
        return size > 0
    if seg.end < size:
        cut = size - seg.end
        journal._stats["truncated_bytes"] += cut
        if reason is not None and reason != "bad segment header":
            journal._stats["crc_errors"] += 1
        log.warning("journal %s: cut %d bytes after sequence %d in %s at offset %d (%s); "
                    "the records in them are lost", journal.directory, cut, seg.last_seq,
                    os.path.basename(seg.path), seg.end, reason or "torn record")
        if reason == "bad segment header":
            raise JournalError("%s: bad segment header (not a version %d journal segment?)"
                               % (seg.path, FORMAT_VERSION))
        files = journal.files
        fd = files.open(seg.path, os.O_WRONLY)
        try:
            files.ftruncate(fd, seg.end)
            files.fsync(fd)
        finally:
            files.close(fd)
        seg.close()
        return True
    return False
