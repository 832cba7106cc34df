"""``zactors peer`` and the Harmony demo part (loopback, beacons off)."""
import gevent
import gevent.subprocess
import pytest

from zactors.apps.cli import main
from zactors.apps.commands import peer as peer_command
from zactors.apps.demo import demo_node
from zactors.patterns.harmony import Node
from tests.apps.cli_helpers import read_until, start

pytestmark = pytest.mark.timeout(60)


def test_demo_part():
    lines = []
    with demo_node() as node:
        peer_command.demo(lines.append, node)
        text = "\n".join(lines)
        assert "carol got WHISPER from alice" in text and "alice saw EXIT bob" in text
        assert "alice got SHOUT from node in news" in text


def test_peer_list_finds_a_node_by_endpoint(capsys):
    with Node("listed", beacon=False) as node:
        node.join("g1")
        assert node.own_groups() == ["g1"]
        runner = gevent.spawn(main, ["peer", "list", "--no-beacon", "--endpoint", node.endpoint, "--wait", "1"])
        assert runner.get(timeout=20) == 0
    out = capsys.readouterr().out
    assert node.id in out and "listed" in out and "g1" in out


def test_peer_chat_shouts_what_is_typed(processes):
    # The race this test once lost (1 run in 6): the listener saw the typist JOIN, but the typist had
    # not yet had the listener's HELLO, so its SHOUT went to nobody.  A SHOUT reaches the peers the
    # sender knows in the group: wait, as a person does, until the chat shows the listener joined.
    with Node("listener", beacon=False) as node:
        node.join("CHAT")
        chat = start(processes, "peer", "chat", "--name", "typist", "--no-beacon", "--endpoint", node.endpoint,
                     stdin=gevent.subprocess.PIPE)
        read_until(chat.stdout, "* listener joined CHAT")
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
        with gevent.Timeout(20):
            out, err = chat.stdout.read(), chat.stderr.read()
            assert chat.wait() == 0
        assert "typist left CHAT: 1 line(s) sent" in err


def test_peer_chat_says_when_nobody_would_hear(processes):
    chat = start(processes, "peer", "chat", "--name", "alone", "--no-beacon", stdin=gevent.subprocess.PIPE)
    read_until(chat.stdout, "in group CHAT")
    chat.stdin.write("anyone?\n")
    chat.stdin.flush()
    read_until(chat.stdout, "* nobody else is in CHAT yet: not sent")
    chat.stdin.close()
    with gevent.Timeout(20):
        assert chat.wait() == 0
