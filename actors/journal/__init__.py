"""Journal: a crash-safe, segmented, append-only log of (key, body) records.

:class:`Journal` is the writer, a plain object its owner (a ZEPS broker, a
Clone server) consults per message; :class:`JournalReader` reads a journal
that this or another process writes.  Nothing here imports gevent or zmq:
Spark workers import this package to read segments.

The package, one concept a module:

- ``format``: the on-disk layout (records, headers, file names) and the errors;
- ``segment``: one segment file: the record walker, the sparse index, batch
  reads, and the LRU cache of read descriptors;
- ``writer``: :class:`Journal`;
- ``recovery``: what opening does after a crash: the cut, the epochs;
- ``reader``: :class:`JournalReader`;
- ``producers``: idempotent producers: the table recovery rebuilds, its snapshots;
- ``files``: the file layer every write, fsync, rename and unlink goes
  through (tests put a fault-injecting or power-loss layer there).

Record framing, the one record walker and batch decoding are
:mod:`zactors.actors.journal_codec` (C, with its pure-Python twin): recovery,
the readers and the Spark segment reader all walk records with it.

Durability is in three steps, each visible as a sequence number:

- :meth:`Journal.append` frames the record into a memory buffer and returns
  its sequence (``last_seq``).  It never touches the disk.
- :meth:`Journal.write` hands the buffer to the OS (``written_seq``): those
  records survive a ``kill -9`` of the process.
- :meth:`Journal.sync` fsyncs what was written (``synced_seq``): those records
  survive a power loss.  It blocks for about a millisecond, so an actor calls
  it through ``Actor.run_in_thread``; the group-commit policy (every batch,
  every N ms, never) belongs to the owner: see
  :class:`zactors.actors.group_commit.GroupCommit`, which drives both from an
  actor's loop.

Reading: :meth:`Journal.read` serves recent records from a tail cache (about
``tail_cache_bytes`` of them; records not yet written always stay cached, so
the memory bound is roughly ``tail_cache_bytes + 2 * buffer_bytes``), older
ones from the segment files with separate descriptors and large ``pread``
calls, never blocking the writer.  Seeking by time uses the sparse index,
then a scan; timestamps are kept non-decreasing for that.

What blocks (an actor calls these through ``Actor.run_in_thread``, as
:class:`~zactors.actors.group_commit.GroupCommit` does):

- never: ``append``, ``producers``/``producer``, ``stats``, the sequence properties, ``epoch``/``epochs``/
  ``check_resume``, ``rolling``, ``cached``;
- ``write``: a ``write(2)`` per segment touched (fast, like a send), except
  when ``rolling``: the roll fsyncs the full segment, creates the next one and
  fsyncs the directory (milliseconds);
- ``sync``: an fsync (about a millisecond, far more on a busy disk);
- ``read`` / ``seq_at_time``: memory when the tail cache holds the records
  (``cached(seq)``), else ``pread`` on segment files (a cold disk);
- ``apply_retention``: unlinks and a directory fsync;
- opening (recovery scans the active segment, fsyncs) and ``close``.

Read descriptors of segment files live in an LRU cache of ``open_segments``
(default 16): a replay over a thousand segments keeps 16 open, not a thousand.

Threads: ``append``, ``read``, ``seq_at_time``, ``stats`` and the sequence
properties are meant for the owner's loop; :meth:`write` and :meth:`sync` may
run in another thread while the loop keeps appending (appends go to a fresh
buffer; the buffer swap is the only thing they share with ``append``, under a
short lock that is never held across I/O).  Call ``write`` from one place at a
time (a loop, or one thread); ``sync`` may overlap ``write``.  ``read`` and
``seq_at_time`` are also safe from a thread (cold reads); ``close`` must not
race anything.  :class:`JournalReader` is for one thread.

Failure: an I/O error while writing (ENOSPC, EIO...) makes ``write`` raise
:class:`JournalFull` (no space: ENOSPC, EDQUOT) or :class:`JournalError` (any
other), naming the errno; the file is cut back to its last complete record and
the unwritten records stay in memory.  From then on ``append`` refuses new
records with that error, until a later ``write`` succeeds (call it again once
space is freed: it retries the held records) or the journal is reopened
(held records are then lost, but they were never reported written).  A
failed ``fsync`` (of ``sync`` or of a segment roll) is final: the journal
stops, logs it once, and ``append``, ``write`` and ``sync`` raise a fresh
:class:`JournalError` each time saying that the fsync failed and the journal
must be reopened.  It never retries an fsync: after a failure the kernel may
have dropped the dirty pages, and a retry that succeeds would vouch for data
that is gone (PostgreSQL's "fsyncgate").

Directories: creating a segment fsyncs the new file and the directory (a
segment whose directory entry is lost takes its records with it), and so do
retention's removals, the epoch history's replacement, and the clean-close
marker.  ``tests/actors/test_journal_crash.py`` checks all this over a file
layer that simulates power loss.

File format, version 2 (public and stable; all integers little-endian)
-----------------------------------------------------------------------

New segments are version 2; version 1 segments stay readable (a version 1
active segment is sealed on open, so new records go to a version 2 one).
The two differ only in the producer trailer, which version 1 never has.

One directory per stream, holding:

``NNNNNNNNNNNNNNNNNNNN.seg``
    A segment: its first sequence, zero-padded to 20 digits (Kafka style).
    Header (16 bytes): magic ``ZJSG``, u16 version (2, or 1), u16 flags
    (0), u64 base sequence (equal to the file name).  Then records, back to
    back::

        u32 length      bytes after the crc field (20 + key_len + 4 + body_len [+ trailer])
        u32 crc         CRC-32C (Castagnoli) of those ``length`` bytes
        u64 sequence    base sequence + record index: consecutive, from 1
        f64 timestamp   seconds since the epoch (time.time), non-decreasing
        u32 key_len     bits 0-30; bit 31 set: the record ends with the producer trailer
        key bytes
        u32 body_len, body bytes
        [producer trailer (version 2): producer id (0-255 bytes), u64 producer
         sequence, u8 producer id length]

    A record appended with ``producer=(pid, pseq)`` (an idempotent
    producer, :meth:`Journal.append_record`) carries the trailer.

``NNNNNNNNNNNNNNNNNNNN.idx``
    The sparse index of a sealed segment, written when the segment rolls
    over (derived data: rebuilt by a scan when missing or damaged).  Header
    (44 bytes): magic ``ZJIX``, u16 version, u16 flags, u64 base sequence,
    u64 last sequence, f64 last timestamp, u64 segment size in bytes,
    u32 entry count; then entries of (u64 sequence, f64 timestamp,
    u64 file offset) for the first record and one about every 4 KiB of
    segment; then a u32 CRC-32C of everything before it.

``NNNNNNNNNNNNNNNNNNNN.pid``
    The producer snapshot of a segment: the producer table as of its first
    sequence, written durably when it is created (derived data: rebuilt by
    walking the segments before it when missing or damaged).  Layout in
    :mod:`.producers`.

``LOCK``
    Held with ``flock`` by the one writer (a second writer is refused).

``EPOCHS``
    The epoch history, ASCII: the line ``zactors journal epochs 1``, then one
    line ``epoch start_seq`` per epoch, oldest first.  Replaced atomically
    (temp file, fsync, rename, directory fsync).

``CLEAN``
    Empty; present only while the journal is closed cleanly (everything
    synced).  Opening removes it (durably) before accepting records.

Epochs: sequences are never handed to two different records within one
epoch.  A power loss can drop records that were written (and maybe already
delivered) but not synced, and recovery can cut a corrupt record and what
follows; the sequences after the cut would then be reused.  So when the
journal is opened without ``CLEAN`` (a crash, a kill) or recovery cut
anything, a new epoch starts at the next sequence.  A client that remembers
(epoch, last sequence seen) asks :meth:`Journal.check_resume` whether it can
resume (Kafka's leader epochs are the model).

The newest segment is the active one; it is never removed, so the next
sequence survives a journal whose records retention removed entirely (an
empty segment named by the next sequence).

Recovery on open scans the active segment and cuts it at the first torn or
corrupt record (bad length, CRC or sequence): a warning is logged, the cut is
counted in ``stats()`` (``truncated_bytes``, ``crc_errors``) and the sequence
continues after the last good record.  Records after a corrupt one in the
middle of the active segment are lost (the log says how many bytes).  Sealed
segments are checked when read: a bad record there raises
:class:`JournalError` (never a silent skip).

Idempotent producers: :meth:`Journal.producers` is {producer id: (its last
pseq, that record's sequence)} for the most recent ``max_producers``
producers (default 10,000).  Opening rebuilds it from the disk: the active
segment's snapshot plus the producers of the active segment's records that
recovery kept, so it never claims a record that a cut or a power loss
dropped (an owner that drops duplicates by it would otherwise lose the
resend).  :meth:`Journal.producer` looks one up: the ZEPS broker decides
duplicates by it and keeps no table of its own, so a restart changes none of
its decisions.

Retention (:meth:`Journal.apply_retention`, also run when a segment rolls
over) removes whole sealed segments, oldest first, while the journal is
larger than ``retain_bytes`` or the segment's newest record is older than
``retain_seconds``.  An idle active segment whose records are all past the
age is first rolled over to an empty one, so age retention empties an idle
journal (the sequence goes on from the empty segment's name).  A read before the first retained sequence raises
:class:`SequenceGone` carrying ``first_seq``.
"""
from .files import OS_FILES, Files
from .format import (
    CLEAN_NAME, EPOCHS_NAME, FORMAT_VERSION, HEADER_SIZE, INDEX_INTERVAL, INDEX_MAGIC, INDEX_SUFFIX, MAX_RECORD,
    RECORD_OVERHEAD, SEGMENT_MAGIC, SEGMENT_SUFFIX, JournalError, JournalFull, Record, SequenceGone, segment_name,
)
from .reader import JournalReader
from .writer import Journal

__all__ = [
    "Journal", "JournalReader", "Record", "JournalError", "JournalFull", "SequenceGone", "Files", "OS_FILES",
    "FORMAT_VERSION", "RECORD_OVERHEAD", "HEADER_SIZE", "MAX_RECORD", "SEGMENT_SUFFIX", "INDEX_SUFFIX",
    "SEGMENT_MAGIC", "INDEX_MAGIC", "INDEX_INTERVAL", "EPOCHS_NAME", "CLEAN_NAME", "segment_name",
]
