"""The catch-up scenario of issue #23, shared by the suite's short test and the soak's large run:

a primary (a process) holds ``n`` messages; a fresh backup (a process) starts against it and copies them
while a paced idempotent publisher sends ``rate`` msg/s to the pair.  While the backup copies, the
primary is stopped (SIGSTOP: silent, as a dead one) and a client's ATTACH to the backup, a vote, is
refused ("not caught up"); the primary goes on (SIGCONT).  Every INFO of the backup that says it is
ready also shows every one of the ``n`` messages.  Once ready, the primary is SIGKILLed: the next
client's vote makes the backup active, holding every acknowledged message exactly once, in order.
"""
import os
import signal
import sys
import time

import gevent
import gevent.event

from zactors.actors.journal import Journal
from zactors.patterns.zeps.client import Publisher, Subscriber, ZepsError, query
from zactors.patterns.zeps.names import stream_directory

from .conftest import records, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
STREAM = b"big"


def fill(journal_dir, n, body=100):
    """``n`` messages of ``body`` bytes in the stream's journal, written as the broker writes them."""
    journal = Journal(os.path.join(journal_dir, stream_directory(STREAM)))
    try:
        payload = b"x" * (body - 8)
        for i in range(1, n + 1):
            journal.append(b"k", payload + b"%08d" % i)
            if i % 4096 == 0:
                journal.write()
        journal.write()
    finally:
        journal.close()


def _start(processes, tmp_path, role, ends):
    other = "backup" if role == "primary" else "primary"
    proc = processes([sys.executable, os.path.join(HERE, "_pair_broker.py"), str(tmp_path / role), ends[role][0],
                      ends[role][1], ends[other][1], role, "written"], stdout=gevent.subprocess.PIPE)
    assert proc.stdout.readline().decode().split()[0] == ends[role][0]
    return proc


def _backup(ends):
    info = query(ends["backup"][0], timeout=5)
    return info["pair"]["state"], info["pair"]["ready"], info["streams"].get(STREAM.decode(), {}).get("last_seq", 0)


def catch_up(processes, tmp_path, n, rate):
    """Run the scenario (see the module docstring); returns its figures (printed as they are measured)."""
    ends = {role: ("ipc://%s/%s.zeps" % (tmp_path, role), "ipc://%s/%s.pair" % (tmp_path, role))
            for role in ("primary", "backup")}
    started = time.monotonic()
    fill(str(tmp_path / "primary"), n)
    print("\n%d messages journaled for the primary in %.1f s" % (n, time.monotonic() - started), flush=True)
    primary = _start(processes, tmp_path, "primary", ends)
    endpoints = "%s,%s" % (ends["primary"][0], ends["backup"][0])
    pub = Publisher(endpoints, STREAM, idempotent=True, heartbeat=0.2, expiry=1.0, timeout=10)
    stop = gevent.event.Event()
    published = [0]

    def publish():   # paced: every 5 ms, what is due at ``rate`` since the start
        begun = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - begun) * rate)
            while published[0] < due:
                published[0] += 1
                pub.publish("live", b"%d" % published[0])
            gevent.sleep(0.005)

    flowing = gevent.spawn(publish)
    flow_started = time.monotonic()
    samples = []         # the backup's (state, ready, last_seq) while it copies
    try:
        gevent.sleep(0.5)                        # traffic before the backup (load, not synchronisation)
        copying = time.monotonic()
        _start(processes, tmp_path, "backup", ends)
        wait_for(lambda: samples.append(_backup(ends)) or samples[-1][0] == "passive", 20, "the backup passive")
        refused = None
        if not samples[-1][1]:                   # still copying: the primary falls silent; a vote is refused
            primary.send_signal(signal.SIGSTOP)
            try:
                try:
                    Publisher(ends["backup"][0], STREAM, timeout=1.5).close()
                except ZepsError as exc:
                    refused = str(exc)
                samples.append(_backup(ends))
            finally:
                primary.send_signal(signal.SIGCONT)
            assert refused is not None and "not caught up" in refused, refused
        wait_for(lambda: samples.append(_backup(ends)) or samples[-1][1], 600, "the backup caught up")
        copied = samples[-1][2]
        elapsed = time.monotonic() - copying
        print("backup caught up: %d messages in %.1f s (%d msg/s) while %d msg/s flowed (paced at %d); %s"
              % (copied, elapsed, copied / elapsed, published[0] / (time.monotonic() - flow_started), rate,
                 "a vote before was refused" if refused else "it was ready at the first look"), flush=True)
        gevent.sleep(0.5)                        # traffic after (load)
        stop.set()
        flowing.join()
        pub.flush(timeout=30)                    # acknowledged: on the primary (and the backup follows it)
        wait_for(lambda: _backup(ends)[2] == n + published[0], 60, "the backup's copy of the last message")
    finally:
        stop.set()
        flowing.kill()
        pub.close()
    assert all(last >= n for state, ready, last in samples if state == "passive" and ready), samples  # ready: all of it
    primary.send_signal(signal.SIGKILL)
    primary.wait()
    sub = None
    deadline = time.monotonic() + 10             # a client's vote: the caught-up backup takes over
    while sub is None:
        try:
            sub = Subscriber(ends["backup"][0], STREAM, from_seq=n + published[0], timeout=1)
        except ZepsError:
            assert time.monotonic() < deadline, "the backup never took over"
            gevent.sleep(0.1)
    try:
        last = sub.get(timeout=10)
        assert (last.seq, last.body) == (n + published[0], b"%d" % published[0])
    finally:
        sub.destroy()
    assert query(ends["backup"][0])["pair"]["state"] == "active"
    journal = records(str(tmp_path / "backup"), STREAM)[0]
    assert [r[0] for r in journal] == list(range(1, n + published[0] + 1))       # no gap, no duplicate
    assert [r[3] for r in journal[n:]] == [b"%d" % i for i in range(1, published[0] + 1)]   # live ones in order
    return {"messages": n, "copy_rate": copied / elapsed, "live": published[0], "refused_vote": refused is not None}
