"""Acknowledgement levels: a ``synced`` waiter runs only once an fsync covered its records (crash layer)."""
import pytest

from tests.actors.crashfs import CrashFiles, SimulatedCrash
from tests.conftest import wait_for
from zactors.actors import Actor, command
from zactors.actors.group_commit import ACK_LEVELS, SYNCED, WRITTEN, GroupCommit
from zactors.actors.journal import Journal

pytestmark = pytest.mark.timeout(60)


class Owner(Actor):
    """Appends bursts; the moment a waiter is served, the power goes (the layer crashes)."""

    def __init__(self, directory, files, fsync, level):
        self.directory = directory
        self.files = files
        self.fsync = fsync
        self.level = level
        self.acked = []         # (seq acknowledged, last seq appended then)

    def setup(self):
        self.journal = Journal(self.directory, files=self.files, segment_bytes=4096)
        self.commit = GroupCommit(self, self.journal, fsync=self.fsync, interval=0.005)
        self.commit.start()

    def teardown(self):
        try:
            self.commit.stop()
            self.journal.close()
        except SimulatedCrash:
            pass

    def _ack(self, seq):
        if not self.acked:
            self.acked.append((seq, self.journal.last_seq))
            self.files.crash()          # power loss right after the acknowledgement

    @command(reply=True)
    def burst(self, n, waiters):
        for i in range(n):
            seq = self.journal.append(b"k", b"x%d" % i)
            if i % (n // waiters) == 0:
                self.commit.when(self.level, self._ack, seq)
        self.commit.kick()
        return self.journal.last_seq

    @command(reply=True)
    def acked_(self):
        return self.acked


@pytest.mark.parametrize("fsync", ["batch", "interval", "never"])
def test_synced_ack_survives_a_power_loss_right_after_it(tmp_path, fsync):
    for round_ in range(5):
        files = CrashFiles(tmp_path)
        d = tmp_path / ("s%d" % round_)
        owner = Owner(str(d), files, fsync, SYNCED)
        try:
            for _ in range(10):
                owner.call("BURST", 200, 4)
            wait_for(lambda: owner.call("ACKED_"), timeout=10, what="a synced acknowledgement")
            (acked, appended), = owner.call("ACKED_")
        finally:
            owner.destroy()
        files.restore()                 # what no fsync covered is gone
        with Journal(d) as j:
            assert j.last_seq >= acked, "acknowledged as synced up to %d, %d survived" % (acked, j.last_seq)
            assert [r.seq for r in j.read(1, 10 ** 6, None)] == list(range(1, j.last_seq + 1))


def test_a_written_ack_promises_only_a_process_crash(tmp_path):
    """The weaker level is served before the fsync: a power loss may take it (the epoch changes)."""
    files = CrashFiles(tmp_path)
    d = tmp_path / "s"
    owner = Owner(str(d), files, "never", WRITTEN)
    try:
        owner.call("BURST", 100, 1)
        wait_for(lambda: owner.call("ACKED_"), timeout=10, what="a written acknowledgement")
        (acked, _), = owner.call("ACKED_")
    finally:
        owner.destroy()
    files.restore()
    with Journal(d) as j:
        assert j.last_seq < acked and j.epoch == 2 and j.check_resume(1, acked) == j.last_seq


def test_ack_levels_are_named(tmp_path):
    assert ACK_LEVELS == ("written", "synced") == (WRITTEN, SYNCED)

    class Bare(Actor):
        def setup(self):
            self.journal = Journal(str(tmp_path / "b"))
            self.commit = GroupCommit(self, self.journal)

        def teardown(self):
            self.journal.close()

        @command(reply=True)
        def bad(self):
            try:
                self.commit.when("replicated", print)
            except ValueError as exc:
                return str(exc)

    actor = Bare()
    try:
        assert "written, synced" in actor.call("BAD")
    finally:
        actor.destroy()


class CountFsync(CrashFiles):
    def __init__(self, *dirs):
        super().__init__(*dirs)
        self.fsyncs = 0

    def fsync(self, fd):
        self.fsyncs += 1
        super().fsync(fd)


class Waiters(Actor):
    """Many synced waiters in one round: group commit serves them with one fsync."""

    def __init__(self, directory, files, fsync):
        self.directory, self.files, self.fsync = directory, files, fsync

    def setup(self):
        self.journal = Journal(self.directory, files=self.files)
        self.commit = GroupCommit(self, self.journal, fsync=self.fsync, interval=0.05)
        self.commit.start()

    def teardown(self):
        self.commit.stop()
        self.journal.close()

    @command(deferred=True)
    def publish(self, reply, n):
        served = []
        before = self.files.fsyncs

        def acked(seq):
            served.append(seq)
            if len(served) == n:
                reply([sorted(served) == served, self.files.fsyncs - before])

        for i in range(n):
            self.commit.when(SYNCED, acked, self.journal.append(b"k", b"v%d" % i))
        self.commit.kick()


@pytest.mark.parametrize("fsync", ["batch", "interval", "never"])
def test_one_fsync_serves_many_synced_waiters(tmp_path, fsync):
    files = CountFsync(tmp_path)
    actor = Waiters(str(tmp_path / "s"), files, fsync)
    try:
        in_order, fsyncs = actor.call("PUBLISH", 500, timeout=10)
        assert in_order and 1 <= fsyncs <= 2, "500 synced waiters, %d fsyncs" % fsyncs
    finally:
        actor.destroy()
