"""``zactors up`` and ``zactors status`` as a person runs them, and the node's config."""
import json
import signal
import time

import gevent

import pytest
from hypothesis import given, settings, strategies as st

from zactors.apps import options
from zactors.apps.dashboard.render import show
from zactors.apps.up import ConfigError, load_config, merge, DEFAULTS
from zactors.patterns.zeps import Publisher, Subscriber

from ..cli_helpers import assert_clean, read_until, start, zactors
from .helpers import start as start_node

pytestmark = pytest.mark.timeout(90)

EPHEMERAL = ("--mdp", "tcp://127.0.0.1:*", "--zeps", "tcp://127.0.0.1:*", "--clone-port", "0", "--web", "127.0.0.1:0")


def status_until(url, predicate, timeout=15):
    """``zactors status URL`` until ``predicate(stdout)``; the last CompletedProcess (sampled once a second)."""
    deadline = time.monotonic() + timeout
    while True:
        done = zactors("status", "--url", url)
        if done.returncode == 0 and predicate(done.stdout) or time.monotonic() > deadline:
            return done
        gevent.sleep(0.2)


def run_up(processes, data, *extra):
    proc = start(processes, "up", "--data", str(data), *EPHEMERAL, *extra)
    lines = read_until(proc.stdout, "up: Ctrl-C stops")
    return proc, {line.split()[0]: line.split()[1] for line in lines if not line.startswith("up:")}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_up_prints_every_part_stops_cleanly_and_keeps_the_journal(processes, tmp_path, signum):
    proc, where = run_up(processes, tmp_path / "data")
    assert set(where) == {"majordomo", "zeps", "clone", "harmony", "dashboard"}
    assert where["dashboard"].startswith("http://127.0.0.1:")
    with Publisher(where["zeps"], "audit") as pub:
        for i in range(500):
            pub.publish(b"k%d" % i, b"entry %d" % i)
        pub.flush(timeout=10)
    done = status_until(where["dashboard"], lambda out: "1 streams" in out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split()[:2] == ["majordomo", "ok"]
    assert any(line.startswith("zeps") and "1 streams" in line for line in done.stdout.splitlines())
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "up: stopped" in err
    assert_clean(err)

    proc, where = run_up(processes, tmp_path / "data")  # the same data directory: the journal is back
    sub = Subscriber(where["zeps"], "audit", from_seq=1)
    try:
        got = [sub.get(timeout=10) for _ in range(500)]
    finally:
        sub.destroy()
    assert [m.seq for m in got] == list(range(1, 501)) and got[-1].body == b"entry 499"
    done = status_until(where["dashboard"], lambda out: "1 streams" in out)
    snapshot = json.loads(zactors("status", "--url", where["dashboard"], "--json").stdout)
    assert snapshot["sources"]["zeps"]["data"]["streams"]["audit"]["last_seq"] == 500
    proc.terminate()
    assert proc.wait(timeout=30) == 0


def test_up_reads_a_config_file_and_options_win(processes, tmp_path):
    config = tmp_path / "node.toml"
    config.write_text('data = "%s"\n[majordomo]\nenabled = false\n[clone]\nenabled = false\n'
                      '[harmony]\nname = "from-file"\ngroups = ["ops"]\n[dashboard]\nbind = "127.0.0.1:1"\n'
                      % (tmp_path / "data"))
    proc = start(processes, "up", "--config", str(config), "--zeps", "tcp://127.0.0.1:*", "--web", "127.0.0.1:0")
    lines = read_until(proc.stdout, "up: Ctrl-C stops")
    parts = [line.split()[0] for line in lines if not line.startswith("up:")]
    assert parts == ["zeps", "harmony", "dashboard"]
    url = [line.split()[1] for line in lines if line.startswith("dashboard")][0]
    snapshot = json.loads(zactors("status", "--url", url, "--json").stdout)
    assert snapshot["sources"]["harmony"]["data"]["name"] == "from-file"
    assert snapshot["sources"]["harmony"]["data"]["own_groups"] == ["ops"]
    assert (tmp_path / "data" / "zeps").is_dir()
    proc.terminate()
    assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize("content, words", [
    ("[majordomo\n", "not valid TOML"),
    ("[mdp]\nbind = 'x'\n", "unknown section 'mdp'"),
    ("[zeps]\nport = 5\n", "has no setting port"),
    ("[zeps]\nfsync = 'sometimes'\n", "fsync: 'sometimes': say never, batch, or a period"),
    ("[dashboard]\nbind = 'nowhere'\n", "HOST:PORT"),
])
def test_a_bad_config_file_is_one_line(tmp_path, content, words):
    config = tmp_path / "bad.toml"
    config.write_text(content)
    # no --web: the file's [dashboard] bind counts (every case fails before anything starts)
    done = zactors("up", "--config", str(config), "--data", str(tmp_path / "d"), *EPHEMERAL[:-2], timeout=30)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_bad_options_and_nobody_home_are_one_line(tmp_path):
    for args in (("up", "--mdp", "tcp://nowhere-at-all.invalid:5"), ("up", "--token", "short", *EPHEMERAL),
                 ("up", "--clone-port", "70000")):
        done = zactors(*args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
    done = zactors("status", "--url", "http://127.0.0.1:9/", "--timeout", "2")
    assert done.returncode == 3 and "is `zactors up` running" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_status_without_the_token_is_refused(processes, tmp_path):
    proc = start(processes, "up", "--data", str(tmp_path / "d"), "--no-mdp", "--no-zeps", "--no-clone",
                 "--web", "127.0.0.1:0", "--token", "s" * 20)
    lines = read_until(proc.stdout, "up: Ctrl-C stops")
    url = [line.split()[1] for line in lines if line.startswith("dashboard")][0].split("?")[0]
    done = zactors("status", "--url", url)
    assert done.returncode == 4 and "401" in done.stderr
    assert zactors("status", "--url", url, "--token", "s" * 20).returncode == 0
    proc.terminate()
    assert proc.wait(timeout=30) == 0


def test_a_taken_port_fails_the_start_and_stops_what_had_started(tmp_path):
    first = start_node(tmp_path / "a", clone={"enabled": False}, harmony={"enabled": False})
    try:
        taken = first.zeps.endpoint
        with pytest.raises(options.UsageError, match="in use"):
            start_node(tmp_path / "b", zeps={"bind": taken}, clone={"enabled": False}, harmony={"enabled": False})
    finally:
        first.stop()


def test_config_merging_checks_names():
    assert merge(DEFAULTS, {"zeps": {"fsync": "batch"}})["zeps"]["fsync"] == "batch"
    assert DEFAULTS["zeps"]["fsync"] == "100ms"  # merging copies
    with pytest.raises(ConfigError):
        merge(DEFAULTS, {"zeps": "nope"})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config("/nonexistent/zactors.toml")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.integers(1, 300))
def test_show_is_bounded_and_text_only_when_printable(data, limit):
    out = show(data, limit)
    assert out["size"] == len(data) and out["truncated"] == (len(data) > limit)
    if "text" in out:
        assert len(out["text"].encode()) <= limit
        assert data.startswith(out["text"].encode())
        assert all(c.isprintable() or c in "\t\n\r" for c in out["text"])
    else:
        assert bytes.fromhex(out["hex"]) == data[:limit]


@given(st.text(max_size=100))
def test_show_keeps_printable_text(text):
    out = show(text.encode(), 1000)
    if all(c.isprintable() for c in text):
        assert out["text"] == text


def test_up_demo_traffic_shows_on_the_dashboard(processes, tmp_path):
    proc, where = run_up(processes, tmp_path / "data", "--demo")
    done = status_until(where["dashboard"], lambda out: "2 streams" in out and "1 services" in out
                        and " 0 keys" not in out and "1 peers" in out, timeout=20)
    assert "2 streams" in done.stdout and "1 services, 1 workers" in done.stdout, done.stdout
    snapshot = json.loads(zactors("status", "--url", where["dashboard"], "--json").stdout)
    assert snapshot["sources"]["zeps"]["data"]["streams"]["orders"]["subscriber_count"] == 1
    assert [p["name"] for p in snapshot["sources"]["harmony"]["data"]["peers"]] == ["demo-peer"]
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err
