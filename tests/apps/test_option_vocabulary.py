"""--fsync and --port mean one thing in every command (issue 21): a journal's fsync policy (never, batch, or a
period), and the TCP port the command listens on (0 or * for any free one)."""
import argparse

import pytest

from zactors.apps import options
from zactors.apps.cli import build_parser
from zactors.apps.up import ConfigError, parse_period


@pytest.mark.parametrize("text,value", [("never", "never"), ("batch", "batch"), ("100ms", 0.1), ("1s", 1.0),
                                        ("0.25", 0.25), (" 2S ", 2.0)])
def test_one_parser(text, value):
    assert options.fsync_policy(text) == value
    assert parse_period(text) == value


@pytest.mark.parametrize("text", ["sometimes", "0", "0ms", "-1s", "1h", "interval", ""])
def test_one_refusal(text):
    with pytest.raises(argparse.ArgumentTypeError, match="say never, batch, or a period such as 100ms or 1s"):
        options.fsync_policy(text)
    with pytest.raises(ConfigError, match="say never, batch, or a period"):
        parse_period(text)


@pytest.mark.parametrize("argv", [["zeps", "broker", "--journal", "j"], ["clone", "server"]])
def test_every_command_takes_the_same_values(argv):
    parser = build_parser()
    assert parser.parse_args(argv + ["--fsync", "50ms"]).fsync == 0.05
    assert parser.parse_args(argv + ["--fsync", "batch"]).fsync == "batch"
    assert parser.parse_args(argv).fsync == 0.1                       # the same default: 100ms


def test_a_clone_server_takes_a_period(tmp_path):
    from zactors.patterns.clone.server import CloneServer
    server = CloneServer(persist=str(tmp_path / "map"), fsync=0.05)
    try:
        assert server.call("INFO")["sequence"] == 0
    finally:
        server.destroy()


def test_peer_port_is_its_tcp_port_and_the_beacon_has_its_own_option():
    import socket

    from zactors.apps.commands.peer import _node
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = build_parser().parse_args(["peer", "list", "--no-beacon", "--port", str(port), "--beacon-port", "5999"])
    assert args.beacon_port == 5999
    node = _node(args, "p").start()
    try:
        assert node.endpoint == "tcp://127.0.0.1:%d" % port
    finally:
        node.stop()
    assert build_parser().parse_args(["peer", "list", "--port", "*"]).port == 0
