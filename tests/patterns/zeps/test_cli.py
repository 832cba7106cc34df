"""``zactors zeps ...``: a broker process, and publish/subscribe/streams/dump from the CLI entry point."""
import io
import os
import re
import signal
import sys

import gevent.subprocess
import pytest

from zactors.apps.cli import main

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def run(processes):
    return lambda *args: processes([sys.executable, "-m", "zactors.apps.cli", *args], stderr=gevent.subprocess.PIPE)


def _endpoint(broker):
    line = b""
    while b"broker on" not in line:
        line = broker.stderr.readline()
        assert line, "broker exited"
    return re.search(rb"broker on (\S+),", line).group(1).decode()


def test_publish_subscribe_streams_and_dump(run, capsys, tmp_path, monkeypatch):
    journal = str(tmp_path / "j")
    broker = run("zeps", "broker", "--journal", journal, "--bind", "tcp://127.0.0.1:*", "--fsync", "batch",
                 "--retain", "1G", "--retain", "7d")
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
    assert "stream orders" in out and "seq 1..4" in out
    broker.send_signal(signal.SIGINT)
    assert broker.wait(10) == 0
    assert main(["-q", "zeps", "dump", journal]) == 0
    assert "seq 1..4" in capsys.readouterr().out
    assert main(["-q", "zeps", "dump", os.path.join(journal, "orders"), "--from", "4"]) == 0
    assert capsys.readouterr().out.split("\t")[::3] == ["4", "hello\n"]


def test_user_errors_are_one_line(capsys, tmp_path):
    assert main(["-q", "zeps", "dump", str(tmp_path / "nothing")]) == 1
    assert capsys.readouterr().err.strip() == "zactors: error: no such directory: %s" % (tmp_path / "nothing")
    assert main(["-q", "zeps", "broker", "--journal", str(tmp_path), "--fsync", "sometimes"]) == 1
    assert "--fsync takes never, batch or a period" in capsys.readouterr().err
    assert main(["-q", "zeps", "broker", "--journal", str(tmp_path), "--permissions", "x"]) == 1
    assert "need --curve" in capsys.readouterr().err
    assert main(["-q", "zeps", "streams", "--connect", "tcp://127.0.0.1:1", "--timeout", "0.3"]) == 1
    assert capsys.readouterr().err.strip().startswith("zactors: error: no answer from")
    with pytest.raises(SystemExit):
        main(["-q", "zeps", "subscribe", "s", "--since", "yesterday"])
    assert "invalid time value" in capsys.readouterr().err


def test_demo_part(capsys):
    from zactors.apps.commands import zeps
    lines = []
    zeps.demo(lines.append)
    text = "\n".join(lines)
    assert "none missing: True" in text
    assert "in order: True" in text
    assert "then live" in text
