"""Read descriptors of sealed segments live in a small LRU cache; a segment roll's fsyncs run off the hub."""
import os
import threading

import pytest

from tests.conftest import wait_for
from zactors.actors.journal import Files, Journal, JournalReader
from zactors.actors.journal_actor import JournalActor

pytestmark = pytest.mark.timeout(60)


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def make_segments(directory, n):
    with Journal(directory, segment_bytes=1024) as j:
        while j.stats()["segments"] < n + 5:
            for _ in range(5):
                j.append(b"k", b"x" * 150)
            j.write()
        return j.last_seq


@pytest.fixture(scope="module")
def journal_of_200_segments(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fds") / "s"
    last = make_segments(directory, 200)
    return directory, last


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
@pytest.mark.parametrize("cap", [1, 8, 16])
def test_replay_over_200_segments_keeps_at_most_cap_fds(journal_of_200_segments, cap):
    directory, last = journal_of_200_segments
    before = open_fds()
    j = Journal(directory, segment_bytes=1024, tail_cache_bytes=0, open_segments=cap)
    try:
        assert j.stats()["segments"] > 200
        opened = open_fds() - before      # LOCK, the active segment's write fd, its read fd
        peak = 0
        seq = 1
        while seq <= last:
            recs = j.read(seq, max_records=7)
            assert recs and recs[0].seq == seq
            seq = recs[-1].seq + 1
            peak = max(peak, open_fds() - before)
        assert seq == last + 1
        assert peak <= 2 + cap, "a replay keeps at most the cap of read fds open (peak %d)" % peak
        stats = j.stats()
        assert stats["open_fds"] <= cap and stats["fd_opens"] > 200 and stats["fd_evictions"] >= 200 - cap
        assert opened <= 3
    finally:
        j.close()
    assert open_fds() == before, "close releases every descriptor"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_journal_reader_keeps_at_most_cap_fds(journal_of_200_segments):
    directory, last = journal_of_200_segments
    before = open_fds()
    with JournalReader(directory, open_segments=4) as reader:
        peak = 0
        count = 0
        for rec in reader.records():
            count += 1
            if count % 50 == 0:
                peak = max(peak, open_fds() - before)
        assert count == last
        assert peak <= 4
    assert open_fds() == before


class ThreadOfFsync(Files):
    """Real files; records the thread of every fsync while ``watching``."""

    def __init__(self):
        self.watching = False
        self.threads = []

    def fsync(self, fd):
        if self.watching:
            self.threads.append(threading.get_ident())
        super().fsync(fd)

    def fsync_dir(self, directory):
        if self.watching:
            self.threads.append(threading.get_ident())
        super().fsync_dir(directory)


def test_segment_roll_fsyncs_run_off_the_hub(tmp_path):
    files = ThreadOfFsync()
    actor = JournalActor(str(tmp_path / "s"), fsync="never", segment_bytes=2048, files=files)
    try:
        files.watching = True
        for i in range(200):
            actor.call("APPEND", b"k", b"x" * 100)
        assert actor.call("FLUSH", timeout=10) == 200
        wait_for(lambda: actor.call("STATS")["segments"] >= 10, timeout=10, what="segment rolls")
        assert actor.call("FLUSH", True, timeout=10) == 200
        files.watching = False
        hub = threading.get_ident()       # the actor's greenlet runs in this thread
        assert len(files.threads) >= 20, "each roll fsyncs the old segment, the new one and the directory"
        assert hub not in files.threads, "no fsync ran on the hub"
    finally:
        actor.destroy()


def test_cached_says_when_a_read_needs_the_disk(tmp_path):
    with Journal(tmp_path, tail_cache_bytes=0) as j:
        j.append(b"k", b"v")
        assert j.cached(1) and j.cached(2), "unwritten records stay in memory"
        j.write()
        j.append(b"k", b"v2")               # evicts what was written
        assert not j.cached(1) and j.cached(2)
