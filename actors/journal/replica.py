"""Replica support: what a journal that copies another one (a ZEPS passive broker) needs beyond appending.

A replica appends the source's records in order with :meth:`Journal.append_record`
(same sequence, timestamp and producer: it checks the sequence itself), and
keeps the source's epoch history, so that a client resuming with
(epoch, sequence) gets the same answer from either journal:

- :func:`create_at`: a new, empty journal directory whose next sequence is
  ``base`` (the source's first retained one) and whose epoch history is given;
- :func:`set_epochs`: replace an open journal's epoch history (adopting the
  source's, or starting a new epoch when the replica takes over: :func:`new_epoch`);
- :func:`position`: (epoch history, last sequence) of a journal directory that is not open;
- :func:`truncate_after`: cut a journal that is not open after a sequence (what a copy accepted alone);
- :func:`resume_point`: :meth:`Journal.check_resume` over a given history (no journal needed).

Everything blocks on the disk (fsyncs of the epochs file and the directory):
call it rarely (a sync, a takeover), not per record.  Not thread-safe.
"""
from __future__ import annotations

import os

from .files import OS_FILES, Files
from .format import (
    CLEAN_NAME, EPOCHS_NAME, HEADER_SIZE, INDEX_SUFFIX, RECORD_OVERHEAD, SEGMENT_SUFFIX, list_segments, segment_header,
    segment_name,
)
from .producers import PRODUCERS_SUFFIX
from .reader import JournalReader
from .recovery import format_epochs, read_epochs, resume_point
from .writer import Journal

__all__ = ["create_at", "set_epochs", "new_epoch", "new_epoch_closed", "position", "resume_point", "agreed", "epoch_of", "truncate_after", "write_epochs",
           "epochs_of"]

Epochs = list[tuple[int, int]]


def agreed(epochs: Epochs, last_seq: int, their_epochs: Epochs, their_last: int) -> int:
    """How far a copy with ``their_epochs`` ending at ``their_last`` holds the same records as a journal
    with ``epochs`` ending at ``last_seq``: the last sequence up to which both agree."""
    upto = 0
    for i, (epoch, start) in enumerate(their_epochs):
        if start > their_last:
            break
        end = their_epochs[i + 1][1] - 1 if i + 1 < len(their_epochs) else their_last
        if (epoch, start) not in epochs and start != 1:
            break                       # an epoch the copy started on its own: its records are its own
        last = resume_point(epochs, last_seq, epoch, end)
        if last is not None:
            return max(upto, min(last, end))
        upto = end
    return upto


def epoch_of(epochs: Epochs, seq: int) -> int:
    """The epoch that sequence ``seq`` belongs to in ``epochs``."""
    found = epochs[0][0]
    for epoch, start in epochs:
        if start <= seq:
            found = epoch
    return found


def create_at(directory: str, base: int, epochs: Epochs, files: Files = OS_FILES) -> None:
    """Create an empty journal in ``directory`` (which must not hold one) that continues at ``base``
    with ``epochs`` as its history, marked clean so that opening it keeps that history."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if list_segments(directory, files):
        raise ValueError("journal %s exists already" % directory)
    path = os.path.join(directory, segment_name(base))
    fd = files.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        files.write(fd, segment_header(base))
        files.fsync(fd)
    finally:
        files.close(fd)
    files.write_atomic(os.path.join(directory, EPOCHS_NAME), format_epochs(epochs))
    files.close(files.open(os.path.join(directory, CLEAN_NAME), os.O_WRONLY | os.O_CREAT))
    files.fsync_dir(directory)


def set_epochs(journal: Journal, epochs: Epochs) -> None:
    """Make ``epochs`` the open ``journal``'s epoch history, durably (before any record of a new epoch)."""
    epochs = [(int(e), int(s)) for e, s in epochs]
    if not epochs or any(e2 <= e1 for (e1, _), (e2, _) in zip(epochs, epochs[1:])):
        raise ValueError("epochs must be increasing: %r" % (epochs,))
    if epochs == journal.epochs:
        return
    journal.files.write_atomic(os.path.join(journal.directory, EPOCHS_NAME), format_epochs(epochs))
    journal._epochs = epochs


