"""JournalActor and GroupCommit: the journal driven from an actor's loop."""
import pytest

from tests.conftest import wait_for
from zactors.actors import Actor, CommandError, command
from zactors.actors.group_commit import GroupCommit
from tests.actors.test_journal_enospc import small_disk  # noqa: F401,F811  (fixture: a 256 KiB tmpfs)
from zactors.actors.journal import Journal
from zactors.actors.journal_actor import JournalActor

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def actors():
    made = []

    def make(cls, *args, **kwargs):
        actor = cls(*args, **kwargs)
        made.append(actor)
        return actor

    yield make
    for actor in made:
        actor.destroy()


def test_append_flush_read(tmp_path, actors):
    ja = actors(JournalActor, str(tmp_path / "s"), fsync="interval", interval=0.05)
    seqs = [ja.call("APPEND", b"k%d" % i, b"v%d" % i) for i in range(100)]
    assert seqs == list(range(1, 101))
    assert ja.call("FLUSH", timeout=10) >= 100
    first, last, written, synced = ja.call("RANGE")
    assert (first, last) == (1, 100) and written == 100
    assert ja.call("FLUSH", True, timeout=10) >= 100, "a durable flush waits for the fsync"
    assert ja.call("RANGE")[3] == 100
    recs = ja.call("READ", 10, 3)
    assert recs == [[10, recs[0][1], b"k9", b"v9"], [11, recs[1][1], b"k10", b"v10"],
                    [12, recs[2][1], b"k11", b"v11"]]
    assert ja.call("SEQ_AT_TIME", 0) == 1
    assert ja.call("STATS")["last_seq"] == 100
    with pytest.raises(CommandError):
        ja.call("READ", 0)
    ja.destroy()
    with Journal(tmp_path / "s") as j:
        assert j.last_seq == 100 and j.read(100)[0].body == b"v99"


def test_interval_fsync_without_any_flush(tmp_path, actors):
    ja = actors(JournalActor, str(tmp_path), fsync="interval", interval=0.02)
    for i in range(10):
        ja.call("APPEND", b"k", b"v")
    wait_for(lambda: ja.call("RANGE")[3] == 10, timeout=10, what="the interval fsync")


def test_never_fsync_still_writes(tmp_path, actors):
    ja = actors(JournalActor, str(tmp_path), fsync="never")
    ja.call("APPEND", b"k", b"v")
    wait_for(lambda: ja.call("RANGE")[2] == 1, timeout=10, what="the write")
    assert ja.call("FLUSH", True, timeout=10) == 1, "a durable flush fsyncs even under 'never'"


def test_setup_error_reaches_the_parent(tmp_path):
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(Exception):
        JournalActor(str(tmp_path / "file" / "sub"))
    with pytest.raises(ValueError):
        JournalActor(str(tmp_path / "x"), fsync="sometimes")


class Owner(Actor):
    """What a broker does: append per message, group commit in the background."""

    def __init__(self, directory, fsync):
        self.directory = directory
        self.fsync = fsync
        self.written = []
        self.synced = []

    def setup(self):
        self.journal = Journal(self.directory)
        self.commit = GroupCommit(self, self.journal, fsync=self.fsync, interval=0.01,
                                  on_written=self.written.append, on_synced=self.synced.append)
        self.commit.start()
        self.ticks = 0
        self.call_every(0.001, self._tick)

    def _tick(self):
        self.ticks += 1

    def teardown(self):
        self.commit.stop()
        self.journal.close()

    @command(reply=True)
    def burst(self, n):
        for i in range(n):
            self.journal.append(b"k", b"x" * 100)
        self.commit.kick()
        return self.journal.last_seq

    @command(deferred=True)
    def flush(self, reply, durable):
        (self.commit.when_synced if durable else self.commit.when_written)(reply)

    @command(deferred=True)
    def burst_and_wait(self, reply, n, upto=None, tell_failure=True):
        """Append ``n``, then answer once written up to ``upto`` (default: all), or failed."""
        for i in range(n):
            self.journal.append(b"k", b"x" * 100)
        self.commit.kick()
        self.commit.when_written(lambda seq: reply(["written", seq]), upto,
                                 (lambda exc: reply(["failed", str(exc)])) if tell_failure else None)

    @command(reply=True)
    def state(self):
        return [self.journal.written_seq, self.journal.synced_seq, len(self.written), len(self.synced),
                self.ticks]


@pytest.mark.parametrize("fsync", ["batch", "interval"])
def test_group_commit_batches_and_keeps_the_loop_running(tmp_path, actors, fsync):
    owner = actors(Owner, str(tmp_path), fsync)
    total = 0
    for _ in range(20):
        total = owner.call("BURST", 500)
    assert owner.call("FLUSH", True, timeout=20) >= total
    written, synced, writes, syncs, ticks = owner.call("STATE")
    assert written == synced == total == 10_000
    assert 1 <= writes <= 20 + 2, "one write per round of appends, not one per record"
    assert 1 <= syncs <= writes, "fsyncs are grouped"
    before = owner.call("STATE")[4]
    wait_for(lambda: owner.call("STATE")[4] > before + 5, timeout=10, what="timers to keep firing")


def test_when_written_waits_for_a_given_sequence(tmp_path, actors):
    owner = actors(Owner, str(tmp_path), "never")
    assert owner.call("BURST_AND_WAIT", 10, 4) == ["written", 10]  # one write covers all ten
    assert owner.call("BURST_AND_WAIT", 0, 3) == ["written", 10]  # written already: answered at once


def test_a_waiter_with_on_error_hears_of_a_failed_write(small_disk, actors):  # noqa: F811
    (small_disk / "filler").write_bytes(b"\0" * (160 << 10))
    owner = actors(Owner, str(small_disk / "j"), "never")
    kind, reason = owner.call("BURST_AND_WAIT", 1200, timeout=20)   # ~160 KiB: more than is left
    assert kind == "failed" and "ENOSPC" in reason
    (small_disk / "filler").unlink()
    # a waiter without on_error waits for the retried write (every retry=1 s)
    assert owner.call("BURST_AND_WAIT", 0, None, False, timeout=20) == ["written", 1200]
