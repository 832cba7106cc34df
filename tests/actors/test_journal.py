"""Journal: append/write/sync/read round trips, segments, seeking, reopening."""
import os
import subprocess
import sys
import threading

import pytest

from zactors.actors.journal import (
    HEADER_SIZE, RECORD_OVERHEAD, Journal, JournalError, JournalFull, JournalReader, Record,
    SequenceGone, segment_name,
)

pytestmark = pytest.mark.timeout(60)


def fill(journal, count, start=0, ts=None):
    return [journal.append(b"k%d" % i, b"body-%d" % i, None if ts is None else ts + i)
            for i in range(start, start + count)]


def test_append_read_round_trip(tmp_path):
    with Journal(tmp_path / "s") as j:
        assert (j.first_seq, j.last_seq, j.written_seq, j.synced_seq) == (1, 0, 0, 0)
        assert j.append(b"key", b"body", timestamp=10.0) == 1
        assert j.append(bytearray(b"k2"), memoryview(b"b2"), timestamp=11.0) == 2
        assert j.last_seq == 2 and j.written_seq == 0, "append does no I/O"
        assert j.read(1) == [Record(1, 10.0, b"key", b"body"), Record(2, 11.0, b"k2", b"b2")]
        assert j.write() == 2 and j.written_seq == 2 and j.synced_seq == 0
        assert j.sync() == 2 and j.synced_seq == 2
        assert j.read(2) == [Record(2, 11.0, b"k2", b"b2")]
        assert j.read(3) == []
        assert type(j.read(2)[0].key) is bytes
    with Journal(tmp_path / "s", tail_cache_bytes=0) as j:
        assert j.read(1) == [Record(1, 10.0, b"key", b"body"), Record(2, 11.0, b"k2", b"b2")]


def test_empty_key_and_body_and_bad_types(tmp_path):
    with Journal(tmp_path) as j:
        assert j.append(b"", b"") == 1
        with pytest.raises(TypeError):
            j.append("text", b"x")
        j.write()
    with Journal(tmp_path) as j:
        assert [(r.key, r.body) for r in j.read(1)] == [(b"", b"")]
        assert j.last_seq == 1


def test_read_limits_and_sequences(tmp_path):
    with Journal(tmp_path) as j:
        fill(j, 100)
        j.write()
        assert [r.seq for r in j.read(10, max_records=5)] == [10, 11, 12, 13, 14]
        # max_bytes counts key + body; at least one record always comes back
        one = len(b"k10") + len(b"body-10")
        assert len(j.read(11, max_bytes=2 * one)) == 2
        assert len(j.read(11, max_bytes=1)) == 1
        with pytest.raises(ValueError):
            j.read(0)
    with Journal(tmp_path, tail_cache_bytes=0) as j:          # the same from disk
        assert [r.seq for r in j.read(10, max_records=5)] == [10, 11, 12, 13, 14]
        assert len(j.read(11, max_bytes=2 * one)) == 2
        assert len(j.read(11, max_bytes=1)) == 1
        assert [r.seq for r in j.read(95, max_records=100)] == list(range(95, 101))


def test_segments_roll_over_and_reads_span_them(tmp_path):
    record = RECORD_OVERHEAD + len(b"k10") + len(b"body-10")
    with Journal(tmp_path, segment_bytes=HEADER_SIZE + 10 * record, tail_cache_bytes=0) as j:
        fill(j, 10, 0)          # k0..k9 are shorter; exactly one segment's worth or less
        fill(j, 95, 10)
        j.write()
        names = sorted(n for n in os.listdir(tmp_path) if n.endswith(".seg"))
        assert len(names) >= 9
        assert names[0] == segment_name(1) == "00000000000000000001.seg"
        for name in names:
            assert os.path.getsize(tmp_path / name) <= HEADER_SIZE + 10 * record
        got = []
        seq = 1
        while True:
            batch = j.read(seq, max_records=7)
            if not batch:
                break
            got.extend(batch)
            seq = batch[-1].seq + 1
        assert [r.seq for r in got] == list(range(1, 106))
        assert [r.body for r in got] == [b"body-%d" % i for i in range(105)]
        assert len(j.read(1, max_records=1000)) == 105, "one read spans segments"
        assert j.stats()["segments"] == len(names)


