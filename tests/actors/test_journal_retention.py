"""Journal retention: whole segments by size and by age; readers get SequenceGone."""
import os

import pytest

from zactors.actors.journal import Journal, JournalReader, SequenceGone

pytestmark = pytest.mark.timeout(60)


def segs(path):
    return sorted(n for n in os.listdir(path) if n.endswith(".seg"))


def test_retention_by_size_removes_whole_oldest_segments(tmp_path):
    with Journal(tmp_path, segment_bytes=4096, retain_bytes=16 << 10, tail_cache_bytes=0) as j:
        for i in range(2000):
            j.append(b"k", b"%06d" % i + b"x" * 60, timestamp=1000.0 + i)
            if i % 100 == 99:
                j.write()           # rolling over applies retention
        j.write()
        j.apply_retention()
        names = segs(tmp_path)
        on_disk = sum(os.path.getsize(tmp_path / n) for n in names)
        assert on_disk <= 16 << 10
        assert on_disk > (16 << 10) - 2 * 4096, "only whole segments past the bound go"
        first = int(names[0][:20])
        assert j.first_seq == first > 1
        idx = sorted(n[:20] for n in os.listdir(tmp_path) if n.endswith(".idx"))
        assert set(idx) <= {n[:20] for n in names}, "indexes go with their segments"
        with pytest.raises(SequenceGone) as info:
            j.read(1)
        assert info.value.first_seq == first
        recs = j.read(first, max_records=10 ** 6, max_bytes=None)
        assert [r.seq for r in recs] == list(range(first, 2001))
        assert j.stats()["segments_removed"] > 0
    reader = JournalReader(tmp_path)
    assert reader.first_seq == first
    with pytest.raises(SequenceGone) as info:
        reader.read(first - 1)
    assert info.value.first_seq == first
    assert next(iter(reader.records())).seq == first


def test_retention_by_age(tmp_path):
    with Journal(tmp_path, segment_bytes=2048) as j:
        for i in range(600):
            j.append(b"k", b"v" * 40, timestamp=1000.0 + i)
        j.write()
        j.retain_seconds = 100.0    # set after writing: write() applies it with the real clock
        before = segs(tmp_path)
        # at now=1450 records older than 1350 (seqs <= 350) are past the age
        removed = j.apply_retention(now=1450.0)
        assert removed > 0 and len(segs(tmp_path)) == len(before) - removed
        first = j.first_seq
        assert j.read(first)[0].timestamp >= 1000.0
        # the removed segments ended before the cutoff; the first kept one reaches past it
        assert 1000.0 + (first - 2) < 1350.0
        kept = JournalReader(tmp_path).segments()
        assert kept[0][0] == first and kept[0][3] >= 1350.0
        with pytest.raises(SequenceGone):
            j.read(first - 1)
        assert j.seq_at_time(0) == first
        assert j.apply_retention(now=1450.0) == 0, "idempotent"


def test_retention_never_removes_the_active_segment_and_the_sequence_survives(tmp_path):
    with Journal(tmp_path, segment_bytes=2048, retain_seconds=1.0) as j:
        for i in range(300):
            j.append(b"k", b"v" * 40, timestamp=1000.0 + i)
        j.write()
        j.apply_retention(now=10 ** 9)
        assert len(segs(tmp_path)) == 1
        last = j.last_seq
        assert j.first_seq > 1
    with Journal(tmp_path, segment_bytes=2048, retain_seconds=1.0) as j:
        assert j.last_seq == last
        assert j.append(b"k", b"v") == last + 1


def test_reopen_after_retention_reads_from_first(tmp_path):
    with Journal(tmp_path, segment_bytes=2048, retain_bytes=8192) as j:
        for i in range(500):
            j.append(b"k%d" % i, b"v" * 30)
        j.write()
        j.apply_retention()
        first = j.first_seq
    with Journal(tmp_path, tail_cache_bytes=0) as j:
        assert j.first_seq == first
        with pytest.raises(SequenceGone):
            j.read(first - 1)
        recs = j.read(first, max_records=1000)
        assert recs[0].seq == first and recs[-1].seq == 500
        assert recs[0].key == b"k%d" % (first - 1)


def test_age_retention_empties_an_idle_journal_and_keeps_the_sequence(tmp_path):
    with Journal(tmp_path, retain_seconds=60.0) as j:
        for i in range(100):
            j.append(b"k", b"v", timestamp=1000.0 + i)
        j.write()
        assert j.apply_retention(now=1000.0 + 99 + 30) == 0, "not old yet"
        assert j.apply_retention(now=1000.0 + 99 + 61) == 1
        assert (j.first_seq, j.last_seq) == (101, 100), "empty, and the sequence goes on"
        with pytest.raises(SequenceGone) as info:
            j.read(100)
        assert info.value.first_seq == 101
        assert j.read(101) == []
        assert segs(tmp_path) == ["%020d.seg" % 101]
    with Journal(tmp_path) as j:
        assert (j.first_seq, j.last_seq) == (101, 100)
        assert j.append(b"k", b"after") == 101
    reader = JournalReader(tmp_path)
    assert [r.body for r in reader.records()] == [b"after"]


def test_retention_removals_survive_a_power_loss(tmp_path):
    """apply_retention fsyncs the directory: removed segments do not come back after a crash."""
    from tests.actors.crashfs import CrashFiles

    files = CrashFiles(tmp_path)
    d = tmp_path / "s"
    j = Journal(d, segment_bytes=512, files=files)
    for i in range(400):
        j.append(b"k", b"x" * 100)
        if i % 10 == 9:
            j.write()
    j.write()
    j.sync()
    assert j.stats()["segments"] > 40
    j.retain_bytes = 2048
    assert j.apply_retention() > 30
    first, last = j.first_seq, j.last_seq
    files.crash()                   # the power goes right after retention returned
    files.restore()
    with Journal(d, files=files) as j:
        assert (j.first_seq, j.last_seq) == (first, last), "removed segments stay removed"
