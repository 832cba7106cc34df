"""A ttl expiry survives a failed sequence reservation (leftovers of #19/#20): the delete waits for the
reservation like any update; when that reservation write fails (a full disk), the clients' updates
waiting for it are refused, but the expiry is tried again once the journal's ``retry`` has passed, not
lost (the key would otherwise live for ever: it has left the server's expiry heap)."""
import errno
import os
import time

import pytest

from tests.conftest import wait_for
from tests.patterns.clone.conftest import client_of
from zactors.actors.journal import Files
from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.server import CloneServer

pytestmark = pytest.mark.timeout(60)


class FullDisk(Files):
    """Plain files, except that the next ``fail`` writes of the sequences file take ``delay`` seconds and
    then fail with ENOSPC (the disk filled while the reservation was being written)."""

    __slots__ = ("fail", "delay", "failed")

    def __init__(self):
        self.fail = 0
        self.delay = 0.5
        self.failed = 0

    def write_atomic(self, path, data):
        if os.path.basename(path) == "SEQUENCES" and self.fail:
            time.sleep(self.delay)      # (on the threadpool: reservations are written off the loop)
            self.fail -= 1
            self.failed += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        super().write_atomic(path, data)


def test_an_expiry_waiting_for_a_reservation_that_fails_is_retried_not_lost(make, tmp_path):
    files = FullDisk()
    server = make(CloneServer, persist=str(tmp_path), reserve=2, files=files)
    client = make(Clone, [client_of(server)])
    assert client.wait_synced(10)
    files.fail = 1
    # sequence 1, then 2: the second asks for a reservation past 2 (slow, then ENOSPC) and the
    # expiry, sequence 3, waits for it
    client.set("doomed", "x", ttl=0.1, wait=10)
    client.set("other", "y", wait=10)
    wait_for(lambda: files.failed == 1, 10, "the reservation write to fail")
    wait_for(lambda: client.get("doomed") is None, 15, "the key to expire after the failed reservation")
    stats = server.call("$STATS")
    assert stats["expiries_deferred"] >= 1 and stats["expired"] == 1, stats
    assert server.call("INFO")["keys"] == 1
