"""Format 2 and idempotent producers: records that carry (producer id, producer sequence), one record
walker for every reader (C and its Python twin agree), version 1 segments still read, and the producer
table that recovery rebuilds from what is on disk (snapshot + the active segment; never a lost record)."""
import logging
import os
import random
import struct

import crc32c
import pytest
from hypothesis import given, settings, strategies as st

from tests.actors.crashfs import CrashFiles, SimulatedCrash
from tests.actors.test_journal_crash import fast_dir  # noqa: F401  (a fixture)
from zactors.actors import journal_codec as codec
from zactors.actors.journal import HEADER_SIZE, Journal, JournalReader, Record
from zactors.actors.journal.producers import load_snapshot, snapshot_path

pytestmark = pytest.mark.timeout(300)

try:  # both twins, whatever ZACTORS_PURE_PYTHON says
    from zactors.actors import _journal
    _journal.bind(Record)
except ImportError:
    _journal = None

TWINS = [pytest.param((codec.py_frame, codec.py_decode), id="python")]
if _journal is not None:
    TWINS.append(pytest.param((_journal.frame, _journal.decode), id="c"))
DECODERS = [codec.py_decode] + ([_journal.decode] if _journal is not None else [])


def _all(directory, producers=True):
    with JournalReader(directory) as reader:
        return list(reader.records(producers=producers))


# -- the record format and the walker ----------------------------------------------------------

@pytest.mark.parametrize("twin", TWINS)
def test_a_producer_record_is_the_file_format(twin):
    frame, decode = twin
    buf = bytearray()
    rec = frame(buf, 7, 1.5, b"key", b"body!", b"pid-1", 42)
    assert rec == (7, 1.5, b"key", b"body!") and len(rec) == 4  # the tail cache's record: 4 items
    payload = struct.pack("<QdI", 7, 1.5, 3 | 1 << 31) + b"key" + struct.pack("<I", 5) + b"body!" \
        + b"pid-1" + struct.pack("<Q", 42) + bytes([5])
    assert bytes(buf) == struct.pack("<II", len(payload), crc32c.crc32c(payload)) + payload
    frame(buf, 8, 2.0, b"", b"plain")
    frame(buf, 9, 2.0, b"k", b"", b"", 0)      # an empty producer id is an id
    out = []
    assert decode(bytes(buf), 0, out, 0, 100, 100, 1 << 30, 0, True) == (len(buf), 14, 0)
    assert out == [(7, 1.5, b"key", b"body!", b"pid-1", 42), (8, 2.0, b"", b"plain"), (9, 2.0, b"k", b"", b"", 0)]
    assert (out[0].producer, out[0].pseq, out[1].producer, out[1].pseq) == (b"pid-1", 42, None, 0)
    plain = []
    decode(bytes(buf), 0, plain, 0, 100, 100, 1 << 30, 0)
    assert plain == [(7, 1.5, b"key", b"body!"), (8, 2.0, b"", b"plain"), (9, 2.0, b"k", b"")]
    assert all(len(r) == 4 for r in plain)      # what a broker delivers: 4 items, as before


@pytest.mark.parametrize("twin", TWINS)
def test_a_bad_producer_is_refused(twin):
    frame, _ = twin
    with pytest.raises(ValueError):
        frame(bytearray(), 1, 0.0, b"k", b"", b"x" * 256, 1)
    with pytest.raises(TypeError):
        frame(bytearray(), 1, 0.0, b"k", b"", "pid", 1)


def _records(draw_list):
    buf = bytearray()
    frame = codec.py_frame
    for i, (key, body, pid, pseq) in enumerate(draw_list):
        if pid is None:
            frame(buf, 10 + i, 1000.0 + i, key, body)
        else:
            frame(buf, 10 + i, 1000.0 + i, key, body, pid, pseq)
    return bytes(buf)


@pytest.mark.skipif(_journal is None, reason="the C codec is not built")
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=20), st.binary(max_size=40),
                          st.none() | st.binary(max_size=12), st.integers(0, 2 ** 64 - 1)), min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)), max_size=3),
       st.integers(0, 20), st.booleans(), st.booleans())
