"""What a new user meets on the command line: one shape of diagnostic, exit statuses as documented,
free ports as 0 or *, default ports that do not clash, a prompt that says how it ends."""
import logging
import os
import pty
import signal
import socket

import gevent
import gevent.subprocess
import pytest

from zactors.apps.cli import Diagnostics, build_parser, short_name
from zactors.patterns.clone.server import CloneServer
from zactors.patterns.zeps.broker import Broker as ZepsBroker
from tests.apps.cli_helpers import run_main, ENV, ZACTORS, assert_clean, read_until, start, zactors
from tests.conftest import ROOT, wait_for
from tests.patterns.clone.conftest import free_base_port
from tests.actors.test_journal_enospc import small_disk  # noqa: F401  (fixture: a 256 KiB tmpfs)

pytestmark = pytest.mark.timeout(90)


run = run_main   # zactors ARGV in this process: (status, stdout, stderr)


# -- zeps broker --journal -------------------------------------------------------
@pytest.mark.parametrize("where, says", [
    ("a-file", "is a file, not a directory: give a directory for the journal"),
    ("a-file/below", "cannot make the journal directory"),
])
def test_an_unusable_journal_is_one_line_and_exit_2(tmp_path, where, says):
    (tmp_path / "a-file").write_text("x")
    result = zactors("zeps", "broker", "--journal", str(tmp_path / where), "--bind", "tcp://127.0.0.1:*")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("zactors zeps broker: error: ") and says in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert_clean(result.stderr)


