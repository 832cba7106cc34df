"""Every ``zactors`` subcommand, found by walking the parser (a new one must be listed here): ``--help``, a
wrong option, and Ctrl-C (SIGINT) while it runs: no traceback, exit statuses as apps/exitstatus.py says
(a server asked to stop: 0; any other command interrupted: 130)."""
import argparse
import signal
import socket

import gevent
import gevent.subprocess
import pytest
import zmq

from tests.apps.cli_helpers import assert_clean, read_until, run_main, start
from tests.apps.test_cli import _commands

pytestmark = pytest.mark.timeout(120)

LEAVES = [" ".join(path) for path, parser in _commands()
          if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)]

#: commands that end at once, so there is no running command to interrupt (a SIGINT during start-up is
#: test_cli.py::test_ctrl_c_while_the_command_still_loads_is_quiet)
INSTANT = {"context add", "context list", "context show", "context remove", "context select", "keygen", "zeps dump"}

SILENT = "{silent}"   # stands for the endpoint of a server that takes the command's first message and never answers
HTTP = "{http}"       # a TCP listener that accepts and never answers
TMP = "{tmp}"
ANY = "tcp://127.0.0.1:*"

#: command -> (argv after it, where it says it is ready: "stdout:TEXT", "stderr:TEXT", or None: it reached
#: SILENT/HTTP; the exit status after SIGINT)
RUNNING = {
    "demo": ([], "stdout:== 1/", 130),
    "web": (["--port", "0"], "stderr:serving on", 0),
    "up": (["--data", TMP, "--mdp", ANY, "--zeps", ANY, "--clone-port", "0", "--web", "127.0.0.1:0",
            "--no-harmony"], "stdout:up: Ctrl-C stops", 0),
    "status": (["--url", HTTP, "--timeout", "60"], None, 130),
    "mdp broker": (["--bind", ANY], "stderr:broker on", 0),
    "mdp worker": (["echo", "--connect", SILENT], None, 0),
    "mdp request": (["echo", "x", "--connect", SILENT, "--timeout", "60"], None, 130),
    "mdp mmi": (["echo", "--connect", SILENT, "--timeout", "60"], None, 130),
    "peer chat": (["--name", "typist", "--no-beacon"], "stdout:in group CHAT", 130),
    "peer list": (["--no-beacon", "--endpoint", SILENT, "--wait", "60"], None, 130),
    "clone server": (["--port", "0"], "stderr:Ctrl-C stops", 0),
    "clone get": (["k", "--connect", SILENT, "--timeout", "60"], None, 130),
    "clone set": (["k", "v", "--connect", SILENT, "--timeout", "60"], None, 130),
    "clone del": (["k", "--connect", SILENT, "--timeout", "60"], None, 130),
    "clone watch": (["--connect", SILENT, "--timeout", "60"], None, 130),
    "clone dump": (["--connect", SILENT, "--timeout", "60"], None, 130),
    "pipeline demo": (["--tasks", "100000000", "--work-ms", "5"], "stdout:ventilator tcp://", 130),
    "pipeline ventilate": (["--bind", ANY, "--tasks", "5"], "stdout:ventilator on", 130),
    "pipeline work": (["--ventilator", SILENT, "--sink", SILENT], "stdout:Ctrl-C to stop", 0),
    "pipeline sink": (["--bind", ANY, "--tasks", "5"], "stdout:sink on", 130),
    "zeps broker": (["--journal", TMP, "--bind", ANY], "stderr:broker on", 0),
    "zeps publish": (["s", "k", "body", "--connect", SILENT, "--timeout", "60"], None, 130),
    "zeps subscribe": (["s", "--connect", SILENT, "--timeout", "60"], None, 130),
    "zeps streams": (["--connect", SILENT, "--timeout", "60"], None, 130),
    "zeps consume": (["s", "g", "--connect", SILENT, "--timeout", "60"], None, 130),
    "zeps groups": (["--connect", SILENT, "--timeout", "60"], None, 130),
    "spark pipeline": (["--workdir", TMP, "--duration", "600"], "stderr:aggregates appear", 130),
}


def test_every_subcommand_is_classified():
    assert set(LEAVES) == set(RUNNING) | INSTANT, set(LEAVES) ^ (set(RUNNING) | INSTANT)


def test_every_client_command_takes_a_context():
    # issue 21: --context NAME (or $ZACTORS_CONTEXT) on every client command: those that connect to a server
    options = {" ".join(path): {o for a in parser._actions for o in a.option_strings} for path, parser in _commands()}
    clients = sorted(c for c in LEAVES if options[c] & {"--connect", "--url"})
    assert clients == ["clone del", "clone dump", "clone get", "clone set", "clone watch", "mdp mmi", "mdp request",
                       "mdp worker", "status", "zeps consume", "zeps groups", "zeps publish", "zeps streams",
                       "zeps subscribe"]
    assert [c for c in clients if "--context" not in options[c]] == []


@pytest.mark.parametrize("command", LEAVES)
def test_help(command, capsys):
    status, out, err = run_main(capsys, *command.split(), "--help")
    assert status == 0 and err == "", err
    assert out.startswith("usage: zactors %s" % command), out


@pytest.mark.parametrize("command", LEAVES)
def test_a_wrong_option_is_one_line_and_status_2(command, capsys):
    status, out, err = run_main(capsys, *command.split(), "--no-such-option")
    assert status == 2 and out == "", (status, out)
    assert err.startswith("zactors %s: error: " % command) and err.count("\n") == 1, err
    assert err.endswith("(see 'zactors %s --help')\n" % command), err


class _Silent:
    """A ROUTER that takes messages and never answers; ``reached`` once one came."""

    def __init__(self):
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.linger = 0
        self.router.bind("tcp://127.0.0.1:*")
        self.endpoint = self.router.getsockopt_string(zmq.LAST_ENDPOINT)

    def reached(self, timeout=30):
        if not self.router.poll(timeout * 1000):   # a plain socket: blocks this process only, the command runs on
            raise AssertionError("the command never reached %s within %ss" % (self.endpoint, timeout))
        return self.router.recv_multipart()

    def close(self):
        self.router.close()
        self.context.term()


@pytest.mark.parametrize("command", sorted(RUNNING))
def test_ctrl_c_while_it_runs(command, processes, tmp_path):
    if command == "spark pipeline":
        from tests.patterns.zeps.spark.conftest import spark_env
        spark_env()                  # skips, with the reason, without pyspark or Java
    argv, ready, expected = RUNNING[command]
    silent = _Silent()
    http = socket.socket()
    http.bind(("127.0.0.1", 0))
    http.listen(1)
    held = []
    try:
        argv = [a.replace(SILENT, silent.endpoint).replace(HTTP, "http://127.0.0.1:%d/" % http.getsockname()[1])
                .replace(TMP, str(tmp_path / "data")) for a in argv]
        proc = start(processes, *command.split(), *argv, stdin=gevent.subprocess.PIPE)
        if ready is None:
            if HTTP in RUNNING[command][0]:
                http.settimeout(30)
                held.append(http.accept()[0])        # kept open, unanswered, until the end
            else:
                silent.reached()
        else:
            where, text = ready.split(":", 1)
            read_until(getattr(proc, where), text, timeout=90)
        proc.send_signal(signal.SIGINT)
        with gevent.Timeout(60):
            out, err = proc.stdout.read(), proc.stderr.read()
            status = proc.wait()
    finally:
        for conn in held:
            conn.close()
        http.close()
        silent.close()
    assert_clean(out + err)
    assert status == expected, (status, out[-2000:], err[-2000:])
    assert "error:" not in err, err
