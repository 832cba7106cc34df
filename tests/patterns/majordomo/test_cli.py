"""``zactors mdp ...``: a broker and a worker as real processes, requests from the CLI entry point."""
import re
import signal
import sys

import gevent
import gevent.subprocess
import pytest

from zactors.apps.cli import main
from zactors.patterns.majordomo import Broker
from tests.conftest import wait_for
from tests.patterns.majordomo.conftest import Count

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def run(processes):
    return lambda *args: processes([sys.executable, "-m", "zactors.apps.cli", *args], stderr=gevent.subprocess.PIPE)


def test_broker_and_worker_commands(run, capsys):
    broker = run("mdp", "broker", "--bind", "tcp://127.0.0.1:*", "--heartbeat", "0.5")
    line = b""
    while b"broker on" not in line:
        line = broker.stderr.readline()
        assert line, "broker exited"
    endpoint = re.search(rb"broker on (\S+)", line).group(1).decode()
    worker = run("mdp", "worker", "echo", "--connect", endpoint, "--partials", "2", "--heartbeat", "0.5")
    wait_for(lambda: main(["-q", "mdp", "mmi", "echo", "--connect", endpoint]) == 0, 20, "worker registered")
    capsys.readouterr()
    assert main(["-q", "mdp", "request", "echo", "hi", "there", "--connect", endpoint]) == 0
    assert capsys.readouterr().out.splitlines() == ["PARTIAL hi | there", "PARTIAL hi | there", "FINAL   hi | there"]
    for proc in (worker, broker):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_curve_broker_command(run, capsys, tmp_path):
    from zactors.actors.auth import create_keypair
    create_keypair(str(tmp_path / "broker"), "broker")
    create_keypair(str(tmp_path / "clients"), "me")
    create_keypair(str(tmp_path / "others"), "stranger")
    broker = run("mdp", "broker", "--bind", "tcp://127.0.0.1:*", "--curve", str(tmp_path / "broker" / "broker.key_secret"),
                 "--curve-clients", str(tmp_path / "clients"))
    line = b""
    while b"broker on" not in line:
        line = broker.stderr.readline()
        assert line, "broker exited"
    endpoint = re.search(rb"broker on (\S+)", line).group(1).decode()
    server = ["--curve-server", str(tmp_path / "broker" / "broker.key")]
    me = ["--connect", endpoint, "--curve", str(tmp_path / "clients" / "me.key_secret")] + server
    worker = run("mdp", "worker", "echo", *me)
    wait_for(lambda: main(["-q", "mdp", "mmi", "echo", *me]) == 0, 20, "CURVE worker registered")
    capsys.readouterr()
    assert main(["-q", "mdp", "request", "echo", "sealed", *me]) == 0
    assert capsys.readouterr().out.splitlines() == ["FINAL   sealed"]
    stranger = ["--connect", endpoint, "--curve", str(tmp_path / "others" / "stranger.key_secret")] + server
    assert main(["-q", "mdp", "request", "echo", "x", "--timeout", "0.3", "--retries", "1", *stranger]) == 1
    for proc in (worker, broker):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_request_and_mmi_against_an_in_process_broker(capsys):
    with Broker() as broker:
        worker = Count(broker.endpoint)
        try:
            wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "worker")
            assert main(["-q", "mdp", "request", "count", "1", "--connect", broker.endpoint]) == 0
            assert capsys.readouterr().out.splitlines() == ["PARTIAL 0", "FINAL   done"]
            assert main(["-q", "mdp", "mmi", "nothing", "--connect", broker.endpoint]) == 1
            assert "no workers (404)" in capsys.readouterr().out
            assert main(["-q", "mdp", "request", "nothing", "x", "--connect", broker.endpoint,
                         "--timeout", "0.1", "--retries", "2"]) == 1
        finally:
            worker.destroy()


def test_demo_part_runs(capsys):
    from zactors.apps.commands import mdp
    lines = []
    mdp.demo(lines.append)
    text = "\n".join(lines)
    assert "REPLIES" in text and "4 words" in text and "all answered correctly: True" in text and "-> 200" in text