def new_epoch(journal: Journal) -> int:
    """Start a new epoch at ``journal``'s next sequence (a replica that takes over); returns it."""
    epochs = journal.epochs
    epoch = epochs[-1][0] + 1
    set_epochs(journal, epochs + [(epoch, journal.last_seq + 1)])
    return epoch


def epochs_of(directory: str) -> Epochs:
    """The epoch history of the journal in ``directory`` (open or not)."""
    return read_epochs(os.path.join(directory, EPOCHS_NAME)) or [(1, 1)]


def position(directory: str) -> tuple[Epochs, int, int]:
    """(epoch history, first sequence, last sequence) of the journal in ``directory`` (not open)."""
    epochs = read_epochs(os.path.join(directory, EPOCHS_NAME)) or [(1, 1)]
    with JournalReader(directory) as reader:
        return epochs, reader.first_seq, reader.last_seq


def truncate_after(directory: str, seq: int, files: Files = OS_FILES) -> int:
    """Cut the journal in ``directory`` (not open) after sequence ``seq``: the records a copy accepted
    alone go (a split brain), the ones up to ``seq`` stay.  Returns how many records were cut; -1 when
    ``seq`` is before the first retained record (nothing to keep: copy the whole stream again).

    Crash-safe by its order: the later segments go first (newest first, the directory synced), then the
    segment holding ``seq`` is cut and fsynced; a crash between leaves a shorter valid journal, and the
    next sync computes the cut again.  The epoch history is left to the caller (:func:`set_epochs`).
    """
    segments = list_segments(directory, files)
    with JournalReader(directory) as reader:
        first, last = reader.first_seq, reader.last_seq
        if seq >= last:
            return 0
        if seq < first - 1:
            return -1
        keep = [(base, path) for base, path in segments if base <= max(seq, first)]
        base, path = keep[-1]
        kept = reader.read(base, seq - base + 1, None, producers=True) if seq >= base else []
    end = HEADER_SIZE + sum(RECORD_OVERHEAD + len(r[2]) + len(r[3]) + (9 + len(r[4]) if len(r) > 4 else 0)
                            for r in kept)
    for later_base, later_path in reversed(segments):
        if later_base <= base:
            break
        for suffix in (INDEX_SUFFIX, PRODUCERS_SUFFIX, SEGMENT_SUFFIX):
            try:
                files.unlink(later_path[:-len(SEGMENT_SUFFIX)] + suffix)
            except FileNotFoundError:
                pass
        files.fsync_dir(directory)
    try:        # the cut segment is the active one again: its sealed index is stale
        files.unlink(path[:-len(SEGMENT_SUFFIX)] + INDEX_SUFFIX)
    except FileNotFoundError:
        pass
    fd = files.open(path, os.O_WRONLY)
    try:
        files.ftruncate(fd, end)
        files.fsync(fd)
    finally:
        files.close(fd)
    files.fsync_dir(directory)
    return last - seq


def write_epochs(directory: str, epochs: Epochs, files: Files = OS_FILES) -> None:
    """:func:`set_epochs` for a journal that is not open."""
    files.write_atomic(os.path.join(directory, EPOCHS_NAME), format_epochs([(int(e), int(s)) for e, s in epochs]))


def new_epoch_closed(directory: str, next_seq: int) -> None:
    """:func:`new_epoch` for a journal that is not open (its next sequence is ``next_seq``)."""
    path = os.path.join(directory, EPOCHS_NAME)
    epochs = read_epochs(path) or [(1, 1)]
    OS_FILES.write_atomic(path, format_epochs(epochs + [(epochs[-1][0] + 1, next_seq)]))
