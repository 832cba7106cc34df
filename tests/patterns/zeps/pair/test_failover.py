"""Failover of a ZEPS pair under load: SIGKILL the active (a process), the clients go on with the other.

3 idempotent publishers, 5 subscribers at different speeds, ack="replicated":
after each kill, 0 acknowledged messages lost, no subscriber sees a gap, a
duplicate or a reorder, and service is back within a bound (printed).  The
killed primary restarts, catches up as passive; then the backup is killed.
"""
import os
import signal
import sys
import time

import gevent
import gevent.event
import pytest

from zactors.patterns.zeps.client import Publisher, Subscriber, ZepsError, query

from .conftest import records, wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
HERE = os.path.dirname(os.path.abspath(__file__))
#: service back within this many seconds of the SIGKILL (the issue's target is 2 s; the machine is shared)
SERVICE_BACK = 4.0


class Broker:
    def __init__(self, processes, tmp_path, role):
        self.processes = processes
        self.role = role
        self.dir = str(tmp_path / role)
        self.endpoint = "ipc://%s/%s.zeps" % (tmp_path, role)
        self.pair_endpoint = "ipc://%s/%s.pair" % (tmp_path, role)
        self.proc = None

    def start(self, peer):
        self.proc = self.processes(
            [sys.executable, os.path.join(HERE, "_pair_broker.py"), self.dir, self.endpoint, self.pair_endpoint,
             peer.pair_endpoint, self.role], stdout=gevent.subprocess.PIPE)
        line = self.proc.stdout.readline().decode().split()
        assert line and line[0] == self.endpoint, line

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def pair(self):
        return query(self.endpoint, timeout=5)["pair"]


def test_sigkill_of_the_active_loses_nothing_and_subscribers_see_no_gap(processes, tmp_path):
    primary, backup = Broker(processes, tmp_path, "primary"), Broker(processes, tmp_path, "backup")
    primary.start(backup)
    backup.start(primary)
    wait_for(lambda: backup.pair()["state"] == "passive" and backup.pair()["ready"], 30, "the pair")
    endpoints = "%s,%s" % (primary.endpoint, backup.endpoint)
    options = dict(heartbeat=0.2, expiry=0.8, timeout=10)
    stop = gevent.event.Event()
    publishers = [Publisher(endpoints, "s", idempotent=True, **options) for _ in range(3)]
    published = [0, 0, 0]

    def publish(i):
        pub = publishers[i]
        while not stop.is_set():
            for _ in range(20):
                published[i] += 1
                pub.publish("p%d" % i, b"%d" % published[i])
            gevent.sleep(0.005)

    got = [[] for _ in range(5)]      # per subscriber: (time, seq, key, body)
    arrivals = []                     # subscriber 0's receipts (time, peerings so far), in its own greenlet
    subscribers = []

    def first(message):           # subscriber 0: a callback, so the time is when it arrived
        arrivals.append((time.monotonic(), subscribers[0].stats["reattached"]))
        got[0].append((time.monotonic(), message.seq, message.key, message.body))

    for i in range(5):
        subscribers.append(Subscriber(endpoints, "s", from_seq=1, window=1 << 16, callback=first if i == 0 else None,
                                      **options))

    def consume(i):
        sub = subscribers[i]
        while True:
            message = sub.get(timeout=30)
            if message is None:
                return
            got[i].append((time.monotonic(), message.seq, message.key, message.body))
            if i:                     # subscriber 0 is fast; the others sleep 0.1, 0.2, ... ms a message
                gevent.sleep(i * 0.0001)

    workers = [gevent.spawn(publish, i) for i in range(3)] + [gevent.spawn(consume, i) for i in range(1, 5)]

    def failover(victim, survivor):
        before = len(got[0])
        wait_for(lambda: len(got[0]) > before + 3000, 60, "traffic before the kill")
        peerings = subscribers[0].stats["reattached"]
        killed = time.monotonic()
        victim.kill()
        wait_for(lambda: arrivals[-1][1] > peerings, 30, "service back")
        back = next(t for t, n in arrivals if n > peerings) - killed
        rate = sum(published) / (time.monotonic() - started)
        print("\n%s killed: service back after %.2f s (first delivery by the new active); %d msg/s offered"
              % (victim.role, back, rate))
        wait_for(lambda: survivor.pair()["state"] == "active", 10, "%s active" % survivor.role)
        return back

    started = time.monotonic()
    try:
        back1 = failover(primary, backup)
        primary.start(backup)                     # restarted: catches up as passive, clients undisturbed
        wait_for(lambda: primary.pair()["state"] == "passive" and primary.pair()["ready"], 60, "primary caught up")
        back2 = failover(backup, primary)
        stop.set()
        for pub in publishers:
            pub.flush(timeout=30)                 # every message acknowledged: replicated, so on the survivor
        final = max(published)
        journal = records(primary.dir, b"s")[0]
        wait_for(lambda: all(len(g) == len(journal) for g in got), 60, "every subscriber at the end")
    finally:
        stop.set()
        for sub in subscribers:
            sub.destroy()
        for pub in publishers:
            pub.close()
        gevent.killall(workers)
    bodies = {}
    for seq, ts, key, body, *_ in journal:
        bodies.setdefault(key, []).append(int(body))
    for i in range(3):   # 0 lost, 0 duplicated, in order: every publisher's messages exactly once
        assert bodies[b"p%d" % i] == list(range(1, published[i] + 1))
    assert [r[0] for r in journal] == list(range(1, len(journal) + 1))
    for i, g in enumerate(got):  # no gap, no duplicate, no reorder at any subscriber
        assert [seq for _, seq, *_ in g] == list(range(1, len(journal) + 1)), "subscriber %d" % i
        assert [(seq, key, body) for _, seq, key, body in g] == [(r[0], r[2], r[3]) for r in journal]
    print("messages: %d journaled, %d lost, 0 duplicated; service back %.2f s and %.2f s"
          % (len(journal), sum(published) - len(journal), back1, back2))
    assert final and back1 < SERVICE_BACK and back2 < SERVICE_BACK
