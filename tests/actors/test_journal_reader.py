"""JournalReader: reading a journal another process writes (what Spark workers do)."""
import os
import sys

import pytest

from zactors.actors.journal import Journal, JournalError, JournalReader, SequenceGone

pytestmark = pytest.mark.timeout(120)


def body_of(i):
    return b"body-%d-" % i + b"y" * (i % 23)


WRITER = r"""
import sys
from zactors.actors.journal import Journal
j = Journal(sys.argv[1], segment_bytes=8192)
for i in range(1, int(sys.argv[2]) + 1):
    j.append(b"k%d" % i, b"body-%d-" % i + b"y" * (i % 23), timestamp=1000.0 + i)
    if i % 37 == 0:
        j.write()
j.close()
"""


def test_reader_follows_a_writer_process(tmp_path, processes):
    total = 20_000
    Journal(tmp_path).close()                   # the directory exists before the reader starts
    proc = processes([sys.executable, "-c", WRITER, str(tmp_path), str(total)])
    reader = JournalReader(tmp_path)
    got = []
    seq = 1
    while len(got) < total:
        batch = reader.read(seq, max_records=500)
        if not batch:
            assert proc.poll() is None or reader.last_seq > len(got), "writer ended short"
            continue
        assert batch[0].seq == seq, "no gap, no repeat"
        got.extend(batch)
        seq = batch[-1].seq + 1
    assert proc.wait(60) == 0
    assert [r.seq for r in got] == list(range(1, total + 1))
    assert all(r.key == b"k%d" % r.seq and r.body == body_of(r.seq) for r in got)
    assert [r.timestamp for r in got] == [1000.0 + i for i in range(1, total + 1)]
    assert reader.read(total + 1) == []
    reader.close()


def test_segments_partition_the_journal(tmp_path):
    with Journal(tmp_path, segment_bytes=4096) as j:
        for i in range(1, 2001):
            j.append(b"k%d" % i, body_of(i), timestamp=1000.0 + i)
    reader = JournalReader(tmp_path)
    segs = reader.segments()
    assert len(segs) > 10
    seen = []
    for base, path, first_ts, last_ts, size in segs:
        assert os.path.getsize(path) == size
        recs = list(reader.read_segment(path))
        assert recs[0].seq == base
        assert (recs[0].timestamp, recs[-1].timestamp) == (first_ts, last_ts)
        seen.extend(recs)
    assert [r.seq for r in seen] == list(range(1, 2001))
    # a fresh reader (another worker) reads a segment by path alone, with bounds
    base, path = segs[3][0], segs[3][1]
    part = list(JournalReader(tmp_path).read_segment(path, from_seq=base + 2, to_seq=base + 4))
    assert [r.seq for r in part] == [base + 2, base + 3, base + 4]
    assert [r.seq for r in reader.records(from_seq=100, to_seq=105)] == list(range(100, 106))
    with pytest.raises(JournalError):
        list(reader.read_segment(str(tmp_path / "LOCK")))


def test_reader_sees_retention_as_sequence_gone(tmp_path):
    j = Journal(tmp_path, segment_bytes=2048)
    for i in range(1, 501):
        j.append(b"k", body_of(i))
    j.write()
    reader = JournalReader(tmp_path)
    assert reader.first_seq == 1
    assert reader.read(1, max_records=5)[0].seq == 1
    j.retain_bytes = 4096
    j.apply_retention()
    first = j.first_seq
    assert first > 1
    with pytest.raises(SequenceGone) as info:
        reader.read(2)
    assert info.value.first_seq == first
    assert reader.read(first)[0].seq == first
    j.close()


def test_reader_stops_at_a_torn_tail_and_missing_directory(tmp_path):
    with Journal(tmp_path) as j:
        for i in range(1, 11):
            j.append(b"k", body_of(i))
    seg = sorted(p for p in os.listdir(tmp_path) if p.endswith(".seg"))[-1]
    with open(tmp_path / seg, "ab") as f:
        f.write(b"\x40\x00\x00\x00\x01\x02")      # a record being written: incomplete
    reader = JournalReader(tmp_path)
    assert reader.last_seq == 10
    assert [r.seq for r in reader.records()] == list(range(1, 11))
    with pytest.raises(JournalError):
        JournalReader(tmp_path / "nope")


def test_journal_reads_from_a_thread_while_appending(tmp_path):
    """read() of cold records in a thread while the loop appends and writes."""
    import threading
    j = Journal(tmp_path, segment_bytes=16 << 10, tail_cache_bytes=4096)
    for i in range(1, 3001):
        j.append(b"k%d" % i, body_of(i))
    j.write()
    errors = []
    done = threading.Event()

    def reader():
        try:
            for _ in range(20):
                seq = 1
                while seq <= 3000:
                    batch = j.read(seq, max_records=250)
                    assert batch[0].seq == seq and batch[0].body == body_of(seq)
                    seq = batch[-1].seq + 1
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=reader)
    t.start()
    i = 3000
    while not done.is_set():
        i += 1
        j.append(b"k%d" % i, body_of(i))
        if i % 50 == 0:
            j.write()
    t.join(30)
    assert not errors
    j.close()