def test_record_larger_than_a_segment(tmp_path):
    big = os.urandom(3 << 20)
    with Journal(tmp_path, segment_bytes=1 << 16, tail_cache_bytes=0) as j:
        fill(j, 3)
        assert j.append(b"big", big) == 4
        fill(j, 3, 3)
        j.write()
        assert j.read(4, max_records=1)[0].body == big
    with Journal(tmp_path, tail_cache_bytes=0) as j:
        assert j.last_seq == 7
        assert [r.seq for r in j.read(1, max_bytes=None)] == list(range(1, 8))
        assert j.read(4, max_records=1)[0].body == big


def test_reopen_continues_the_sequence(tmp_path):
    with Journal(tmp_path, segment_bytes=1024) as j:
        fill(j, 50)
    for round in range(3):
        with Journal(tmp_path, segment_bytes=1024) as j:
            assert j.first_seq == 1 and j.last_seq == j.written_seq == j.synced_seq == 50 + 10 * round
            assert j.append(b"again", b"%d" % round) == 51 + 10 * round
            fill(j, 9)
    with Journal(tmp_path) as j:
        recs = j.read(1, max_records=10_000)
        assert [r.seq for r in recs] == list(range(1, 81))


def test_close_writes_and_unwritten_records_are_not_promised(tmp_path):
    j = Journal(tmp_path)
    fill(j, 5)
    j.close()
    with pytest.raises(JournalError, match="closed"):
        j.append(b"k", b"v")
    with Journal(tmp_path) as j:
        assert j.last_seq == 5


def test_one_writer_per_directory(tmp_path):
    with Journal(tmp_path):
        with pytest.raises(JournalError, match="another writer"):
            Journal(tmp_path)
    Journal(tmp_path).close()


def test_timestamps_never_go_backwards(tmp_path):
    with Journal(tmp_path) as j:
        j.append(b"a", b"", timestamp=100.0)
        j.append(b"b", b"", timestamp=50.0)
        j.append(b"c", b"", timestamp=101)
        assert [r.timestamp for r in j.read(1)] == [100.0, 100.0, 101.0]
        for bad in (float("nan"), float("inf"), -float("inf")):
            with pytest.raises(ValueError):
                j.append(b"d", b"", timestamp=bad)
        assert j.last_seq == 3


@pytest.mark.parametrize("cache", [32 << 20, 0])
def test_seek_by_time(tmp_path, cache):
    with Journal(tmp_path, segment_bytes=2048, tail_cache_bytes=cache) as j:
        fill(j, 300, ts=1000.0)         # record i has timestamp 1000 + i
        j.write()
        assert j.seq_at_time(0) == 1
        assert j.seq_at_time(1000.0) == 1
        assert j.seq_at_time(1000.5) == 2
        assert j.seq_at_time(1150.0) == 151
        assert j.seq_at_time(1299.0) == 300
        assert j.seq_at_time(1299.5) == 301 == j.last_seq + 1
        for t in range(1000, 1300, 7):
            assert j.seq_at_time(t) == t - 999
    with Journal(tmp_path, tail_cache_bytes=cache) as j:
        for t in range(1000, 1300, 13):
            assert j.seq_at_time(t - 0.5) == t - 999
        r = JournalReader(tmp_path)
        assert r.seq_at_time(1150.0) == 151
        assert [x.seq for x in r.records(since=1290.0, until=1295.0)] == list(range(291, 297))


