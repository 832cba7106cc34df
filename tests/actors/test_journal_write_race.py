"""A failed write() in a thread while the loop appends keeps every record (defect 4)."""
import errno
import os
import threading

import pytest

from zactors.actors.journal import Files, Journal, JournalFull

pytestmark = pytest.mark.timeout(60)


class StallThenFail(Files):
    """``write`` parks until ``go`` is set (appends land meanwhile), writes part
    of the data, then fails with ENOSPC; once ``healed`` it writes normally."""

    def __init__(self):
        self.armed = False
        self.entered = threading.Event()
        self.go = threading.Event()
        self.healed = False

    def write(self, fd, data):
        if self.armed and not self.healed:
            self.armed = False
            self.entered.set()
            assert self.go.wait(30)
            os.write(fd, bytes(data[:len(data) // 2]))     # a torn record on disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(fd, data)


@pytest.mark.parametrize("roll", [False, True])
def test_failed_threaded_write_keeps_records_appended_meanwhile(tmp_path, roll):
    files = StallThenFail()
    j = Journal(tmp_path / "s", files=files, segment_bytes=2048 if roll else 1 << 20)
    bodies = {}

    def add(n):
        for _ in range(n):
            body = b"body-%d" % (j.last_seq + 1) * 3
            bodies[j.append(b"k", body)] = body

    try:
        add(5)
        assert j.write() == 5
        add(20)
        files.armed = True
        outcome = []

        def writer():
            try:
                outcome.append(j.write())
            except Exception as exc:
                outcome.append(exc)

        thread = threading.Thread(target=writer)
        thread.start()
        assert files.entered.wait(30)
        add(30)                     # lands while the write is in flight (a segment roll with roll=True)
        files.go.set()
        thread.join(30)
        assert len(outcome) == 1 and isinstance(outcome[0], JournalFull), outcome
        assert j.written_seq == 5, "written_seq does not pass the records the failed write held"
        assert j.last_seq == 55
        with pytest.raises(JournalFull):
            j.append(b"k", b"refused while the error stands")
        files.healed = True
        assert j.write() == 55, "the retry writes every held record"
        assert j.written_seq == j.last_seq == 55
        add(3)
        assert j.write() == 58
        recs = j.read(1, max_records=1000, max_bytes=None)
        assert [r.seq for r in recs] == list(range(1, 59))
    finally:
        j.close()
    with Journal(tmp_path / "s", tail_cache_bytes=0) as j:
        recs = j.read(1, max_records=1000, max_bytes=None)
        assert [r.seq for r in recs] == list(range(1, 59))
        assert all(r.body == bodies[r.seq] for r in recs)
        assert j.stats()["truncated_bytes"] == 0, "the torn part of the failed write was cut at once"
