"""``zactors clone ...``: a server process, the client commands, user errors, the demo part, CURVE."""
import signal
import sys

import gevent.subprocess
import pytest
import zmq

from zactors.actors.auth import generate_keypair
from zactors.apps.cli import main
from zactors.apps.demo import demo_node
from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.server import CloneServer
from tests.patterns.clone.conftest import client_of, free_base_port

pytestmark = pytest.mark.timeout(90)


def test_server_and_client_commands(processes, capsys):
    port = free_base_port()
    server = processes([sys.executable, "-m", "zactors.apps.cli", "clone", "server", "--port", str(port)],
                       stderr=gevent.subprocess.PIPE)
    line = b""
    while b"clone server" not in line:
        line = server.stderr.readline()
        assert line, "server exited"
    at = ["--connect", "tcp://127.0.0.1:%d" % port]
    assert main(["-q", "clone", "set", "/app/a", "1", *at]) == 0
    assert main(["-q", "clone", "set", "/app/b", "2", "--ttl", "60", *at]) == 0
    assert main(["-q", "clone", "set", "/other/c", "3", *at]) == 0
    capsys.readouterr()
    assert main(["-q", "clone", "get", "/app/a", *at]) == 0
    assert capsys.readouterr().out == "1\n"
    assert main(["-q", "clone", "dump", "--subtree", "/app/", *at]) == 0
    assert capsys.readouterr().out == "/app/a=1\n/app/b=2\n"
    assert main(["-q", "clone", "del", "/app/a", *at]) == 0
    assert main(["-q", "clone", "get", "/app/a", *at]) == 1
    assert "no such key" in capsys.readouterr().err
    server.send_signal(signal.SIGTERM)
    assert server.wait(10) == 0


@pytest.mark.parametrize("argv, status, message", [
    (["clone", "server", "--primary"], 2, "--primary needs --peer"),
    (["clone", "server", "--peer", "tcp://127.0.0.1:1"], 2, "--peer needs --primary or --backup"),
    (["clone", "server", "--backup", "--peer", "nowhere"], 2, "has no transport"),
    (["clone", "server", "--port", "70000"], 2, "70000"),
    (["clone", "get", "k", "--connect", "tcp://127.0.0.1:1", "--timeout", "0.3"], 3, "no server answered"),
    (["clone", "dump", "--subtree", "bad", "--connect", "tcp://127.0.0.1:1"], 2, "subtree"),
    (["clone", "set", "k", "v", "--ttl", "-1"], 2, "-1"),
])
def test_user_errors_are_one_line(argv, status, message, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == status
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0] and message in err[0], err


def test_demo_part_runs():
    from zactors.apps.commands import clone
    lines = []
    with demo_node() as node:
        clone.demo(lines.append, node)
        assert any("backup took over" in line for line in lines)
        assert any("the node's server expired it, and both clients dropped it: True" in line for line in lines)


@pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")
def test_curve(make):
    server_keys, client_keys = generate_keypair(), generate_keypair()
    server = make(CloneServer, curve=server_keys)
    secure = make(Clone, [client_of(server)], curve=client_keys, server_public=server_keys.public)
    assert secure.wait_synced(5)
    assert secure.set("k", "v", wait=5) == 1
    plain = make(Clone, [client_of(server)], timeout=0.3)
    assert not plain.wait_synced(1.0)
    wrong = make(Clone, [client_of(server)], curve=client_keys, server_public=generate_keypair().public, timeout=0.3)
    assert not wrong.wait_synced(1.0)
    assert server.call("DUMP") == {b"k": b"v"}


def test_set_refused_on_a_full_disk_says_so_in_one_line(processes, capsys, small_disk):
    port = free_base_port()
    server = processes([sys.executable, "-m", "zactors.apps.cli", "clone", "server", "--port", str(port),
                        "--persist", str(small_disk), "--ack", "written"], stderr=gevent.subprocess.PIPE)
    line = b""
    while b"clone server" not in line:
        line = server.stderr.readline()
        assert line, "server exited"
    at = ["--connect", "tcp://127.0.0.1:%d" % port]
    big = "x" * 60000
    status = 0
    for i in range(20):
        capsys.readouterr()
        status = main(["-q", "clone", "set", "k%d" % i, big, *at])
        if status:
            break
    err = capsys.readouterr().err
    assert status == 4, err
    assert err.count("\n") == 1 and "refused the update" in err and "No space left" in err, err
    assert main(["-q", "clone", "get", "k0", *at]) == 0  # still serving
    server.send_signal(signal.SIGTERM)
    assert server.wait(10) == 0
