"""Journal recovery: torn tails, corrupt bytes, kill -9 of a writer process."""
import logging
import os
import signal
import sys

import pytest

from zactors.actors.journal import HEADER_SIZE, Journal, JournalError, JournalReader, segment_name

pytestmark = pytest.mark.timeout(120)


def make(path, count, **options):
    with Journal(path, **options) as j:
        for i in range(count):
            j.append(b"key-%d" % i, b"body-%d-" % i + b"x" * (i % 37))
    return sorted(n for n in os.listdir(path) if n.endswith(".seg"))


def check_all(path, last):
    with Journal(path, tail_cache_bytes=0) as j:
        recs = j.read(1, max_records=10 ** 6, max_bytes=None)
    assert [r.seq for r in recs] == list(range(1, last + 1))
    for r in recs:
        i = r.seq - 1
        assert r.key == b"key-%d" % i and r.body == b"body-%d-" % i + b"x" * (i % 37)


def record_offsets(path):
    """Byte offsets of every record in a segment file (a test-side parser of the format)."""
    data = open(path, "rb").read()
    pos, out = HEADER_SIZE, []
    while pos + 8 <= len(data):
        out.append(pos)
        pos += 8 + int.from_bytes(data[pos:pos + 4], "little")
    return out, len(data)


@pytest.mark.parametrize("cut", [1, 7, 8, 20, 31])
def test_torn_tail_is_cut_and_the_sequence_continues(tmp_path, caplog, cut):
    names = make(tmp_path, 100)
    last = tmp_path / names[-1]
    offsets, size = record_offsets(last)
    torn_at = offsets[-1] + cut                     # the last record, cut mid-way
    os.truncate(last, torn_at)
    with caplog.at_level(logging.WARNING):
        with Journal(tmp_path) as j:
            assert j.last_seq == j.written_seq == 99
            st = j.stats()
            assert st["truncated_bytes"] == cut and st["crc_errors"] == 0
            assert j.append(b"new", b"after") == 100, "the cut sequence is reused only because it was lost"
    assert "cut %d bytes" % cut in caplog.text
    assert os.path.getsize(last) > offsets[-1]
    with Journal(tmp_path) as j:
        assert j.read(100)[0].key == b"new"
        assert j.stats()["truncated_bytes"] == 0


def test_torn_header_of_a_new_segment(tmp_path):
    make(tmp_path, 10)
    with open(tmp_path / segment_name(11), "wb") as f:
        f.write(b"ZJ")                              # crash right after creating the next segment
    with Journal(tmp_path) as j:
        assert j.last_seq == 10
        assert j.append(b"k", b"v") == 11
    with Journal(tmp_path) as j:
        assert j.read(11)[0].body == b"v"


@pytest.mark.parametrize("where", ["length", "crc", "seq", "key", "body"])
def test_flipped_byte_mid_segment_truncates_there(tmp_path, caplog, where):
    names = make(tmp_path, 200)
    path = tmp_path / names[-1]
    offsets, size = record_offsets(path)
    victim = 120                                    # record index, seq 121
    at = offsets[victim] + {"length": 1, "crc": 5, "seq": 9, "key": 8 + 20 + 1, "body": 8 + 20 + 4 + 7 + 5}[where]
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x41]))
    with caplog.at_level(logging.WARNING):
        j = Journal(tmp_path)
    try:
        assert j.last_seq == 120, "everything before the bad record is kept"
        st = j.stats()
        assert st["truncated_bytes"] == size - offsets[victim]
        # a length pointing past the end of the file looks like a torn write
        assert st["crc_errors"] == (0 if where == "length" else 1)
        assert j.append(b"next", b"x") == 121
    finally:
        j.close()
    assert "records in them are lost" in caplog.text
    with Journal(tmp_path, tail_cache_bytes=0) as j:
        recs = j.read(1, max_records=1000)
        assert [r.seq for r in recs] == list(range(1, 122))
        assert recs[-1].key == b"next"


def test_corrupt_sealed_segment_raises_on_read(tmp_path):
    names = make(tmp_path, 300, segment_bytes=4096)
    assert len(names) > 3
    path = tmp_path / names[1]
    offsets, _ = record_offsets(path)
    with open(path, "r+b") as f:
        f.seek(offsets[3] + 40)
        f.write(b"\xff\xfe")
    for idx in os.listdir(tmp_path):
        if idx.endswith(".idx"):
            os.unlink(tmp_path / idx)           # a scan, not the stored index
    with Journal(tmp_path, tail_cache_bytes=0) as j:
        assert j.last_seq == 300
        base = int(names[1][:20])
        with pytest.raises(JournalError, match="corrupt"):
            j.read(base, max_records=100)
        assert j.read(1, max_records=2)[0].seq == 1, "other segments still read"


