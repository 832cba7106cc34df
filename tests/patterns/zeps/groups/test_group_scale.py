"""Consumer groups at scale and under attack: 10,000 groups on a stream, a 1,000-member group, a JOIN flood.
The broker runs in its own process: its memory (RSS) and CPU time are its own (printed)."""
import os
import time

import gevent
import pytest

from zactors.patterns.zeps import groups_protocol as g
from zactors.patterns.zeps import protocol as p
from zactors.patterns.zeps.client import query
from zactors.patterns.zeps.consumer import Consumer

from .conftest import RawMember, publish
from .test_group_processes import BrokerProcess

pytestmark = pytest.mark.timeout(300)
MiB = 1 << 20


def rss(pid):
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def cpu(pid):
    """User + system CPU seconds of process ``pid``."""
    with open("/proc/%d/stat" % pid) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_ten_thousand_groups_on_one_stream(processes, tmp_path):
    broker = BrokerProcess(processes, str(tmp_path / "j"), max_groups=10000, max_groups_per_peer=10000)
    pid = broker.proc.pid
    publish(broker.endpoint, "s", [(b"k", b"x" * 100)] * 100)
    base_rss, base_cpu = rss(pid), cpu(pid)
    peer = None
    t0 = time.monotonic()
    for n in range(10000):   # each group made by its own peering, which then leaves (the group stays)
        peer = RawMember(broker.endpoint)
        peer.send(g.join(b"g%d" % n, b"", g.START_EARLIEST))
        assert type(peer.expect(g.JoinOk)) is g.JoinOk
        if n % 1000 == 0:  # every 1000th takes the 100 messages and acks them
            peer.send(p.credit(1 << 16))
            for _ in range(100):
                peer.send(g.ack([peer.expect(g.GroupDeliver).sequence]))
        peer.send(p.encode(p.Detach()))
        peer.expect(p.DetachOk)
        peer.close()
    made = time.monotonic() - t0
    grown, used = rss(pid) - base_rss, cpu(pid) - base_cpu
    publish(broker.endpoint, "s", [(b"k", b"x" * 100)] * 1000)   # 10,000 idle groups cost nothing per message
    info = query(broker.endpoint, timeout=30)
    per_message = cpu(pid) - base_cpu - used
    print("10,000 groups: made in %.1fs; broker RSS +%.1f MiB (%.0f B a group), CPU %.2fs; 1000 messages "
          "then cost %.3fs CPU" % (made, grown / MiB, grown / 10000, used, per_message))
    assert len(info["groups"]) == 10000
    assert grown < 200 * MiB
    groups = {x["group"]: x for x in info["groups"]}
    assert (groups["g5"]["pending"], groups["g5"]["lag"], groups["g1000"]["acked"], groups["g1000"]["lag"]) == \
        (0, 1100, 100, 1000)
    with Consumer(broker.endpoint, "s", "g5", timeout=10) as c:   # a group resumes where it stood
        first = c.get(10)
        assert first is not None and first.seq == 1


def test_a_group_of_1000_members(processes, tmp_path):
    broker = BrokerProcess(processes, str(tmp_path / "j"))
    pid = broker.proc.pid
    publish(broker.endpoint, "s", [(b"k", b"warm")])
    base_rss, base_cpu = rss(pid), cpu(pid)
    members = []
    for n in range(1000):
        member = RawMember(broker.endpoint)
        member.send(g.join(b"work", b"", g.START_LATEST), p.credit(4096))
        member.expect(g.JoinOk)
        members.append(member)
    joined_rss, joined_cpu = rss(pid), cpu(pid)
    n = 20000
    publish(broker.endpoint, "s", [(b"k", b"x" * 100)] * n)
    seen = {}
    share = []
    deadline = time.monotonic() + 120
    while len(seen) < n and time.monotonic() < deadline:
        for member in members:       # drain each socket without waiting; ack each message (credit back)
            got = 0
            while True:
                try:
                    frame = member.sock.recv(1)  # zmq.NOBLOCK
                except Exception:
                    break
                if g.is_group_command(frame) and frame[2] == g.GROUP_DELIVER:
                    d = g.decode(frame)
                    seen[d.sequence] = seen.get(d.sequence, 0) + 1
                    member.send(g.ack([d.sequence]), p.credit(len(frame)))
                    got += 1
            share.append(got)
        gevent.sleep(0)
    used = cpu(pid) - joined_cpu
    print("1,000 members: joining took broker RSS +%.1f MiB, CPU %.2fs; %d messages to them, each acked: CPU "
          "%.2fs (%.0f us a message), RSS now +%.1f MiB" % ((joined_rss - base_rss) / MiB, joined_cpu - base_cpu,
                                                            n, used, used / n * 1e6, (rss(pid) - base_rss) / MiB))
    assert len(seen) == n and max(seen.values()) == 1
    assert rss(pid) - base_rss < 200 * MiB
    for member in members:
        member.close()


def test_a_join_flood_is_refused_and_counted_others_served(processes, tmp_path):
    broker = BrokerProcess(processes, str(tmp_path / "j"), max_groups=200)
    pid = broker.proc.pid
    publish(broker.endpoint, "s", [(b"k", b"before")])
    good = Consumer(broker.endpoint, "s", "good", timeout=10)
    base = rss(pid)
    flood = RawMember(broker.endpoint)
    flood.send(g.join(b"x0"))
    flood.expect(g.JoinOk)
    for n in range(1, 100000):       # one peering asks to join 100k groups: one JOIN a peering
        flood.sock.send(g.join(b"x%d" % n))
    creators = []
    for n in range(300):             # and 300 peerings each create a group, over the budget of 200
        peer = RawMember(broker.endpoint)
        peer.send(g.join(b"y%d" % n))
        creators.append(type(peer.recv(30)))
        peer.close()
    good_message = good.get(10)
    assert good_message is not None and good_message.body == b"before"  # served all along
    good_message.ack()
    deadline = time.monotonic() + 60
    while query(broker.endpoint, timeout=30)["counters"].get("group_join_twice", 0) < 99999:
        assert time.monotonic() < deadline, "the flood was not all refused"
        gevent.sleep(0.1)
    counters = query(broker.endpoint, timeout=30)["counters"]
    print("JOIN flood: %d refused as second JOINs, %d groups refused by the budget; broker RSS +%.1f MiB"
          % (counters["group_join_twice"], counters.get("group_budget", 0), (rss(pid) - base) / MiB))
    assert creators.count(g.JoinOk) == 198 and counters["group_budget"] == 102   # (good and x0 are two)
    assert len(query(broker.endpoint, timeout=30)["groups"]) == 200
    good.destroy()
    flood.close()
