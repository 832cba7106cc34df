"""Journal on a full disk, for real: a small tmpfs the test mounts (needs root)."""
import errno
import os
import shutil
import subprocess

import pytest

from zactors.actors.journal import Journal, JournalError, JournalFull

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs mounted for the test and unmounted after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % res.stderr.strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("segment_bytes", [8 << 10, 1 << 20])
def test_enospc_refuses_appends_then_recovers_when_space_returns(small_disk, segment_bytes):
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (96 << 10))
    j = Journal(small_disk / "stream", segment_bytes=segment_bytes)
    try:
        body = bytes(range(256)) * 2
        with pytest.raises(JournalFull) as info:
            for i in range(10_000):
                j.append(b"k%d" % i, body)
                if i % 10 == 9:
                    j.write()
        exc = info.value
        assert exc.errno == errno.ENOSPC and "ENOSPC" in str(exc)
        assert isinstance(exc, JournalError)
        assert j.written_seq < j.last_seq, "the records not written are held, not dropped"
        held = j.last_seq
        with pytest.raises(JournalFull, match="refuses appends.*ENOSPC"):
            j.append(b"more", b"refused")
        assert j.last_seq == held, "a refused append takes no sequence"
        assert j.error is not None and j.stats()["error"]
        with pytest.raises(JournalFull):
            j.write()                   # still full: the retry fails the same way
        # every record, written or held, can still be read
        assert [r.seq for r in j.read(1, max_records=10 ** 6, max_bytes=None)] == list(range(1, held + 1))

        filler.unlink()                 # the operator frees space
        assert j.write() == held and j.error is None
        assert j.sync() == held
        assert j.append(b"after", b"space") == held + 1
    finally:
        j.close()
    with Journal(small_disk / "stream", tail_cache_bytes=0) as j:
        recs = j.read(1, max_records=10 ** 6, max_bytes=None)
        assert [r.seq for r in recs] == list(range(1, held + 2))
        assert all(r.body == body for r in recs[:-1]) and recs[-1].body == b"space"
        assert j.stats()["truncated_bytes"] == 0, "the failed write left no torn record behind"


def test_reopen_after_enospc_keeps_what_was_written(small_disk):
    (small_disk / "filler").write_bytes(b"\0" * (128 << 10))
    j = Journal(small_disk / "stream", segment_bytes=16 << 10)
    written = 0
    with pytest.raises(JournalFull):
        for i in range(10_000):
            j.append(b"k", b"v" * 300)
            written = j.write()
    assert j.written_seq == written
    j.close()                           # logs the records it could not write
    (small_disk / "filler").unlink()
    with Journal(small_disk / "stream") as j:
        assert j.last_seq == written, "the journal ends at the last record written"
        assert j.append(b"k", b"v") == written + 1


def test_journal_actor_reports_enospc_and_retries(small_disk):
    from tests.conftest import wait_for
    from zactors.actors import CommandError
    from zactors.actors.journal_actor import JournalActor

    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (128 << 10))
    actor = JournalActor(str(small_disk / "stream"), fsync="never", retry=0.05)
    try:
        refused = None
        for i in range(10_000):
            try:
                actor.call("APPEND", b"k", b"v" * 500)
            except CommandError as exc:
                refused = exc
                break
        assert refused is not None and "ENOSPC" in str(refused), "appends are refused once the disk is full"
        event = actor.recv_event(timeout=10)
        assert event is not None and event[0] == "JOURNAL_ERROR" and "ENOSPC" in str(event)
        first, last, written, _ = actor.call("RANGE")
        assert written < last
        filler.unlink()
        wait_for(lambda: actor.call("RANGE")[2] == last, timeout=10, what="the retried write")
        assert actor.recv_event(timeout=0) is None, "one JOURNAL_ERROR per failure, not per retry"
        assert actor.call("APPEND", b"k", b"again") == last + 1
        assert actor.call("FLUSH", timeout=10) == last + 1
    finally:
        actor.destroy()
