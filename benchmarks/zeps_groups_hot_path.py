"""ZEPS consumer groups hot path: the broker's own CPU per message shared by acking members.

Run: ``python benchmarks/zeps_groups_hot_path.py [--messages N] [--members 4] [--rounds N]``
(``--quick``: 5000 messages, 1 round).

The broker runs in this process (its loop is this process's main thread).
The members are plain pyzmq DEALERs in child processes (so they take no
GIL from the broker): each joins the group, grants a credit window of
``--window`` bytes, and acknowledges what it received after every drain of
its socket (one ACK of ranges and one CREDIT, as the
:class:`~zactors.patterns.zeps.consumer.Consumer` batches them).  A plain
DEALER thread queues ``--messages`` PUBLISHes of 100 bytes first; then the
clock starts and the broker appends them, hands them to the members and
takes their acks, until every message is acknowledged.  The figure is the
main thread's CPU time (``time.thread_time``) per message: PUBLISH, journal
append, group delivery, ACK and the group journal's records, not the
journal's writes and fsyncs on the hub's threadpool.  Then the members'
counts are checked (each message acknowledged once, none lost).

For an instruction count instead (no load at all), run it under
``valgrind --tool=callgrind --separate-threads=yes`` twice with different
``--messages`` and divide the difference of thread 1's totals by the
difference of the counts.  ``--profile FILE``: where the loop's CPU goes (cProfile, thread CPU time).
"""
import argparse
import cProfile
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gevent  # noqa: E402
import zmq  # noqa: E402

from _harness import Steps, add_deadline_option, load_average, wait_until  # noqa: E402
from zactors.patterns.zeps import protocol as p  # noqa: E402
from zactors.patterns.zeps.broker import Broker  # noqa: E402

BODY = b"x" * 100

# A member: plain pyzmq, acks what each drain of its socket brought (ranges), gives the credit back.
MEMBER = r"""
import struct, sys, zmq
from zactors.patterns.zeps import groups_protocol as g, protocol as p
endpoint, window = sys.argv[1], int(sys.argv[2])
ctx = zmq.Context()
sock = ctx.socket(zmq.DEALER)
sock.linger = 0
sock.connect(endpoint)
sock.send(p.attach(b"bench"))
assert type(p.decode(sock.recv())) is p.AttachOk
sock.send(g.join(b"work"))
assert type(g.decode(sock.recv())) is g.JoinOk
sock.send(p.credit(window))
print("ready", flush=True)
head = struct.Struct(">Q").unpack_from
seqs, received = set(), 0
poller = zmq.Poller()
poller.register(sock, zmq.POLLIN)
poller.register(sys.stdin, zmq.POLLIN)
while True:
    events = dict(poller.poll())
    if sys.stdin.fileno() in events:
        break
    got, freed = [], 0
    for _ in range(1024):
        try:
            frame = sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            break
        if frame[2] == g.GROUP_DELIVER:
            got.append(head(frame, 3)[0])
            freed += len(frame)
    if not got:
        continue
    received += len(got)
    seqs.update(got)
    got.sort()
    ranges, first, last = [], got[0], got[0]
    for seq in got[1:]:
        if seq == last + 1:
            last = seq
        else:
            ranges.append((first, last))
            first = last = seq
    ranges.append((first, last))
    for i in range(0, len(ranges), g.MAX_RANGES):
        sock.send(g.ack(ranges[i:i + g.MAX_RANGES]))
    sock.send(p.credit(freed))
print(" ".join(map(str, (received, len(seqs), min(seqs, default=0), max(seqs, default=0)))), flush=True)
"""


def _expect(sock, kind):
    def got():
        try:
            return type(p.decode(sock.recv(zmq.NOBLOCK))) is kind
        except zmq.Again:
            return False
    wait_until(got, 30, "a %s from the broker" % kind.__name__, sleep=gevent.sleep, interval=0.001)