def test_the_walker_twins_agree_on_hostile_bytes(items, flips, cut, producers, refresh_crc):
    """Flipped bytes (with the CRC recomputed, as a buggy writer would leave them), torn tails: C and Python
    decode the same records with the same status; a walker never reads past a bad trailer length."""
    data = bytearray(_records(items))
    for at, value in flips:
        at %= len(data)
        data[at] = value
    if refresh_crc:                             # make the first record's CRC hold over its damaged fields
        length = int.from_bytes(data[:4], "little")
        if 24 <= length and 8 + length <= len(data):
            data[4:8] = crc32c.crc32c(bytes(data[8:8 + length])).to_bytes(4, "little")
    data = bytes(data[:len(data) - cut] if cut < len(data) else data)
    results = []
    for decode in DECODERS:
        out = []
        status = decode(data, 0, out, 0, 2 ** 64 - 1, 100, 1 << 30, 0, producers)
        results.append((status, [tuple(r) for r in out]))
    assert results[0] == results[1]
    walked = []
    at = 0
    while True:                                  # the Python walker step by step: the same records
        step = codec.walk(data, at)
        if step[0]:
            break
        walked.append(step[2])
        at = step[1]
    assert walked == [r[0] for r in results[0][1]]


def test_a_version_1_segment_stays_readable_and_new_records_go_to_version_2(tmp_path):
    d = str(tmp_path / "s")
    with Journal(d) as j:
        for i in range(10):
            j.append(b"k", b"%d" % i, timestamp=1000.0)
    seg = os.path.join(d, "%020d.seg" % 1)
    with open(seg, "r+b") as f:                  # records without a producer are the same bytes in 1 and 2
        f.seek(4)
        f.write(struct.pack("<H", 1))
    with JournalReader(d) as reader:
        assert [r.body for r in reader.records()] == [b"%d" % i for i in range(10)]
    with Journal(d) as j:
        assert [r.body for r in j.read(1, 100)] == [b"%d" % i for i in range(10)]
        j.append_record(b"k", b"10", producer=(b"p", 1))
    names = sorted(n for n in os.listdir(d) if n.endswith(".seg"))
    assert names == ["%020d.seg" % 1, "%020d.seg" % 11]  # the version 1 segment was sealed on open
    with open(os.path.join(d, names[1]), "rb") as f:
        assert struct.unpack("<4sH", f.read(6)) == (b"ZJSG", 2)
    assert [(r.body, r.producer, r.pseq) for r in _all(d)][-2:] == [(b"9", None, 0), (b"10", b"p", 1)]


# -- the producer table ------------------------------------------------------------------------

def test_producers_are_kept_across_a_clean_close_and_a_kill(tmp_path):
    d = str(tmp_path / "s")
    j = Journal(d)
    j.append_record(b"k", b"a", producer=(b"A", 1))
    j.append_record(b"k", b"b", producer=(b"B", 7))
    j.append_record(b"k", b"plain")
    j.append_record(b"k", b"a2", producer=(b"A", 2))
    assert j.producers() == {b"B": (7, 2), b"A": (2, 4)}
    assert list(j.producers()) == [b"B", b"A"]  # least recently appended first
    j.close()
    with Journal(d) as j:
        assert j.producers() == {b"B": (7, 2), b"A": (2, 4)}
        j.append_record(b"k", b"c", producer=(b"C", 1))
        j.write()
        j._release()                            # a kill: nothing closed, nothing synced by us
        j.closed = True
    with Journal(d) as j:
        assert j.producers() == {b"B": (7, 2), b"A": (2, 4), b"C": (1, 5)}
    assert [(r.body, r.producer, r.pseq) for r in _all(d)] == [
        (b"a", b"A", 1), (b"b", b"B", 7), (b"plain", None, 0), (b"a2", b"A", 2), (b"c", b"C", 1)]


def test_unwritten_and_cut_records_are_not_claimed(tmp_path):
    d = str(tmp_path / "s")
    j = Journal(d)
    j.append_record(b"k", b"1", producer=(b"P", 1))
    j.write()
    j.append_record(b"k", b"2", producer=(b"P", 2))   # never written: lost with the process
    assert j.producers()[b"P"] == (2, 2)
    j._release()
    j.closed = True
    with Journal(d) as j:
        assert j.producers() == {b"P": (1, 1)}  # a resend of 2 is journaled again, not dropped
        j.append_record(b"k", b"2", producer=(b"P", 2))
        j.append_record(b"k", b"3", producer=(b"P", 3))
    seg = os.path.join(d, "%020d.seg" % 1)
    with open(seg, "r+b") as f:                  # a torn last record: recovery cuts it
        f.truncate(os.path.getsize(seg) - 3)
    with Journal(d) as j:
        assert j.last_seq == 2 and j.producers() == {b"P": (2, 2)}


