"""``zactors peer`` and the Harmony demo part (loopback, beacons off)."""
import os
import subprocess
import sys

import gevent
import pytest

from zactors.apps.cli import main
from zactors.apps.commands import peer as peer_command
from zactors.patterns.harmony import Node

pytestmark = pytest.mark.timeout(60)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_demo_part():
    lines = []
    peer_command.demo(lines.append)
    text = "\n".join(lines)
    assert "carol got WHISPER from alice" in text and "alice saw EXIT bob" in text


def test_peer_list_finds_a_node_by_endpoint(capsys):
    with Node("listed", beacon=False) as node:
        node.join("g1")
        assert node.own_groups() == ["g1"]
        runner = gevent.spawn(main, ["peer", "list", "--no-beacon", "--endpoint", node.endpoint, "--wait", "1"])
        assert runner.get(timeout=20) == 0
    out = capsys.readouterr().out
    assert node.id in out and "listed" in out and "g1" in out


def test_peer_chat_shouts_what_is_typed():
    with Node("listener", beacon=False) as node:
        node.join("CHAT")
        chat = subprocess.Popen(
            [sys.executable, "-m", "zactors.apps.cli", "peer", "chat", "--name", "typist", "--no-beacon",
             "--endpoint", node.endpoint], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            with gevent.Timeout(20, False):
                for event in node.events():
                    if event.type == "JOIN" and event.name == "typist":
                        break
            chat.stdin.write("hello there\n")
            chat.stdin.flush()
            got = None
            with gevent.Timeout(20, False):
                for event in node.events():
                    if event.type == "SHOUT":
                        got = event
                        break
            assert got is not None and got.frames == [b"hello there"] and got.name == "typist"
            chat.stdin.close()
            assert chat.wait(20) == 0
        finally:
            if chat.poll() is None:
                chat.kill()
            chat.wait(10)
            chat.stdout.close()
            chat.stderr.close()
