"""``zactors zeps broker --role ... --peer ... --pair-bind ...``, and client commands given the pair."""
import re
import signal
import sys

import gevent.subprocess
import pytest

from zactors.apps.cli import main

pytestmark = pytest.mark.timeout(120)


def _endpoint(broker):
    line = b""
    while b"broker on" not in line:
        line = broker.stderr.readline()
        assert line, "broker exited"
    return re.search(rb"broker on (\S+),", line).group(1).decode()


def test_a_pair_from_the_cli_serves_publish_subscribe_and_streams_across_a_failover(processes, tmp_path, capsys):
    links = {role: "ipc://%s/%s.pair" % (tmp_path, role) for role in ("primary", "backup")}
    binds = {role: "ipc://%s/%s.zeps" % (tmp_path, role) for role in ("primary", "backup")}
    brokers = {}
    for role, other in (("primary", "backup"), ("backup", "primary")):
        brokers[role] = processes(
            [sys.executable, "-m", "zactors.apps.cli", "zeps", "broker", "--journal", str(tmp_path / role),
             "--bind", binds[role], "--role", role, "--pair-bind", links[role], "--peer", links[other],
             "--ack", "replicated", "--on-passive-lost", "degrade", "--passive-timeout", "0.5",
             "--heartbeat", "0.25", "--expiry", "2"], stderr=gevent.subprocess.PIPE)
        assert _endpoint(brokers[role]) == binds[role]
    c = ["--connect", "%s,%s" % (binds["primary"], binds["backup"]), "--timeout", "20"]
    assert main(["-q", "zeps", "publish", "orders", "k", "one", *c]) == 0
    assert main(["-q", "zeps", "streams", *c]) == 0
    out = capsys.readouterr().out
    assert "pair: primary active" in out and "stream orders" in out and "ack replicated" in out
    brokers["primary"].send_signal(signal.SIGKILL)
    brokers["primary"].wait()
    assert main(["-q", "zeps", "publish", "orders", "k", "two", *c]) == 0    # the backup takes over
    assert main(["-q", "zeps", "subscribe", "orders", "--count", "2", *c]) == 0
    assert capsys.readouterr().out.splitlines() == ["1\tk\tone", "2\tk\ttwo"]
    assert main(["-q", "zeps", "streams", *c]) == 0
    assert "pair: backup active" in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    (["--role", "primary"], "--role needs --peer"),
    (["--peer", "tcp://127.0.0.1:5571"], "need --role"),
    (["--ack", "replicated"], "need --role"),
])
def test_pair_option_errors_are_one_line(argv, says, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        status = main(["-q", "zeps", "broker", "--journal", "j", *argv])
    except SystemExit as exit:
        status = exit.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert says in err and len(err.strip().splitlines()) == 1, err