def test_the_table_is_bounded(tmp_path):
    d = str(tmp_path / "s")
    with Journal(d, max_producers=3, segment_bytes=300) as j:
        for n, pid in enumerate([b"a", b"b", b"c", b"a", b"d", b"e"], 1):
            j.append_record(b"k", b"x" * 40, producer=(pid, n))
            j.write()
        assert list(j.producers()) == [b"a", b"d", b"e"]
        assert j.stats()["producers"] == 3 and j.stats()["producers_evicted"] == 2
    with Journal(d, max_producers=3) as j:
        assert j.producers() == {b"a": (4, 4), b"d": (5, 5), b"e": (6, 6)}
    with Journal(d, max_producers=2) as j:      # a smaller budget keeps the most recent
        assert j.producers() == {b"d": (5, 5), b"e": (6, 6)}


def _fill(j, producers, rounds, body=b"x" * 100):
    expected = {}
    for n in range(rounds):
        pid = producers[n % len(producers)]
        seq = j.append_record(b"k", body, producer=(pid, n + 1)).seq
        expected[pid] = (n + 1, seq)
        if n % 7 == 0:
            j.write()
    j.write()
    return expected


def test_recovery_reads_the_snapshot_not_every_segment(tmp_path, caplog):
    d = str(tmp_path / "s")
    pids = [b"p%d" % i for i in range(20)]
    with Journal(d, segment_bytes=4096) as j:
        expected = _fill(j, pids, 600)
    segs = sorted(n for n in os.listdir(d) if n.endswith(".seg"))
    assert len(segs) > 10
    for name in segs[1:]:
        path = os.path.join(d, name)
        assert load_snapshot(snapshot_path(path), int(name[:20])) is not None
    for name in segs[:-1]:                       # sealed segments unreadable: recovery does not need them
        path = os.path.join(d, name)
        with open(path, "r+b") as f:
            f.seek(HEADER_SIZE + 10)
            f.write(b"\xff" * 8)
    with caplog.at_level(logging.WARNING), Journal(d) as j:
        assert j.producers() == expected
    assert "corrupt" not in caplog.text


def test_a_lost_snapshot_is_rebuilt_by_walking(tmp_path):
    d = str(tmp_path / "s")
    pids = [b"p%d" % i for i in range(5)]
    with Journal(d, segment_bytes=4096) as j:
        expected = _fill(j, pids, 300)
    pid_files = sorted(n for n in os.listdir(d) if n.endswith(".pid"))
    os.unlink(os.path.join(d, pid_files[-1]))   # the active segment's: walk the one before it
    with open(os.path.join(d, pid_files[-2]), "r+b") as f:
        f.seek(10)
        f.write(b"\x00\x01")                      # damaged (its CRC fails): walk from the one before that
    with Journal(d) as j:
        assert j.producers() == expected
    assert os.path.exists(os.path.join(d, pid_files[-1]))  # written again: the next open reads it
    for name in pid_files:
        os.unlink(os.path.join(d, name))
    with Journal(d) as j:                       # none at all: walk every segment
        assert j.producers() == expected


def test_retention_keeps_the_producers_of_removed_segments(tmp_path):
    d = str(tmp_path / "s")
    with Journal(d, segment_bytes=4096, retain_bytes=10000) as j:
        expected = _fill(j, [b"old"], 1)
        expected.update(_fill(j, [b"new"], 400))
        assert j.first_seq > 1                   # the "old" record is gone
        assert j.producers() == expected
    assert not any(n.endswith(".pid") and not os.path.exists(os.path.join(d, n[:-4] + ".seg"))
                   for n in os.listdir(d))
    with Journal(d, segment_bytes=4096) as j:
        assert j.producers() == expected


