"""The journal writer's append in C (``Appender.append_record``) against its pure-Python twin
(``Journal._append_record``, the general path): the same bytes on disk, the same Records, index
and tail cache, the same refusals.  Both run in one process, side by side, on two journals."""
import gc
import os
import random
import threading
import time

import pytest

from zactors.actors import journal_codec as codec
from zactors.actors.journal import Journal, JournalError, JournalFull
from zactors.actors.purepython import pure_python_requested

from tests import ctoolchain

pytestmark = pytest.mark.timeout(120)

needs_c = pytest.mark.skipif(not codec.SPEEDUPS, reason="the C Appender is not in use")


def _c_append(j, *args, **kwargs):
    return j.append_record(*args, **kwargs)


def _py_append(j, *args, **kwargs):
    return Journal._append_record(j, *args, **kwargs)


def _files(directory):
    out = {}
    for name in sorted(os.listdir(directory)):
        if name != "LOCK":
            with open(os.path.join(directory, name), "rb") as f:
                out[name] = f.read()
    return out


def _state(j):
    seg = j._segments[-1]
    stats = j.stats()
    del stats["directory"]
    return (stats, j._next_seq, j._last_ts, j._tail_end, j._pending_bytes, j._index_at, j._cache_bytes,
            j._evict_at, [(c[1], c[2]) for c in j._pending], list(j._cache), seg.idx_seq, seg.idx_ts, seg.idx_off)


@pytest.mark.skipif(pure_python_requested(), reason="pure Python asked for")
@pytest.mark.skipif(bool(ctoolchain.missing()), reason="pure Python: %s" % ctoolchain.missing())
def test_the_c_appender_is_built_and_is_the_writers_base():
    assert codec.SPEEDUPS and Journal.__mro__[1] is codec.Appender and codec.Appender is not codec.PyAppender
    assert Journal.append_record is not Journal._append_record


def test_the_pure_python_writer_appends_with_its_general_path():
    if codec.SPEEDUPS:
        pytest.skip("the C Appender is in use")
    assert Journal.append_record is Journal._append_record and issubclass(Journal, codec.PyAppender)


@needs_c
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_c_and_python_appends_leave_the_same_bytes_records_index_and_cache(tmp_path, seed):
    rng = random.Random(seed)
    options = dict(segment_bytes=rng.choice([2048, 9000, 1 << 16]), tail_cache_bytes=rng.choice([0, 3000, 1 << 20]),
                   buffer_bytes=rng.choice([5000, 1 << 20]))
    journals = [Journal(tmp_path / name, **options) for name in ("c", "py")]
    ts = 1000.0
    try:
        for i in range(1500):
            key = b"k.%d" % rng.randrange(9)
            body = rng.randbytes(rng.choice([0, 1, 40, 100, 700, 3000]))
            ts += rng.choice([0.0, 0.001, -0.5])     # sometimes backwards: raised to the last
            got = []
            for j, append in zip(journals, (_c_append, _py_append)):
                try:
                    got.append(append(j, key, body, ts))
                except JournalFull as exc:          # the buffer is full: both refuse, then write
                    got.append(type(exc))
                    j.write()
            assert got[0] == got[1]
            if rng.random() < 0.05:
                for j in journals:
                    j.write()
            assert _state(journals[0]) == _state(journals[1])
        assert journals[0].read(1, 10 ** 6, None) == journals[1].read(1, 10 ** 6, None)
    finally:
        for j in journals:
            j.close()
    assert _files(tmp_path / "c") == _files(tmp_path / "py")


@needs_c
def test_what_the_c_path_does_not_take_goes_to_the_general_path(tmp_path):
    with Journal(tmp_path) as j:
        assert j.append_record(b"k", b"plain", 5.0).seq == 1
        assert j.append_record(b"k", b"int stamp", 7) == (2, 7.0, b"k", b"int stamp")
        assert j.append_record(bytearray(b"k"), memoryview(b"view")) == (3, j._last_ts, b"k", b"view")
        now = j.append_record(b"k", b"now").timestamp         # the C path's clock is time.time()'s
        assert type(now) is float and j._last_ts == now and abs(now - time.time()) < 60
        assert j.append_record(b"k", b"before", now - 10).timestamp == now    # never backwards
        assert j.append_record(key=b"k", body=b"keywords").seq == 6
        assert j.append_record(b"k", b"producer", None, (b"pid", 3)).seq == 7
        assert j.producer(b"pid") == (3, 7)
        for bad in (float("nan"), float("inf")):
            with pytest.raises(ValueError):
                j.append_record(b"k", b"x", bad)
        with pytest.raises(TypeError):
            j.append_record(b"k", "text")
        with pytest.raises(TypeError):
            j.append_record(b"k", b"x", None, None, 1)
        assert j.last_seq == 7
    with Journal(tmp_path) as j:
        assert [r.body for r in j.read(1)] == [b"plain", b"int stamp", b"view", b"now", b"before", b"keywords",
                                               b"producer"]


@needs_c
def test_a_refusing_journal_refuses_the_c_path_too(tmp_path):
    j = Journal(tmp_path)
    j.close()
    with pytest.raises(JournalError, match="closed"):
        j.append_record(b"k", b"x")


@needs_c
def test_the_c_append_waits_for_the_writers_lock(tmp_path):
    with Journal(tmp_path) as j:
        j._lock.acquire()
        done = threading.Event()
        thread = threading.Thread(target=lambda: (j.append_record(b"k", b"x"), done.set()))
        thread.start()
        assert not done.wait(0.2)                   # held: the append waits (a swap in write() is atomic)
        assert j.last_seq == 0
        j._lock.release()
        assert done.wait(30)
        thread.join(30)
        assert j.last_seq == 1


@needs_c
def test_the_garbage_collector_sees_what_the_c_state_holds(tmp_path):
    with Journal(tmp_path) as j:
        j.append_record(b"k", b"x")
        referents = gc.get_referents(j)
        assert any(obj is j._pending for obj in referents) and any(obj is j._cache for obj in referents)
        assert any(obj is j._lock for obj in referents)


@needs_c
def test_the_writers_c_lock_behaves_as_a_plain_lock(tmp_path):
    from zactors.actors._journal import Lock
    lock = Lock()
    assert not lock.locked()
    with lock:
        assert lock.locked()
    assert not lock.locked() and lock.acquire() is True and lock.locked()
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()
    with pytest.raises(TypeError):
        Lock(1)
    taken = threading.Event()
    lock.acquire()
    thread = threading.Thread(target=lambda: (lock.acquire(), taken.set(), lock.release()))
    thread.start()
    assert not taken.wait(0.2)                      # a second taker waits, the GIL released meanwhile
    lock.release()
    assert taken.wait(30)
    thread.join(30)
    with Journal(tmp_path) as j:
        assert type(j._lock) is Lock