def test_seek_by_time_equal_timestamps(tmp_path):
    with Journal(tmp_path, segment_bytes=1024, tail_cache_bytes=0) as j:
        for i in range(200):
            j.append(b"k", b"v" * 10, timestamp=float(i // 50))
        j.write()
        assert [j.seq_at_time(t) for t in (0, 1, 2, 3, 4)] == [1, 51, 101, 151, 201]


def test_tail_cache_is_bounded_and_serves_recent_records(tmp_path):
    with Journal(tmp_path, tail_cache_bytes=64 << 10) as j:
        fill(j, 5000)
        st = j.stats()
        assert st["cache_records"] == 5000, "unwritten records stay cached"
        j.write()
        fill(j, 10, 5000)
        st = j.stats()
        assert st["cache_bytes"] <= 64 << 10
        assert 0 < st["cache_records"] < 5000
        assert [r.seq for r in j.read(5005, max_records=3)] == [5005, 5006, 5007]
        assert [r.seq for r in j.read(1, max_records=3)] == [1, 2, 3], "older ones from disk"


def test_buffer_bound_raises_journal_full(tmp_path):
    with Journal(tmp_path, buffer_bytes=4096) as j:
        with pytest.raises(JournalFull, match="write"):
            for i in range(1000):
                j.append(b"k", b"x" * 100)
        last = j.last_seq
        assert j.write() == last
        assert j.append(b"k", b"after") == last + 1


def test_write_and_sync_in_threads_while_appending(tmp_path):
    """The loop keeps appending while another thread writes and syncs."""
    stop = threading.Event()
    errors = []
    j = Journal(tmp_path, segment_bytes=64 << 10, tail_cache_bytes=1 << 16)

    def flusher():
        try:
            while not stop.is_set():
                j.write()
                j.sync()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(30000):
            j.append(b"k%d" % i, b"v" * (i % 50))
    finally:
        stop.set()
        t.join(10)
    assert not errors
    j.write()
    j.sync()
    assert j.synced_seq == 30000
    j.close()
    with Journal(tmp_path, tail_cache_bytes=0) as j:
        assert j.last_seq == 30000
        seq = 1
        while seq <= 30000:
            batch = j.read(seq, max_records=5000)
            for rec in batch:
                assert rec.key == b"k%d" % (rec.seq - 1) and len(rec.body) == (rec.seq - 1) % 50
            assert batch[0].seq == seq
            seq = batch[-1].seq + 1


def test_reader_imports_no_gevent(tmp_path):
    with Journal(tmp_path) as j:
        fill(j, 10)
    code = ("import sys, zactors.actors.journal as m; assert 'gevent' not in sys.modules, 'gevent';"
            "assert 'zmq' not in sys.modules, 'zmq';"
            "r = m.JournalReader(sys.argv[1]); print(len(list(r.records())));"
            "assert 'gevent' not in sys.modules, 'gevent after reading'")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "10"


def test_kernel_names_still_import():
    from zactors.actors import Actor, ActorError, Event, Reactor, Socket, command, context
    import zactors.actors as actors
    assert Actor.__name__ == "Actor" and callable(command) and callable(context)
    assert issubclass(ActorError, Exception) and Event and Reactor and Socket
    assert {"Actor", "Reactor", "Socket", "Event", "ActorError"} <= set(dir(actors))
    with pytest.raises(AttributeError):
        actors.NoSuchThing


def test_sequence_gone_carries_first_seq():
    exc = SequenceGone(42)
    assert exc.first_seq == 42 and isinstance(exc, JournalError) and "42" in str(exc)


def test_open_errors_are_journal_errors(tmp_path):
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(JournalError, match="ENOTDIR|EEXIST"):
        Journal(tmp_path / "file")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / segment_name(1)).write_bytes(b"NOTAJOURNALSEGMENT" + b"\0" * 40)
    with pytest.raises(JournalError, match="bad segment header"):
        Journal(bad)
    assert (bad / segment_name(1)).read_bytes().startswith(b"NOTAJOURNAL"), "a foreign file is not cut"
