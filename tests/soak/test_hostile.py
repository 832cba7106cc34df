"""Short passes of the hostile-peer soak (soak/hostile.py, issue #20): a swarm against `zactors up`.

The p99 bound here is 250 ms, not the soak's 50 ms: CI is a loaded 2-core box running two swarm
processes, the node and the client at once (quiet, before the swarm, this box already shows p99s of
7-27 ms).  The README has the figures of the long run.

The stream flood and the never-reading subscribers have tests of their own (each once stalled or
delayed the client alone).
"""
import pytest

from .soak_run import run_soak

pytestmark = [pytest.mark.soak, pytest.mark.slow, pytest.mark.timeout(420)]

P99_MS = 250


def swarm_against_node(*attacks, duration=12):
    """The soak for ``duration`` seconds with ``attacks`` (default: all of them), after 2 quiet seconds."""
    f, done = run_soak("hostile", "--duration", str(duration), "--quiet", "2", "--seed", "7", "--p99-ms", str(P99_MS),
                       *(["--attacks", ",".join(attacks)] if attacks else []), timeout=400)
    return f, done.stdout + done.stderr[-3000:], done


def assert_served(f, context, done):
    assert f["swarm_errors"] == [], context
    assert f["node_alive"], context
    assert f["lost"] == {} and f["client_errors"] == [], context
    for kind, s in f["under_attack"].items():
        assert s["n"] >= 50 and s["p99_ms"] < P99_MS, (kind, context)
    assert f["node_rss_mb"]["peak"] <= f["node_rss_mb"]["budget"], context
    assert f["node_fds"]["peak"] <= f["node_fds"]["budget"], context
    assert f["ok"] and done.returncode == 0, context


def test_a_well_behaved_client_is_served_while_a_swarm_attacks_the_node():
    # Every attack at once.  The node was once aborted by libzmq ("!_io_error", stream_engine_base.cpp:310)
    # under the whole swarm: the hijackers' shared routing id on the Clone snapshot ROUTER, which had ZMTP
    # heartbeats (tests/patterns/clone/test_libzmq_abort.py reproduces it in 3 s).
    f, context, done = swarm_against_node(duration=20)
    for did in ("huge_frames", "credits", "streams", "redos_keys", "never_reading", "icanhaz", "map_keys",
                "hijacks", "mdp_garbage"):
        assert f["swarm"].get(did, 0) > 0, (did, context)
    assert_served(f, context, done)


#: a round trip this long means the node stopped serving: quiet, this box's longest is 7-170 ms
STALL_MS = 500


def test_a_stream_flood_does_not_stall_the_node():
    """New connections each ATTACHing a new stream (~100/s from two processes) used to stall the whole node
    1.2-4.4 s: journals opened, closed (fsync) and removed on the hub.  They open and close off it now."""
    f, context, done = swarm_against_node("stream_flood")
    assert f["swarm"].get("streams", 0) > 0, context
    for kind, s in f["under_attack"].items():
        assert s["max_ms"] < STALL_MS, (kind, context)
    assert_served(f, context, done)


def test_never_reading_subscribers_do_not_delay_a_reading_one():
    """Subscribers that grant huge credit and never read used to delay a reading one (p99 270-990 ms): the
    credit held unspent was revoked from every holder, the reading one too.  Now each keeps a fair share."""
    f, context, done = swarm_against_node("never_reading", "credit_flood")
    assert f["swarm"].get("never_reading", 0) > 0 and f["swarm"].get("credits", 0) > 0, context
    rtt = f["under_attack"]
    # relative to the node's other round trips: a loaded box slows them all alike, the defect only ZEPS
    assert rtt["zeps"]["p99_ms"] <= max(50, 3 * max(rtt["mdp"]["p99_ms"], rtt["clone"]["p99_ms"])), context
    assert_served(f, context, done)

