"""``zactors demo``: a node in the process, each pattern's part through it; ``--stay`` keeps it up."""
import os
import re
import signal
import time

import gevent
import pytest

from .cli_helpers import assert_clean, read_until, start, zactors
from .dashboard.helpers import get_json

pytestmark = pytest.mark.timeout(120)


def _listing(lines):
    """``{part: first address}`` from the demo's opening lines."""
    found = {}
    for line in lines:
        match = re.match(r"^  (majordomo|zeps|clone|harmony|dashboard)\s+(\S+)", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def _journal(lines):
    return next(line.split("journal ", 1)[1].strip() for line in lines if line.startswith("  zeps "))


@pytest.mark.slow
def test_demo_ends_by_itself_and_runs_the_node_parts_through_the_node():
    started = time.monotonic()
    result = zactors("demo", timeout=90)
    assert result.returncode == 0, result.stderr
    assert_clean(result.stderr)
    assert "INFO" not in result.stderr  # one line per thing on stdout: the patterns' logs only with -v
    lines = result.stdout.splitlines()
    where = _listing(lines)
    assert set(where) == {"majordomo", "zeps", "clone", "harmony", "dashboard"}, result.stdout
    assert re.match(r"^http://127\.0\.0\.1:\d+/$", where["dashboard"]), where
    assert "Demo finished: 7 part(s) ran." in result.stdout
    assert "each got its own reply: True" in result.stdout
    # the node's parts were the ones used
    assert "the node's broker on %s;" % where["majordomo"] in result.stdout
    assert "the node's ZEPS broker on %s," % where["zeps"] in result.stdout
    assert "the node's Clone server on %s " % where["clone"] in result.stdout
    assert "the node's Harmony at %s;" % where["harmony"] in result.stdout
    assert "alice got SHOUT from node in news" in result.stdout
    assert "caught up with all 20000 in order: True" in result.stdout
    # a part killed, and its supervisor bringing it back with its state, one line each
    assert "killed the node's Clone server (holding 1 key(s)) as a bug in it would" in result.stdout
    back = re.search(r"the supervisor restarted it: serving again (\d+) ms after its death, its 1 key\(s\) "
                     r"recovered from its journal", result.stdout)
    assert back, result.stdout
    print("\nthe demo's Clone server served again %s ms after its death" % back.group(1))
    assert not os.path.exists(os.path.dirname(_journal(lines)))  # the temporary data directory is gone
    assert time.monotonic() - started < 60


def _until(read, predicate, what, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if predicate(value):
            return value
        assert time.monotonic() < deadline, "%s: last %r" % (what, value)
        gevent.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_demo_stay_keeps_the_node_up_with_the_demo_traffic_on_its_dashboard(processes, sig):
    proc = start(processes, "demo", "--stay")
    lines = read_until(proc.stdout, "demo: Ctrl-C stops", timeout=90)
    where = _listing(lines)
    url = where["dashboard"]
    assert "its dashboard: %s" % url in lines[-2]

    # the demo's own traffic is in the node's parts, as the dashboard's JSON API shows it
    zeps = _until(lambda: get_json(url + "api/zeps"),
                  lambda part: "ticks" in part["data"]["streams"] and "orders" in part["data"]["streams"],
                  "the demo's ZEPS streams")
    assert zeps["data"]["streams"]["ticks"]["last_seq"] >= 20001  # 20000 published, then one live
    keys = get_json(url + "api/clone/keys?prefix=/demo/")
    shown = {k["key"]["text"]: k["value"]["text"] for k in keys["keys"]}
    assert shown["/demo/colour"] == "blue" and "/demo/session" not in shown  # set, and expired, in the node
    majordomo = get_json(url + "api/majordomo")
    assert majordomo["data"]["counters"]["requests"] >= 1503  # stream + 500 + 1000 + 2 mmi
    # and the dashboard's demo traffic keeps flowing
    _until(lambda: get_json(url + "api/clone/keys?prefix=/demo/"),
           lambda k: any(key["key"]["text"] == "/demo/counter" for key in k["keys"]), "demo traffic in Clone")
    harmony = _until(lambda: get_json(url + "api/harmony"), lambda part: any(p["groups"] for p in part["data"]["peers"]),
                     "the demo peer at the node's Harmony")
    assert [(p["name"], p["groups"]) for p in harmony["data"]["peers"]] == [("demo-peer", ["demo"])]
    first = get_json(url + "api/majordomo")["data"]["counters"]["requests"]
    _until(lambda: get_json(url + "api/majordomo")["data"]["counters"]["requests"], lambda n: n > first,
           "Majordomo requests still flowing")

    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert_clean(out + err)
    assert "demo: node stopped after" in err
    assert not os.path.exists(os.path.dirname(_journal(lines)))


def test_demo_options_are_checked():
    done = zactors("demo", "--web", "nowhere")
    assert done.returncode == 2 and "HOST:PORT" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