@pytest.mark.parametrize("implementation", ["c", "numpy"])
def test_the_spark_reader_walks_producer_records(tmp_path, monkeypatch, implementation):
    """The Arrow reader (C ``columns`` and its numpy twin, both over the one walker): bodies without the
    producer trailer, every record once, across sealed segments (read with their index) and the active one."""
    pytest.importorskip("pyarrow")
    from zactors.patterns.zeps.spark import segments
    if implementation == "c":
        if segments._c_columns is None:
            pytest.skip("the C journal codec is not built (or ZACTORS_PURE_PYTHON is set)")
        monkeypatch.setattr(segments, "_chunk_columns", segments._columns_c)
    else:
        monkeypatch.setattr(segments, "_chunk_columns", segments._columns_numpy)
    d = str(tmp_path / "s")
    rng = random.Random(5)
    with Journal(d, segment_bytes=8192) as j:
        for i in range(2000):
            producer = (rng.randbytes(rng.choice([0, 8, 200])), i) if i % 3 else None
            j.append_record(b"k%d" % (i % 7), rng.randbytes(rng.choice([0, 5, 300])), producer=producer)
            if i % 50 == 0:
                j.write()
        j.write()
        want = [(r.seq, r.key, r.body) for r in j.read(1, 10 ** 6, None)]
    got = []
    with JournalReader(d) as reader:
        assert len(reader.segments()) > 5
        for base, path, *_ in reader.segments():
            for chunk in (8 << 20, 1000):
                rows = []
                for batch in segments.segment_batches(path, base, 1, 10 ** 9, chunk=chunk):
                    b = batch.to_pydict()
                    rows.extend(zip(b["seq"], b["key"], b["body"]))
                got.append(rows)
    assert [row for rows in got[0::2] for row in rows] == want
    assert [row for rows in got[1::2] for row in rows] == want   # records cut across small reads


# -- crash consistency: the table matches what survived ----------------------------------------

def _survivors(directory):
    """{pid: (last pseq, seq)} computed from the records on disk (the truth the table must match)."""
    table = {}
    with JournalReader(directory) as reader:
        for rec in reader.records(producers=True):
            if rec.producer is not None:
                table.pop(rec.producer, None)
                table[rec.producer] = (rec.pseq, rec.seq)
    return table


def _crash_cycles(directory, seed, cycles):
    rng = random.Random(seed)
    files = CrashFiles(directory)
    pseqs = {}                                   # pid -> next pseq the producer would use
    checks = dict(crashes=0, records=0, from_snapshot=0)
    for _ in range(cycles):
        files.crash_at = files.ops + rng.randint(1, 60)
        try:
            j = Journal(directory, files=files, segment_bytes=rng.choice([300, 800, 2048]), max_producers=1000)
            for pid, (pseq, _seq) in j.producers().items():
                pseqs[pid] = pseq + 1            # a producer resends from after what the journal kept
            for _ in range(rng.randint(1, 40)):
                op = rng.random()
                if op < 0.6:
                    pid = b"p%d" % rng.randrange(6)
                    pseq = pseqs.get(pid, 1)
                    j.append_record(b"k", rng.randbytes(rng.choice([0, 10, 90])), timestamp=1000.0,
                                    producer=(pid, pseq))
                    pseqs[pid] = pseq + 1
                elif op < 0.7:
                    j.append(b"k", b"plain", timestamp=1000.0)
                elif op < 0.9:
                    j.write()
                else:
                    j.sync()
            files.crash()
        except SimulatedCrash:
            pass
        checks["crashes"] += 1
        files.restore(rng)
        segs = sorted(n for n in os.listdir(directory) if n.endswith(".seg"))
        newest = os.path.join(directory, segs[-1])
        if len(segs) > 1 and load_snapshot(snapshot_path(newest), int(segs[-1][:20])) is not None:
            checks["from_snapshot"] += 1         # recovery starts from the snapshot, not by walking
        while True:
            try:
                j = Journal(directory, files=files, max_producers=1000)
                break
            except SimulatedCrash:
                files.restore(rng)
        files.crash_at = None
        table = j.producers()
        truth = _survivors(directory)
        assert table == truth, "seed %d: the producer table claims %r, the disk holds %r" % (seed, table, truth)
        checks["records"] += j.last_seq
        j.close()
    return checks


def test_after_a_power_loss_the_table_claims_only_what_survived(fast_dir):  # noqa: F811
    """Hundreds of crash points: appends with producers, writes, fsyncs, rolls; power lost at a random
    file operation (unsynced writes, snapshots and directory entries dropped, torn tails); on reopen the
    table equals what the surviving records say, so a resend is never dropped as a duplicate of a lost one."""
    totals = {}
    for seed in range(4):
        directory = fast_dir / ("s%d" % seed)
        directory.mkdir()
        for key, value in _crash_cycles(directory, seed, 100).items():
            totals[key] = totals.get(key, 0) + value
    print("producer crash test: %s" % totals)
    assert totals["crashes"] == 400 and totals["records"] > 1000 and totals["from_snapshot"] > 50
