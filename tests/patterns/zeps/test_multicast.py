"""Multicast real-time output in network namespaces the test creates, gaps repaired from the journal."""
import json
import os

import gevent
import pytest
from gevent.fileobject import FileObjectThread

from tests.netns import lab  # noqa: F401  (fixture)

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
GROUP, PORT = "239.192.77.1", 5677


class Agent:
    def __init__(self, ns, *args):
        self.proc = ns.python("-m", "tests.patterns.zeps._multicast_agent", *map(str, args), cwd=ROOT)
        self.lines = FileObjectThread(self.proc.stdout, "r")

    def line(self, timeout=30):
        with gevent.Timeout(timeout, False):
            line = self.lines.readline()
            if line:
                return line.strip()
            pytest.fail("agent ended: %s" % self.proc.stderr.read()[-3000:])
        pytest.fail("agent: nothing within %ss" % timeout)

    def send(self, text):
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()


def messages(agent, count):
    return [json.loads(agent.line()) for _ in range(count)]


def test_multicast_late_start_and_lost_datagrams_are_repaired(lab, tmp_path):  # noqa: F811 (fixture)
    a, b = lab.pair()
    broker = Agent(a, "broker", tmp_path / "journal", GROUP, PORT, a.address)
    endpoint = broker.line()
    broker.send("300")  # history before any subscriber: only the journal has it
    assert broker.line() == "published 300"
    broker.line()
    late = Agent(b, "subscriber", GROUP, PORT, endpoint, b.address, 1, "")
    live = Agent(b, "subscriber", GROUP, PORT, endpoint, b.address, 0, "k.1")
    assert json.loads(late.line())["ready"] and json.loads(live.line())["ready"]
    broker.send("300")
    assert broker.line() == "published 600"
    sent = json.loads(broker.line())
    assert sent["sent"] >= 300
    got = messages(late, 600)
    assert [m["seq"] for m in got] == list(range(1, 601))
    assert [m["body"] for m in got] == [str(i) for i in range(600)]
    assert got[-1]["stats"].get("repaired", 0) >= 300 and got[-1]["stats"].get("multicast", 0) > 0
    got = messages(live, 100)  # from the first datagram on: k.1 is every third message
    assert [int(m["body"]) % 3 for m in got] == [1] * 100
    seqs = [m["seq"] for m in got]
    assert seqs == sorted(seqs) and all(y - x == 3 for x, y in zip(seqs, seqs[1:]))

    # The LAN goes down: 200 datagrams are lost for good, the journal has them.
    a.link(False)
    broker.send("200")
    assert broker.line() == "published 800"
    assert json.loads(broker.line())["refused"] >= 1
    a.link(True)
    broker.send("100")
    assert broker.line() == "published 900"
    broker.line()
    got = messages(late, 300)
    assert [m["seq"] for m in got] == list(range(601, 901))  # every one, in order, despite the loss
    stats = got[-1]["stats"]
    assert stats["repaired"] >= 300 + 200 and stats["gaps"] >= 1, stats
    got = messages(live, 100)
    assert [m["seq"] for m in got] == [s for s in range(602, 901) if (s - 1) % 3 == 1]
