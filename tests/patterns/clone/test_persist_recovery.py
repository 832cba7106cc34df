"""A Clone server whose recovery fails leaves nothing open (leftovers item 3): the journal recovery
opened (its descriptors, its writer lock) is closed, so the same process can try again once the cause
is gone, instead of being refused with "open by another writer" until it exits."""
import errno
import os

import pytest

from tests.conftest import open_under, wait_for
from tests.patterns.clone.conftest import client_of
from zactors.actors.journal import Files, JournalError
from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.server import CloneServer

pytestmark = pytest.mark.timeout(60)


class FullDisk(Files):
    """The sequences file cannot be written (ENOSPC): recovery fails after the journal opened."""

    __slots__ = ()

    def write_atomic(self, path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


def test_a_recovery_that_fails_closes_the_journal_and_a_retry_works(make, tmp_path):
    server = make(CloneServer, persist=str(tmp_path))
    client = make(Clone, [client_of(server)])
    assert client.wait_synced(10)
    client.set("kept", "1", wait=10)
    client.destroy()
    server.destroy()
    assert open_under(tmp_path) == []
    with pytest.raises(JournalError, match="ENOSPC"):
        CloneServer(persist=str(tmp_path), files=FullDisk())
    assert open_under(tmp_path) == [], "the failed recovery left the journal open"
    server = make(CloneServer, persist=str(tmp_path))      # the cause is gone: the same process tries again
    client = make(Clone, [client_of(server)])
    assert client.wait_synced(10)
    wait_for(lambda: client.get("kept") == b"1", 10, "the recovered map")