def test_a_busy_port_for_the_zeps_broker_is_one_line(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        result = zactors("zeps", "broker", "--journal", str(tmp_path), "--bind",
                         "tcp://127.0.0.1:%d" % busy.getsockname()[1])
    finally:
        busy.close()
    assert result.returncode == 2 and "the address is in use" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1     # no teardown traceback before it
    assert "_multicast" not in result.stderr


# -- status --url ------------------------------------------------------------------
@pytest.mark.parametrize("url", ["nonsense", "ftp://x", "http://", "http://127.0.0.1:99999/", "127.0.0.1:8765"])
def test_a_wrong_url_is_exit_2(capsys, url):
    status, _, err = run(capsys, "status", "--url", url)
    assert status == 2 and err.startswith("zactors status: error: argument --url: ") and err.count("\n") == 1, err


def test_a_url_where_nobody_answers_is_exit_3(capsys):
    status, _, err = run(capsys, "status", "--url", "http://127.0.0.1:1/", "--timeout", "2")
    assert status == 3 and err.startswith("zactors status: error: no dashboard answered"), err


# -- one shape of diagnostics, short logger names ------------------------------------
@pytest.mark.parametrize("name, short", [
    ("zactors.patterns.clone.client", "zactors.clone"),
    ("zactors.patterns.majordomo.broker", "zactors.mdp"),
    ("zactors.patterns.zeps.spark.source", "zactors.spark"),
    ("zactors.patterns.harmony.node", "zactors.harmony"),
    ("zactors.actors.actor", "zactors.actors"),
    ("zactors.apps.dashboard.sampler", "zactors.dashboard"),
    ("zactors.apps.up", "zactors.up"),
    ("zactors.mdp", "zactors.mdp"),
    ("gevent", "gevent"),
])
def test_logger_names_are_short(name, short):
    assert short_name(name) == short


def test_warnings_and_errors_read_like_every_other_diagnostic():
    shape = Diagnostics("zactors clone get")

    def record(level, name="zactors.patterns.clone.client"):
        return logging.LogRecord(name, level, __file__, 1, "server %s silent", ("tcp://x:1",), None)
    assert shape.format(record(logging.ERROR)) == "zactors clone get: error: server tcp://x:1 silent"
    assert shape.format(record(logging.WARNING)) == "zactors clone get: warning: server tcp://x:1 silent"
    info = shape.format(record(logging.INFO))
    assert info.endswith(" INFO zactors.clone: server tcp://x:1 silent") and "patterns" not in info


def test_a_failed_command_says_which_command_failed():
    result = zactors("mdp", "request", "echo", "hi", "--connect", "tcp://127.0.0.1:1", "--timeout", "0.3",
                     "--retries", "1")
    assert result.returncode == 3 and result.stdout == ""
    assert result.stderr == ("zactors mdp request: error: no broker answered at tcp://127.0.0.1:1 within 0.3s "
                             "(is one running there?)\n")


# -- clone del of a missing key ------------------------------------------------------
def test_clone_del_of_a_missing_key_exits_1(capsys):
    port = free_base_port()
    with CloneServer(port):
        at = ["--connect", "tcp://127.0.0.1:%d" % port]
        assert run(capsys, "-q", "clone", "set", "/here", "1", *at)[0] == 0
        status, out, err = run(capsys, "-q", "clone", "del", "/nothere", *at)
        assert (status, out) == (1, "") and err == "zactors clone del: error: /nothere: no such key\n"
        assert run(capsys, "-q", "clone", "del", "/here", *at)[0] == 0
        assert run(capsys, "-q", "clone", "get", "/here", *at)[0] == 1


# -- any free port is 0 or * ---------------------------------------------------------
def _stop(proc):
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


@pytest.mark.parametrize("free", ["0", "*"])
def test_any_free_port_is_0_or_star(processes, tmp_path, free):
    server = start(processes, "clone", "server", "--port", free)
    read_until(server.stderr, "clone server (alone) on tcp://127.0.0.1:")
    _stop(server)
    web = start(processes, "web", "--port", free)
    read_until(web.stderr, "http://127.0.0.1:")
    _stop(web)
    node = start(processes, "up", "--data", str(tmp_path), "--mdp", "tcp://127.0.0.1:" + free, "--zeps",
                 "tcp://127.0.0.1:" + free, "--clone-port", free, "--web", "127.0.0.1:" + free, "--no-harmony")
    lines = read_until(node.stdout, "up: Ctrl-C stops")
    assert not any(":5555" in line or ":8765" in line for line in lines), lines
    _stop(node)


def _ports(values):
    return {int(v.rsplit(":", 1)[1]) for v in values if isinstance(v, str) and v.rsplit(":", 1)[-1].isdigit()}


def test_the_pipelines_default_ports_do_not_clash_with_the_nodes():
    from zactors.apps.up import DEFAULTS
    parser = build_parser()
    node = _ports([DEFAULTS["majordomo"]["bind"], DEFAULTS["zeps"]["bind"]])
    node |= set(range(DEFAULTS["clone"]["port"], DEFAULTS["clone"]["port"] + 4))
    node.add(int(DEFAULTS["dashboard"]["bind"].rsplit(":", 1)[1]))
    pipeline = set()
    for command in ("ventilate", "work", "sink"):
        args = parser.parse_args(["pipeline", command])
        pipeline |= _ports(vars(args).values())
    assert pipeline and not pipeline & node, (pipeline, node)


# -- zeps publish from a terminal ------------------------------------------------------
def test_publish_from_a_terminal_says_it_reads_until_ctrl_d(processes, tmp_path):
    with ZepsBroker(str(tmp_path / "journal"), "tcp://127.0.0.1:*") as broker:
        controller, terminal = pty.openpty()
        try:
            publish = processes(ZACTORS + ["zeps", "publish", "typed", "k", "--connect", broker.endpoint],
                                stdin=terminal, stdout=gevent.subprocess.PIPE, stderr=gevent.subprocess.PIPE,
                                text=True, env=ENV, cwd=str(ROOT))
            os.close(terminal)
            terminal = None
            assert "until Ctrl-D" in read_until(publish.stderr, "zactors zeps publish: reading")[-1]
            os.write(controller, b"hello\n")
            wait_for(lambda: broker.call("INFO")["streams"].get("typed", {}).get("last_seq") == 1, 20,
                     "the typed line published")
            os.write(controller, b"\x04")        # Ctrl-D: end of input on a terminal
            _, err = publish.communicate(timeout=30)
        finally:
            os.close(controller)
            if terminal is not None:
                os.close(terminal)
    assert publish.returncode == 0
    assert "published 1 message(s) to typed; written by the broker" in err


# -- zeps publish on a full disk ---------------------------------------------------------
def test_publish_to_a_full_disk_says_exactly_what_was_journaled(small_disk, capsys, monkeypatch):  # noqa: F811
    import io
    import re
    import sys
    (small_disk / "filler").write_bytes(b"\0" * (96 << 10))
    with ZepsBroker(str(small_disk / "journal"), "tcp://127.0.0.1:*", segment_bytes=1 << 20) as broker:
        lines = b"".join(b"%0100d\n" % i for i in range(12000))
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines)))
        status, out, err = run(capsys, "zeps", "publish", "s", "k", "--connect", broker.endpoint, "--timeout", "5")
        stream = broker.call("INFO")["streams"]["s"]
    written, last = stream["written_seq"], stream["last_seq"]
    assert status == 1 and out == "", (status, out)
    assert 0 < written < 12000
    [summary] = err.splitlines()   # one line: what was journaled, what the broker holds, what it refused, why
    # it said "published 12000" while 5,120 were written, then "sent 12000; lines 1-12000 not confirmed":
    # now the count it says is the journal's, from the broker's refusals (the JOURNALED field)
    held = "" if last == written else \
        "lines %d-%d held unwritten by the broker \\(written if it gets room before it stops\\); " % (written + 1, last)
    said = re.match(r"(\d+) of 12000 journaled \(lines 1-(\d+)\); %slines (\d+)-12000 refused: (.*)$" % held, summary)
    assert said, (summary, written, last)
    assert int(said.group(1)) == int(said.group(2)) == written and int(said.group(3)) == last + 1, (summary, written)
    reason = said.group(4)
    assert reason.startswith("stream s c") and " write its journal: " in reason and "ENOSPC" in reason, summary
    assert summary.count("ENOSPC") == 1 and summary.count(str(small_disk)) == 1, summary   # the reason once


# -- zeps broker --require-tokens -----------------------------------------------------
def test_require_tokens_refuses_a_spec_only_subscribers_credit(processes, tmp_path):
    """``--require-tokens`` reaches the broker: a subscriber that did not ask for probe tokens (a spec-only
    client) has its CREDIT refused, saying why; without the option the same CREDIT is honoured."""
    import zmq
    from zactors.patterns.zeps import protocol as p

    def credit_answer(*extra):
        broker = start(processes, "zeps", "broker", "--journal", str(tmp_path / ("j%d" % len(extra))),
                       "--bind", "tcp://127.0.0.1:*", *extra)
        endpoint = read_until(broker.stderr, "broker on ")[-1].split("broker on ")[1].split(",")[0]
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(endpoint)
        try:
            for frame in (p.attach(b"s"), p.subscribe(b"", 0), p.credit(1 << 20), p.PING_FRAME):
                sock.send(frame)
            answers = []
            while not answers or type(answers[-1]) not in (p.Invalid, p.PingOk):
                assert sock.poll(20000), answers
                answers.append(p.decode(sock.recv()))
            return answers[-1]
        finally:
            sock.close()
            _stop(broker)

    refused = credit_answer("--require-tokens")
    assert type(refused) is p.Invalid and "FEATURES tokens" in refused.reason, refused
    assert type(credit_answer()) is p.PingOk
