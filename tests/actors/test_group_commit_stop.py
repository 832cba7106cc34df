"""GroupCommit.stop() is final (leftovers item 4): an fsync already running on the threadpool when the
owner stops the commit reports nothing once it ends, so an owner that replaced or closed the journal
(Clone's compaction switch) is never told about one it gave up."""
import threading

import pytest

from tests.conftest import wait_for
from zactors.actors import Actor, command
from zactors.actors.group_commit import GroupCommit
from zactors.actors.journal import Files, Journal

pytestmark = pytest.mark.timeout(30)


class HeldFsync(Files):
    """Plain files whose fsyncs wait (in their thread) until ``release`` is set, once ``hold`` is set."""

    __slots__ = ("hold", "started", "release")

    def __init__(self):
        self.hold = False
        self.started = threading.Event()
        self.release = threading.Event()

    def fsync(self, fd):
        if self.hold:
            self.started.set()
            self.release.wait(10)
        super().fsync(fd)


class Owner(Actor):
    def __init__(self, directory, files):
        self.directory = directory
        self.files = files
        self.reports = []

    def setup(self):
        self.journal = Journal(self.directory, files=self.files)
        self.commit = GroupCommit(self, self.journal, fsync="batch",
                                  on_written=lambda seq: self.reports.append(("written", seq)),
                                  on_synced=lambda seq: self.reports.append(("synced", seq)),
                                  on_error=lambda exc: self.reports.append(("error", str(exc))))
        self.commit.start()

    def teardown(self):
        self.journal.close()

    @command(reply=True)
    def append(self):
        self.journal.append(b"k", b"v")
        self.commit.kick()
        self.commit.when_synced(lambda seq: self.reports.append(("waiter", seq)))

    @command(reply=True)
    def halt(self):
        self.commit.stop(sync=False)
        self.reports.append(("stopped", None))


def test_no_callback_runs_after_stop_returns(tmp_path):
    files = HeldFsync()
    owner = Owner(str(tmp_path / "j"), files)
    try:
        files.hold = True
        owner.call("APPEND")
        wait_for(files.started.is_set, 10, "the fsync to start (on the threadpool: the hub must run meanwhile)")
        owner.call("HALT")          # while that fsync runs on the threadpool
        files.release.set()
        # its result, posted back to the actor's loop, handled there (the flag is cleared first thing)
        wait_for(lambda: owner.journal.synced_seq == 1 and not owner.commit._syncing, 10, "the fsync to end")
        reports = owner.reports
        assert reports[reports.index(("stopped", None)) + 1:] == [], reports
        assert ("written", 1) in reports
    finally:
        files.release.set()
        owner.destroy()
