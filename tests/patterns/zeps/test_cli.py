"""``zactors zeps ...``: a broker process, and publish/subscribe/streams/dump from the CLI entry point."""
import io
import os
import re
import signal
import sys

import gevent.subprocess
import pytest

from zactors.apps.cli import main
from zactors.apps.demo import demo_node

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def run(processes):
    return lambda *args, **kw: processes([sys.executable, "-m", "zactors.apps.cli", *args],
                                         stderr=gevent.subprocess.PIPE, **kw)


def _endpoint(broker):
    line = b""
    while b"broker on" not in line:
        line = broker.stderr.readline()
        assert line, "broker exited"
    return re.search(rb"broker on (\S+),", line).group(1).decode()


def test_publish_subscribe_streams_and_dump(run, capsys, tmp_path, monkeypatch):
    journal = str(tmp_path / "j")
    broker = run("zeps", "broker", "--journal", journal, "--bind", "tcp://127.0.0.1:*", "--fsync", "batch",
                 "--retain", "1G", "--retain", "7d", "--ack", "synced")
    endpoint = _endpoint(broker)
    c = ["--connect", endpoint]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"one\ntwo\nthree\n")))
    assert main(["-q", "zeps", "publish", "orders", "eu.fr", *c]) == 0
    assert main(["-q", "zeps", "publish", "orders", "us.ny", "hello", *c]) == 0
    capsys.readouterr()
    assert main(["-q", "zeps", "subscribe", "orders", "eu", "--count", "3", *c]) == 0
    assert capsys.readouterr().out.splitlines() == ["1\teu.fr\tone", "2\teu.fr\ttwo", "3\teu.fr\tthree"]
    assert main(["-q", "zeps", "subscribe", "orders", "re:us", "--from", "2", "--count", "1", *c]) == 0
    assert capsys.readouterr().out.splitlines() == ["4\tus.ny\thello"]
    assert main(["-q", "zeps", "subscribe", "orders", "--since", "1h", "--count", "4", *c]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
    assert main(["-q", "zeps", "streams", *c]) == 0
    out = capsys.readouterr().out
    assert "stream orders" in out and "seq 1..4" in out and "ack synced" in out
    broker.send_signal(signal.SIGINT)
    assert broker.wait(10) == 0
    assert main(["-q", "zeps", "dump", journal]) == 0
    assert "seq 1..4" in capsys.readouterr().out
    assert main(["-q", "zeps", "dump", os.path.join(journal, "orders"), "--from", "4"]) == 0
    by_directory = capsys.readouterr().out
    header, line = by_directory.splitlines()
    assert header.split() == ["SEQ", "TIME", "KEY", "BODY"]
    seq, stamp, key, body = line.split()
    assert (seq, key, body) == ("4", "us.ny", "hello") and re.search(r"[+-]\d\d:\d\d$", stamp)  # a time zone
    assert header.index("KEY") == line.index("us.ny") and header.index("TIME") == line.index(stamp)  # aligned
    assert main(["-q", "zeps", "dump", "orders", "--journal", journal, "--from", "4"]) == 0  # by stream name
    assert capsys.readouterr().out == by_directory
    monkeypatch.chdir(tmp_path)
    os.makedirs("zactors-data")
    os.rename(journal, os.path.join("zactors-data", "zeps"))      # where zactors up journals: the default
    assert main(["-q", "zeps", "dump", "orders", "--from", "4"]) == 0
    assert capsys.readouterr().out == by_directory
    assert main(["-q", "zeps", "dump", "ordres"]) == 2
    assert "no stream 'ordres' in journal directory zactors-data/zeps (streams there: orders)" in \
        capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["dump", "/nonexistent/j"], "no such directory"),
    (["broker", "--journal", "j", "--fsync", "sometimes"], "say never, batch, or a period"),
    (["broker", "--journal", "j", "--retain", "lots"], "neither a size (500M, 10G) nor an age"),
    (["broker", "--journal", "j", "--permissions", "/nonexistent/p"], "cannot read /nonexistent/p"),
    (["broker", "--journal", "j", "--ack", "synced", "--fsync", "never"], "--ack synced needs fsync"),
    (["broker", "--journal", "j", "--heartbeat", "9"], "must not be longer than --expiry"),
    (["broker", "--journal", "j", "--bind", "127.0.0.1:5570"], "has no transport"),
    (["subscribe", "s", "--since", "yesterday"], "is not a time"),
    (["subscribe", "s", "--from", "-1"], "must be 0 or more"),
    (["subscribe", "s", "--new", "--from", "3"], "not allowed with argument"),
    (["publish", "s", "k", "--connect", "tcp://*:1"], "to connect, name the host"),
])
def test_user_errors_are_one_line(argv, says, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        status = main(["-q", "zeps", *argv])
    except SystemExit as exit:
        status = exit.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert says in err and len(err.strip().splitlines()) == 1, err


def test_nobody_answering_is_exit_status_3(capsys, tmp_path):
    import socket
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    endpoint = "tcp://127.0.0.1:%d" % free.getsockname()[1]
    free.close()
    for argv in (["streams"], ["publish", "s", "k", "v"], ["subscribe", "s"]):
        assert main(["-q", "zeps", *argv, "--connect", endpoint, "--timeout", "0.3"]) == 3
        assert "no answer" in capsys.readouterr().err


def test_broker_stops_with_a_summary(run, tmp_path):
    broker = run("zeps", "broker", "--journal", str(tmp_path / "j"), "--bind", "tcp://127.0.0.1:*")
    endpoint = _endpoint(broker)
    assert main(["-q", "zeps", "publish", "s", "k", "v", "--connect", endpoint]) == 0
    broker.send_signal(signal.SIGTERM)
    assert broker.wait(10) == 0
    assert "broker stopped: 1 stream(s), 1 message(s) journaled, 1 peer(s) attached" in broker.stderr.read().decode()


def test_demo_part(capsys):
    from zactors.apps.commands import zeps
    lines = []
    with demo_node() as node:
        zeps.demo(lines.append, node)
        text = "\n".join(lines)
        assert "none missing: True" in text
        assert "in order: True" in text
        assert "then live" in text
        assert "the node's ZEPS broker on" in text and node.zeps.call("INFO")["streams"]["ticks"]["last_seq"] == 20001


def test_an_interrupted_subscribe_says_where_to_resume(run, broker):
    from zactors.patterns.zeps import Publisher
    with Publisher(broker.endpoint, "s") as pub:
        for i in range(3):
            pub.publish(b"k", b"%d" % i)
        pub.flush()
    sub = run("zeps", "subscribe", "s", "--connect", broker.endpoint, stdout=gevent.subprocess.PIPE)
    with gevent.Timeout(20):                     # the three messages printed: the command is past its start
        assert [sub.stdout.readline() for _ in range(3)] == [b"%d\tk\t%d\n" % (i + 1, i) for i in range(3)]
    sub.send_signal(signal.SIGINT)
    assert sub.wait(10) == 130
    assert "interrupted after 3 message(s); last sequence 3 (--from 4 resumes)" in sub.stderr.read().decode()


def _publish_lines_across_a_broker_kill(run, tmp_path, n, *options):
    """``zeps publish`` of lines 1..n from stdin, the broker SIGKILLed once the first half is journaling and
    restarted on the same journal and endpoint before the second half; stdin closed.  (broker, pub, journal)."""
    from zactors.actors.journal import JournalReader

    from ...conftest import wait_for
    journal = str(tmp_path / "j")
    broker = run("zeps", "broker", "--journal", journal, "--bind", "tcp://127.0.0.1:*")
    endpoint = _endpoint(broker)
    pub = run("zeps", "publish", "s", "k", *options, "--connect", endpoint, stdin=gevent.subprocess.PIPE)

    def journaled():
        try:
            with JournalReader(os.path.join(journal, "s")) as reader:
                return reader.last_seq
        except Exception:  # not created yet
            return 0
    pub.stdin.write(b"".join(b"line %d\n" % i for i in range(1, n // 2 + 1)))
    pub.stdin.flush()
    wait_for(lambda: journaled() > 0, timeout=30, what="the first lines journaled")
    broker.kill()
    broker.wait()
    broker = run("zeps", "broker", "--journal", journal, "--bind", endpoint)
    _endpoint(broker)
    pub.stdin.write(b"".join(b"line %d\n" % i for i in range(n // 2 + 1, n + 1)))
    pub.stdin.close()
    return broker, pub, journal


def test_publish_from_stdin_under_a_broker_kill_names_the_lines_that_may_be_lost(run, tmp_path):
    """Issue 19, ``--no-resend``: kill -9 the broker under ``zeps publish`` from stdin; the command names what
    may be lost, and every line it does not name is in the journal."""
    from zactors.actors.journal import JournalReader

    n = 40000
    broker, pub, journal = _publish_lines_across_a_broker_kill(run, tmp_path, n, "--no-resend")
    assert pub.wait(60) == 1
    said = pub.stderr.read().decode().strip().splitlines()[-1]
    match = re.search(r"lines? ([\d, -]+) \((\d+) message\(s\)\) may be lost", said)
    assert match and said.startswith("published %d message(s) to s; " % n), said
    assert said.endswith("everything else written by the broker"), said
    named = set()
    for part in match.group(1).split(", "):
        first, _, last = part.partition("-")
        named.update(range(int(first), int(last or first) + 1))
    assert len(named) == int(match.group(2))
    broker.send_signal(signal.SIGINT)
    assert broker.wait(10) == 0
    with JournalReader(os.path.join(journal, "s")) as reader:
        bodies = [r.body for r in reader.records()]
    kept = {int(b.split()[1]) for b in bodies}
    assert len(kept) == len(bodies)                       # no line twice
    assert set(range(1, n + 1)) - kept <= named           # whatever is missing was named
    assert set(range(1, n + 1)) - named <= kept           # and whatever was not named is there


def test_publish_under_a_broker_kill_journals_every_line_once(run, tmp_path):
    """Issue 19, as a new user would try it: kill -9 the broker under ``zeps publish`` from stdin and restart
    it; the lines it had not confirmed are sent again (idempotent publishing, the default) and the journal
    holds every line once, in order; the command says so in one line and exits 0."""
    from zactors.actors.journal import JournalReader

    n = 40000
    broker, pub, journal = _publish_lines_across_a_broker_kill(run, tmp_path, n)
    assert pub.wait(60) == 0
    said = pub.stderr.read().decode().strip().splitlines()[-1]
    assert re.fullmatch(r"published %d message\(s\) to s; written by the broker; \d+ sent again after the "
                        r"broker lost the peering \(each journaled once\)" % n, said), said
    broker.send_signal(signal.SIGINT)
    assert broker.wait(10) == 0
    with JournalReader(os.path.join(journal, "s")) as reader:
        bodies = [r.body for r in reader.records()]
    assert bodies == [b"line %d" % i for i in range(1, n + 1)]          # every line, once, in order


def test_publish_under_a_broker_that_stays_down_names_the_lines_not_confirmed(run, tmp_path):
    """The broker is killed and does not come back: one line names the lines not confirmed and why, exit 1
    (apps/exitstatus.FAILED); every line before them is in the journal."""
    from zactors.actors.journal import JournalReader

    from ...conftest import wait_for
    journal = str(tmp_path / "j")
    broker = run("zeps", "broker", "--journal", journal, "--bind", "tcp://127.0.0.1:*")
    endpoint = _endpoint(broker)
    pub = run("zeps", "publish", "s", "k", "--connect", endpoint, "--timeout", "1", stdin=gevent.subprocess.PIPE)

    def journaled():
        try:
            with JournalReader(os.path.join(journal, "s")) as reader:
                return reader.last_seq
        except Exception:  # not created yet
            return 0
    pub.stdin.write(b"".join(b"line %d\n" % i for i in range(1, 20001)))
    pub.stdin.flush()
    wait_for(lambda: journaled() > 0, timeout=30, what="the first lines journaled")
    broker.kill()
    broker.wait()
    pub.stdin.write(b"".join(b"line %d\n" % i for i in range(20001, 20101)))
    pub.stdin.close()
    assert pub.wait(60) == 1
    said = pub.stderr.read().decode().strip().splitlines()
    # "sent", not "published": what the broker did not confirm is not said to be journaled
    match = re.fullmatch(r"sent 20100 message\(s\) to s; lines (\d+)-20100 not confirmed written; "
                         r"the broker did not confirm within [\d.]+s", said[-1])
    assert match, said
    assert not any("Traceback" in line or "error:" in line for line in said), said
    with JournalReader(os.path.join(journal, "s")) as reader:
        kept = [int(r.body.split()[1]) for r in reader.records()]
    assert kept[:int(match.group(1)) - 1] == list(range(1, int(match.group(1))))  # all before them kept
