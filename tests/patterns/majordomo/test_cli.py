"""``zactors mdp ...``: a broker and a worker as real processes, requests from the CLI entry point."""
import json
import re
import signal
import sys
import time

import gevent
import gevent.subprocess
import pytest

from zactors.apps.cli import main
from zactors.apps.demo import demo_node
from zactors.patterns.majordomo import Broker, Worker
from tests.apps.cli_helpers import zactors
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
    assert capsys.readouterr().out.splitlines() == ['PARTIAL ["hi", "there"]', 'PARTIAL ["hi", "there"]',
                                                    'FINAL   ["hi", "there"]']
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
    assert capsys.readouterr().out.splitlines() == ['FINAL   ["sealed"]']
    # refused: said within a second or two, exit status 4, whatever the timeout
    stranger = ["--connect", endpoint, "--curve", str(tmp_path / "others" / "stranger.key_secret")] + server
    wrong_server = ["--connect", endpoint, "--curve", str(tmp_path / "clients" / "me.key_secret"),
                    "--curve-server", str(tmp_path / "clients" / "me.key")]
    for argv, says in [(stranger, "the broker refused our key (ZAP 400)"),
                       (wrong_server, "the server public key we use is not its key"),
                       (["--connect", endpoint], "it uses CURVE: give its public key and ours")]:
        for command in (["request", "echo", "x"], ["mmi", "echo"]):
            started = time.monotonic()
            result = zactors("mdp", *command, "--timeout", "20", *argv)
            assert result.returncode == 4, result
            assert says in result.stderr, result.stderr
            assert time.monotonic() - started < 10
    worker_refused = zactors("mdp", "worker", "other", *stranger)
    assert worker_refused.returncode == 4 and "refused our key" in worker_refused.stderr
    for proc in (worker, broker):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_request_and_mmi_against_an_in_process_broker(capsys, caplog):
    with Broker() as broker:
        worker = Count(broker.endpoint)
        try:
            wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "worker")
            assert main(["-q", "mdp", "request", "count", "1", "--connect", broker.endpoint]) == 0
            assert capsys.readouterr().out.splitlines() == ['PARTIAL ["0"]', 'FINAL   ["done"]']
            assert main(["-q", "mdp", "mmi", "nothing", "--connect", broker.endpoint]) == 1
            assert "no workers (404)" in capsys.readouterr().out
            assert main(["-q", "mdp", "request", "nothing", "x", "--connect", broker.endpoint,
                         "--timeout", "0.1", "--retries", "2"]) == 1
            assert "the broker is there: is a worker for 'nothing'" in caplog.text
        finally:
            worker.destroy()


class Failing(Worker):
    service = b"fail"

    def handle(self, request):
        raise ValueError("bad input %s" % request[0].decode())


def test_a_failed_request_is_one_line_on_stderr_and_status_1(capsys):
    with Broker() as broker:
        worker = Failing(broker.endpoint)
        try:
            wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "worker")
            assert main(["-q", "mdp", "request", "fail", "x", "--connect", broker.endpoint, "--timeout", "5"]) == 1
            out, err = capsys.readouterr()
            assert out == ""
            assert err == "zactors mdp request: error: service 'fail' failed: ValueError: bad input x\n"
        finally:
            worker.destroy()


def test_mmi_tells_no_workers_from_no_broker(caplog):
    with Broker() as broker:
        assert main(["-q", "mdp", "mmi", "nothing", "--connect", broker.endpoint]) == 1
        endpoint = broker.endpoint
    assert main(["-q", "mdp", "mmi", "nothing", "--connect", endpoint, "--timeout", "0.3"]) == 3
    assert main(["-q", "mdp", "request", "nothing", "x", "--connect", endpoint, "--timeout", "0.2",
                 "--retries", "1"]) == 3
    assert "no broker answered at %s" % endpoint in caplog.text


def test_request_output_is_unambiguous(capsys):
    with Broker() as broker:
        worker = Echo(broker.endpoint)
        try:
            wait_for(lambda: broker.call("INFO")["workers"] == 1, 5, "worker")
            frames = ["a | b", "c", "tab\there", '"quoted"']
            assert main(["-q", "mdp", "request", "echo", *frames, "--connect", broker.endpoint]) == 0
            line = capsys.readouterr().out.strip()
            assert line.startswith("FINAL   ")
            assert json.loads(line.split(None, 1)[1]) == frames
        finally:
            worker.destroy()


class Echo(Worker):
    service = b"echo"

    def handle(self, request):
        return request


def test_request_help_warns_that_retries_can_repeat_work():
    result = zactors("mdp", "request", "--help")
    assert "Retries can run a request more than once" in " ".join(result.stdout.split())


def test_demo_part_runs(capsys):
    from zactors.apps.commands import mdp
    lines = []
    with demo_node() as node:
        mdp.demo(lines.append, node)
        text = "\n".join(lines)
        assert "REPLIES" in text and "4 words" in text and "all answered correctly: True" in text and "-> 200" in text
        assert node.broker.call("INFO")["counters"]["requests"] >= 1503  # they went through the node's broker
