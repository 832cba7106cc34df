"""A failed fsync stops the journal for good: said once, never retried (fsyncgate)."""
import errno
import logging
import os
import threading
import traceback

import pytest

from zactors.actors import CommandError
from zactors.actors.journal import Files, Journal, JournalError
from zactors.actors.journal_actor import JournalActor

pytestmark = pytest.mark.timeout(60)


class FailingFsync(Files):
    """Real files; ``fsync`` of a file (not of a directory) raises EIO once ``failing`` is set."""

    def __init__(self):
        self.failing = False
        self.failed = 0
        self.again = threading.Event()      # set by a second fsync attempt after the failure

    def fsync(self, fd):
        if self.failing:
            self.failed += 1
            if self.failed > 1:
                self.again.set()
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync(fd)


def test_failed_fsync_stops_the_journal_said_once(tmp_path, caplog):
    files = FailingFsync()
    j = Journal(tmp_path / "s", files=files)
    try:
        j.append(b"k", b"v1")
        j.write()
        files.failing = True
        with caplog.at_level(logging.WARNING, logger="zactors.actors.journal"):
            errors = []
            for call in [j.sync] * 10 + [lambda: j.append(b"k", b"v2"), j.write]:
                with pytest.raises(JournalError) as info:
                    call()
                errors.append(info.value)
        first = errors[0]
        assert first.errno == errno.EIO
        assert "fsync" in str(first) and "EIO" in str(first) and "reopened" in str(first)
        for exc in errors[1:]:
            assert "fsync" in str(exc) and "reopened" in str(exc) and exc.errno == errno.EIO
        assert files.failed == 1, "an fsync is never retried after it failed"
        assert len({id(e) for e in errors}) == len(errors), "a fresh error each time"
        depth = [len(traceback.extract_tb(e.__traceback__)) for e in errors[1:10]]
        assert max(depth) == min(depth) <= 3, "no stored exception re-raised with a growing traceback"
        assert all(e.__cause__ is None and (e.__context__ is None or e.__context__.__context__ is None)
                   for e in errors), "chained at most once"
        lines = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(lines) == 1 and "fsync" in lines[0].getMessage(), [r.getMessage() for r in lines]
        assert j.broken and j.stats()["fsync_errors"] == 1
        assert j.synced_seq == 0 and j.last_seq == 1, "nothing vouched for, nothing more accepted"
    finally:
        j.close()
    with Journal(tmp_path / "s") as j:          # reopening is the way out
        assert j.last_seq == 1 and j.append(b"k", b"v3") == 2


def test_a_failed_segment_roll_fsync_stops_the_journal(tmp_path):
    files = FailingFsync()
    j = Journal(tmp_path / "s", segment_bytes=4096, files=files)
    try:
        files.failing = True
        with pytest.raises(JournalError, match="fsync.*reopened"):
            for i in range(1000):
                j.append(b"k", b"x" * 100)
                j.write()
        held = j.last_seq
        assert j.written_seq < held and j.broken and files.failed == 1
        with pytest.raises(JournalError, match="fsync"):
            j.write()
        assert files.failed == 1
    finally:
        j.close()


@pytest.mark.parametrize("fsync", ["interval", "batch"])
def test_group_commit_stops_after_a_failed_fsync(tmp_path, caplog, fsync):
    files = FailingFsync()
    caplog.set_level(logging.WARNING)
    actor = JournalActor(str(tmp_path / "s"), fsync=fsync, interval=0.01, files=files)
    try:
        actor.call("APPEND", b"k", b"v")
        assert actor.call("FLUSH", True, timeout=10) == 1
        files.failing = True
        actor.call("APPEND", b"k", b"lost?")
        with pytest.raises(CommandError, match="fsync"):
            actor.call("FLUSH", True, timeout=10)
        event = actor.recv_event(timeout=10)
        assert event is not None and event[0] == "JOURNAL_ERROR" and "fsync" in str(event)
        with pytest.raises(CommandError, match="fsync"):
            actor.call("APPEND", b"k", b"refused")
        with pytest.raises(CommandError, match="fsync"):
            actor.call("FLUSH", True, timeout=10)       # a waiter on a stopped journal hears at once
        # 50 intervals: no timer retries the fsync, no second error is logged or emitted
        assert not files.again.wait(0.5), "the fsync was retried"
        assert files.failed == 1
        assert actor.recv_event(timeout=0) is None, "one JOURNAL_ERROR, not one per interval"
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(lines) == 1 and "fsync" in lines[0], lines
        assert actor.call("RANGE")[3] == 1
    finally:
        actor.destroy()
