"""Short pass of the fault-injection soak (soak/faults.py, issue #19): 25 s of faults, seed 7."""
import pytest

from .soak_run import run_soak

pytestmark = [pytest.mark.soak, pytest.mark.slow, pytest.mark.timeout(420)]


def test_acknowledged_messages_survive_kills_full_disks_and_vanishing_subscribers():
    f, done = run_soak("faults", "--duration", "25", "--seed", "7", "--rate", "1000", timeout=400)
    context = done.stdout + done.stderr[-3000:]
    kinds = f["faults_by_kind"]
    assert kinds.get("kill_broker", 0) >= 1 and kinds.get("kill_clone", 0) >= 1, context
    if f["disk_full"]:                         # root: the journals were on a tmpfs filled to ENOSPC
        assert kinds.get("disk_full", 0) >= 1, context
    assert f["messages_checked"] > 1000 and f["clone_keys_checked"] > 0, context
    assert f["lost"] == 0, context
    assert f["duplicated"] == 0, context       # the plain publisher never resends
    assert f["duplicated_idempotent"] == 0, context  # the idempotent one resends; the broker drops them
    assert f["disorder"] == 0 and f["sequences_reused"] == 0, context
    assert f["subscriber_violations"] == [], context
    for name, s in f["subscribers"].items():
        assert s["received"] > 0, (name, context)
    assert f["clone_lost"] == 0 and f["clone_regressions"] == 0, context
    assert f["ok"] and done.returncode == 0, context
