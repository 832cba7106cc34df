"""Binary Star never wipes the map: a backup that has not completed a sync refuses the client vote.

A real primary process holds 30,000 keys; a backup starts and begins its
re-sync from it; the primary freezes (SIGSTOP) mid-sync, then dies (SIGKILL).
The client votes for the backup: it must refuse (it holds a partial map),
and the client keeps every key.  The primary restarts from its journal, and
the pair and the client go on with nothing lost.
"""
import os
import signal
import sys

import pytest

from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.server import CloneServer, endpoints
from tests.conftest import wait_for
from tests.patterns.clone.conftest import free_base_port, load_keys

pytestmark = pytest.mark.timeout(180)

KEYS = 30000


def test_primary_dies_while_backup_resyncs_nothing_lost(processes, make, tmp_path):
    p, b = free_base_port(), free_base_port()
    cli = [sys.executable, "-m", "zactors.apps.cli", "-q", "clone", "server", "--port", str(p), "--primary",
           "--peer", "tcp://127.0.0.1:%d" % b, "--persist", str(tmp_path / "primary")]
    primary = processes(cli)
    servers = ["tcp://127.0.0.1:%d" % p, "tcp://127.0.0.1:%d" % b]
    client = make(Clone, servers, name="client")
    assert client.wait_synced(30)
    load_keys("tcp://127.0.0.1:%d" % (p + 2), client, KEYS)
    held, seq = dict(client.items()), client.sequence

    backup = make(CloneServer, port=b, role="backup", name="backup", peer=endpoints("127.0.0.1", p))
    wait_for(lambda: backup.call("INFO")["syncing"], timeout=10, what="the backup starts its re-sync")
    os.kill(primary.pid, signal.SIGSTOP)  # frozen mid-snapshot: the backup's sync cannot complete
    info = backup.call("INFO")
    assert info["syncing"] and not info.get("ready") and info["counters"].get("synced", 0) == 0, \
        "the backup finished its sync before the primary froze; the scenario did not happen"
    assert info["keys"] < KEYS

    # The client hears nothing from the primary and votes for the backup, which must refuse.
    def voted(n):
        counters = backup.call("INFO")["counters"]
        return counters.get("requests_refused_unsynced", 0) >= n or counters.get("takeovers", 0) >= 1
    wait_for(lambda: voted(1), timeout=15, what="the client's vote reaches the unsynced backup")
    primary.kill()
    primary.wait()
    wait_for(lambda: voted(2), timeout=15, what="a second vote")
    info = backup.call("INFO")
    assert info["state"] == "passive" and info["counters"].get("takeovers", 0) == 0
    assert dict(client.items()) == held and client.sequence == seq  # 0 keys lost

    # The primary comes back from its journal; the backup (saying it holds nothing) lets it serve.
    processes(cli)
    wait_for(lambda: backup.call("INFO")["ready"] and backup.call("INFO")["keys"] == KEYS + 1, timeout=30,
             what="the backup syncs from the restarted primary")
    assert client.set("after", "1", wait=20) > seq
    wait_for(lambda: backup.call("GET", b"after") == b"1", timeout=10, what="the backup follows")
    mine = dict(client.items())
    assert len(mine) == KEYS + 2 and all(mine[k] == v for k, v in held.items())
    assert client.call("INFO")["counters"].get("stale_snapshots", 0) == 0