WRITER = r"""
import os, sys
from zactors.actors.journal import Journal
j = Journal(sys.argv[1], segment_bytes=int(sys.argv[2]))
out = os.fdopen(int(sys.argv[3]), "w", buffering=1)
i = j.last_seq
while True:
    for _ in range(50):
        i += 1
        assert j.append(b"key-%d" % (i - 1), b"body-%d-" % (i - 1) + b"x" * ((i - 1) % 37)) == i
    out.write("%d\n" % j.write())
"""


@pytest.mark.parametrize("segment_bytes", [64 << 20, 8 << 10])
def test_kill_9_of_a_writer_process(tmp_path, processes, segment_bytes):
    """SIGKILL a process appending and writing; reopen: every record reported
    written is there, the journal ends at a complete record, the sequence continues."""
    for round in range(2):
        rfd, wfd = os.pipe()
        proc = processes([sys.executable, "-c", WRITER, str(tmp_path), str(segment_bytes), str(wfd)],
                         pass_fds=(wfd,))
        os.close(wfd)
        reported = 0
        with os.fdopen(rfd) as lines:
            for n, line in enumerate(lines):
                reported = int(line)
                if n == 200 + 100 * round:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
            for line in lines:              # whatever it wrote before dying
                reported = int(line)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        assert reported > 0
        with Journal(tmp_path, segment_bytes=segment_bytes, tail_cache_bytes=0) as j:
            assert j.last_seq >= reported, "every record reported written survived"
            last = j.last_seq
        check_all(tmp_path, last)
        reader = JournalReader(tmp_path)
        assert reader.last_seq == last


# -- fuzzing recovery: whatever happens to the active segment's bytes, the
#    journal opens to exactly the intact prefix (or refuses a broken header)

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

FUZZ_RECORDS = 120


def _fuzz_journal(path):
    names = make(path, FUZZ_RECORDS)
    assert len(names) == 1
    return path / names[0]


def _reopened_prefix(path):
    with Journal(path, tail_cache_bytes=0) as j:
        last = j.last_seq
        recs = j.read(1, max_records=10 ** 6, max_bytes=None) if last else []
        assert j.append(b"after", b"recovery") == last + 1, "the sequence continues"
    assert [r.seq for r in recs] == list(range(1, last + 1))
    for r in recs:
        i = r.seq - 1
        assert r.key == b"key-%d" % i and r.body == b"body-%d-" % i + b"x" * (i % 37)
    return last


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_corrupted_active_segment(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz")
    seg = _fuzz_journal(path)
    offsets, size = record_offsets(seg)
    mode = data.draw(st.sampled_from(["flip", "truncate", "garbage"]))
    if mode == "flip":
        at = data.draw(st.integers(0, size - 1))
        mask = data.draw(st.integers(1, 255))
        raw = bytearray(seg.read_bytes())
        raw[at] ^= mask
        seg.write_bytes(bytes(raw))
        if at < HEADER_SIZE:
            if 8 <= at < HEADER_SIZE or at < 6:     # magic, version or base: not ours to cut
                with pytest.raises(JournalError):
                    Journal(path)
                return
            expect = FUZZ_RECORDS                   # the flags are not checked
        else:
            expect = sum(1 for o in offsets if o <= at) - 1
    elif mode == "truncate":
        at = data.draw(st.integers(HEADER_SIZE, size))
        os.truncate(seg, at)
        expect = sum(1 for o in offsets + [size] if o <= at) - 1
    else:
        garbage = data.draw(st.binary(min_size=1, max_size=200))
        with open(seg, "ab") as f:
            f.write(garbage)
        expect = FUZZ_RECORDS
    assert _reopened_prefix(path) == expect


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_corrupted_sealed_files_never_give_wrong_data(tmp_path_factory, data):
    """A flipped byte in a sealed segment or its index: readers return a
    correct prefix and then JournalError, or everything (an index is rebuilt)."""
    path = tmp_path_factory.mktemp("fuzz")
    names = make(path, 300, segment_bytes=2048)
    files = sorted(n for n in os.listdir(path) if n.endswith((".seg", ".idx")) and n[:20] != names[-1][:20])
    victim = path / data.draw(st.sampled_from(files))
    raw = bytearray(victim.read_bytes())
    raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    victim.write_bytes(bytes(raw))
    originals = {}
    for i in range(300):
        originals[i + 1] = (b"key-%d" % i, b"body-%d-" % i + b"x" * (i % 37))

    def check(iterate):
        seen = []
        try:
            for rec in iterate():
                seen.append(rec)
        except JournalError:
            pass
        else:
            assert len(seen) == 300, "no error, so every record"
        assert [r.seq for r in seen] == list(range(1, len(seen) + 1))
        assert all((r.key, r.body) == originals[r.seq] for r in seen)

    def reader_records():
        with JournalReader(path) as reader:
            yield from reader.records()

    def journal_reads():
        with Journal(path, tail_cache_bytes=0) as j:
            seq = 1
            while True:
                batch = j.read(seq, max_records=64)
                if not batch:
                    return
                yield from batch
                seq = batch[-1].seq + 1

    check(reader_records)
    check(journal_reads)