def _lines(procs):
    """Each process's next stdout line, read in a thread (the broker's loop runs meanwhile)."""
    out = {}
    thread = threading.Thread(target=lambda: out.update((i, proc.stdout.readline()) for i, proc in enumerate(procs)))
    thread.start()
    wait_until(lambda: not thread.is_alive(), 60, "the members' lines", sleep=gevent.sleep, interval=0.001)
    return [out[i] for i in range(len(procs))]


def measure(n, members, window, poll, profile=None):
    """Main-thread CPU microseconds per message for one run; raises unless each was acked once."""
    ctx = zmq.Context()
    directory = tempfile.mkdtemp(prefix="zeps-groups-hot-")
    broker = Broker(directory, "tcp://127.0.0.1:*", fsync=0.1, heartbeat=5, expiry=600)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = []
    try:
        procs = [subprocess.Popen([sys.executable, "-c", MEMBER, broker.endpoint, str(window)], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(members)]
        assert all(line.strip() == "ready" for line in _lines(procs))
        pub = ctx.socket(zmq.DEALER)
        pub.sndhwm = 0
        pub.linger = 0
        pub.connect(broker.endpoint)
        pub.send(p.attach(b"bench"))
        _expect(pub, p.AttachOk)

        def publish():  # in another thread: not in the main thread's figure
            for i in range(n):
                pub.send(p.publish(b"k.%d" % (i & 7), BODY))
        thread = threading.Thread(target=publish)
        thread.start()
        thread.join()
        time.sleep(0.5)  # libzmq moves them to the broker's queue (a benchmark, not a test)
        group = None

        def done():
            nonlocal group
            table = broker._tables.get(b"bench")
            group = group or (table.groups.get(b"work") if table else None)
            return group is not None and group.cursor >= n and not group.pending
        profiler = cProfile.Profile(time.thread_time) if profile else None
        cpu = time.thread_time()
        if profiler:
            profiler.enable()
        wait_until(done, 600, "the members to acknowledge %d messages" % n, sleep=gevent.sleep, interval=poll)
        if profiler:
            profiler.disable()
            profiler.dump_stats(profile)
        cpu = time.thread_time() - cpu
        for proc in procs:
            proc.stdin.write("end\n")
            proc.stdin.flush()
        counts = [tuple(map(int, line.split())) for line in _lines(procs)]
        received, distinct = sum(c[0] for c in counts), sum(c[1] for c in counts)
        if received != n or distinct != n:
            raise RuntimeError("members received %d (%d distinct) of %d: %s" % (received, distinct, n, counts))
        return cpu / n * 1e6
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        broker.destroy()
        ctx.destroy(linger=0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000, help="messages per run (default %(default)s)")
    parser.add_argument("--members", type=int, default=4, help="members of the group (default %(default)s)")
    parser.add_argument("--window", type=int, default=1 << 20, help="each member's credit (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the median (default %(default)s)")
    parser.add_argument("--poll", type=float, default=0.0005, help="seconds between looks at the broker's progress")
    parser.add_argument("--quick", action="store_true", help="a short pass: 5000 messages, 1 round")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the broker's loop (thread CPU) into FILE (the "
                        "last round's); the figure then includes the profiler's cost")
    add_deadline_option(parser, 600)
    args = parser.parse_args()
    if args.quick:
        args.messages, args.rounds = min(args.messages, 5000), 1
    if args.messages < 1 or args.rounds < 1 or args.members < 1:
        parser.error("--messages, --members and --rounds must be at least 1")
    load_average("start")
    steps = Steps(args.deadline)
    values = []
    for n in range(args.rounds):
        result = steps.run("round %d, %d members" % (n + 1, args.members), "%d messages acknowledged" % args.messages,
                           measure, args.messages, args.members, args.window, args.poll, args.profile)
        if result is not None:
            values.append(result)
    print("\nbroker main-thread CPU per message, %d messages of %d bytes shared by %d acking members, median of %d: "
          "%s" % (args.messages, len(BODY), args.members, args.rounds,
                  "%.2f us" % statistics.median(values) if values else "failed"))
    load_average("end")


if __name__ == "__main__":
    main()
