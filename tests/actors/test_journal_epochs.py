"""Epochs: a journal that may have lost written records starts a new epoch; check_resume tells clients."""
import os

import pytest

from tests.actors.crashfs import CrashFiles, SimulatedCrash
from zactors.actors.journal import EPOCHS_NAME, Journal, JournalError

pytestmark = pytest.mark.timeout(60)


def fill(j, n, tag=b"v"):
    return [j.append(b"k", b"%s%d" % (tag, i)) for i in range(n)]


def test_a_new_journal_and_clean_reopens_keep_epoch_1(tmp_path):
    files = CrashFiles(tmp_path)
    d = tmp_path / "s"
    with Journal(d, files=files) as j:
        assert j.epoch == 1 and j.epochs == [(1, 1)]
        fill(j, 10)
    for _ in range(3):
        with Journal(d, files=files) as j:
            assert j.epoch == 1 and j.epochs == [(1, 1)], "a clean close and reopen keeps the epoch"
            assert j.check_resume(1, 10) is None
            fill(j, 5)
    assert j.stats()["epoch"] == 1


def test_power_loss_in_written_mode_starts_a_new_epoch(tmp_path):
    files = CrashFiles(tmp_path)
    d = tmp_path / "s"
    j = Journal(d, files=files)
    fill(j, 10)
    j.write()
    assert j.sync() == 10
    fill(j, 10, b"lost")
    assert j.write() == 20                  # written (maybe delivered), not synced
    files.crash()
    files.restore()                         # the power loss: what no fsync covered is gone
    with Journal(d, files=files) as j:
        assert j.last_seq == 10
        assert j.epoch == 2 and j.epochs == [(1, 1), (2, 11)]
        assert j.check_resume(1, 20) == 10, "a client holding 11..20 of epoch 1 is told they are gone"
        assert j.check_resume(1, 10) is None and j.check_resume(1, 3) is None
        assert j.check_resume(2, 10) is None
        assert j.append(b"k", b"new") == 11     # sequence 11 again, but in epoch 2
        assert j.check_resume(2, 11) is None
        assert j.check_resume(7, 1) == 0, "an epoch this journal never had"
    with Journal(d, files=files) as j:
        assert j.epoch == 2 and j.read(11)[0].body == b"new"


def test_process_kill_starts_a_new_epoch_but_loses_nothing(tmp_path):
    files = CrashFiles(tmp_path)
    d = tmp_path / "s"
    j = Journal(d, files=files)
    fill(j, 20)
    j.write()
    files.crash()                           # kill -9: the page cache survives, nothing is dropped
    with Journal(d, files=CrashFiles(tmp_path)) as j:
        assert j.last_seq == 20 and j.epochs == [(1, 1), (2, 21)]
        assert j.check_resume(1, 20) is None, "nothing was lost: the client resumes"


def test_a_cut_in_the_active_segment_starts_a_new_epoch_even_after_a_clean_close(tmp_path):
    d = tmp_path / "s"
    with Journal(d) as j:
        fill(j, 20)
    seg = sorted(p for p in os.listdir(d) if p.endswith(".seg"))[-1]
    with open(d / seg, "r+b") as f:         # bit rot in record 15
        data = f.read()
        at = data.index(b"v14")
        f.seek(at)
        f.write(b"X")
    with Journal(d) as j:
        assert j.last_seq == 14 and j.stats()["crc_errors"] == 1
        assert j.epochs == [(1, 1), (2, 15)]
        assert j.check_resume(1, 20) == 14


def test_a_damaged_epochs_file_is_refused(tmp_path):
    d = tmp_path / "s"
    with Journal(d) as j:
        fill(j, 3)
    (d / EPOCHS_NAME).write_bytes(b"zactors journal epochs 1\n2 1\n1 5\n")
    with pytest.raises(JournalError, match="epochs file .* damaged"):
        Journal(d)


def test_the_epochs_file_is_replaced_atomically(tmp_path):
    files = CrashFiles(tmp_path)
    d = tmp_path / "s"
    j = Journal(d, files=files)
    fill(j, 5)
    j.write()
    files.crash()
    files.restore()
    # the reopen writes the history as temp file + fsync + rename + directory fsync:
    # a power loss at any of its operations leaves the old history or the new one
    for crash_at in range(1, 12):
        files.crash_at = files.ops + crash_at
        try:
            Journal(d, files=files)
        except SimulatedCrash:
            pass
        files.restore()
        text = (d / EPOCHS_NAME).read_bytes()
        assert text.startswith(b"zactors journal epochs 1\n") and text.endswith(b"\n")
    with Journal(d, files=files) as j:
        assert j.epoch >= 2 and [e for e, _ in j.epochs] == list(range(1, j.epoch + 1))
