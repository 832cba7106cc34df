"""ZEPS broker hot path: the broker's own CPU per message, a figure the machine's load hardly moves.

Run: ``python benchmarks/zeps_hot_path.py [--messages N] [--subscribers 1,10] [--ack written,synced] [--rounds N]``
(``--quick``: 5000 messages, 1 round).

The broker runs in this process (its loop is this process's main thread);
one publisher and the subscribers are plain pyzmq DEALERs on loopback TCP,
driven from other threads.  The publisher queues ``--messages`` PUBLISHes of
100 bytes first; then the clock starts and the broker appends, commits (at
the ``ack`` level) and delivers them to every subscriber (each with credit
for all of them).  The figure is the main thread's CPU time
(``time.thread_time``) from then until the last is delivered, per message:
the PUBLISH parse, the journal append and the live delivery, not the
libzmq I/O threads nor the journal's writes and fsyncs (the hub's
threadpool).  Then every subscriber's messages are checked (all there, in
order, none twice).

``--instructions``: instructions per message instead, a figure the load
hardly moves (repeated runs agree within about 5%: the broker's timers run
by the clock): for each subscriber count (ack ``written``) this script runs itself
twice under ``valgrind --tool=callgrind --separate-threads=yes`` (Debian's
``valgrind``), with ``--messages`` N and 2N, and divides the difference of
the main thread's totals by N (so start-up and the set-up cancel out; each
run lets libzmq queue every PUBLISH at the broker first, ``--settle`` 20 s, so
that the broker drains full rounds in both).
``--profile``: a cProfile of the broker's main thread over the first run's
measured window, the top functions by own time, in microseconds per message.
Both honour ``ZACTORS_PURE_PYTHON=1`` (the pure-Python twins).
"""
import argparse
import cProfile
import glob
import io
import os
import pstats
import re
import shutil
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


def _peer(ctx, endpoint):
    sock = ctx.socket(zmq.DEALER)
    sock.sndhwm = sock.rcvhwm = 0  # everything queued before the clock starts
    sock.linger = 0
    sock.connect(endpoint)
    return sock


def _expect(sock, kind):
    """The next ``kind`` from the broker (its loop runs while we wait)."""
    def got():
        try:
            return type(p.decode(sock.recv(zmq.NOBLOCK))) is kind
        except zmq.Again:
            return False
    wait_until(got, 30, "a %s from the broker" % kind.__name__, sleep=gevent.sleep, interval=0.001)


def measure(n, subscribers, ack, poll, profile=None, settle=0.5):
    """Main-thread CPU microseconds per message for one run; raises if a subscriber misses any."""
    ctx = zmq.Context()
    directory = tempfile.mkdtemp(prefix="zeps-hot-")
    credit = n * (p.deliver_cost(b"k.0", BODY) + 1)  # every subscriber may have them all
    broker = Broker(directory, "tcp://127.0.0.1:*", fsync=0.1, ack=ack, heartbeat=5, expiry=600,
                    max_credit=max(credit, 32 << 20), max_credit_total=max(credit * subscribers, 64 << 20))
    try:
        pub = _peer(ctx, broker.endpoint)
        pub.send(p.attach(b"bench"))
        _expect(pub, p.AttachOk)
        subs = []
        for _ in range(subscribers):
            sub = _peer(ctx, broker.endpoint)
            sub.send(p.attach(b"bench"))
            _expect(sub, p.AttachOk)
            sub.send(p.subscribe(b"", p.NEW))
            _expect(sub, p.SubscribeOk)
            sub.send(p.credit(credit))
            sub.send(p.PING_FRAME)  # its PING-OK: the credit is in
            _expect(sub, p.PingOk)
            subs.append(sub)

        def publish():  # in another thread: not in the main thread's figure
            for i in range(n):
                pub.send(p.publish(b"k.%d" % (i & 7), BODY))
        _run(publish)
        time.sleep(settle)  # libzmq moves them to the broker's queue (a benchmark, not a test)
        stream = broker._streams[b"bench"]
        if profile is not None:
            profile.enable()
        cpu = time.thread_time()
        wait_until(lambda: stream.delivered_seq >= n, 600, "the broker to deliver %d messages" % n,
                   sleep=gevent.sleep, interval=poll)
        cpu = time.thread_time() - cpu
        if profile is not None:
            profile.disable()
        missing = []

        def check():  # every subscriber has them all, in order, once (another thread again)
            for sub in subs:
                last = 0
                while last < n and sub.poll(30000):
                    message = p.decode(sub.recv())
                    if type(message) is p.Deliver:
                        if message.sequence != last + 1:
                            missing.append((last, message.sequence))
                            break
                        last = message.sequence
                if last != n:
                    missing.append((last, n))
        _run(check)
        if missing:
            raise RuntimeError("subscribers got (last, expected) %s" % missing)
        return cpu / n * 1e6
    finally:
        broker.destroy()
        ctx.destroy(linger=0)


def print_profile(profile, n, top=15):
    """The ``top`` functions by own time, in microseconds per message."""
    stats = pstats.Stats(profile, stream=io.StringIO())
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])
    total = sum(value[2] for value in stats.stats.values())
    print("\nbroker main thread, cProfile (profiled: slower than the run), %.2f us per message in all; top %d by own time:"
          % (total / n * 1e6, top))
    print("  %9s %9s %10s  %s" % ("own us", "cum us", "calls/msg", "function"))
    for (path, line, name), (_cc, calls, own, cum, _callers) in rows[:top]:
        where = "%s:%d" % (os.path.basename(path), line) if line else path
        print("  %9.3f %9.3f %10.2f  %s %s" % (own / n * 1e6, cum / n * 1e6, calls / n, name, where))


def instructions(n, subscribers):
    """Main-thread instructions per message under callgrind (see the module docstring)."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed (Debian: apt-get install valgrind)")
    totals = []
    for count in (n, 2 * n):
        out = tempfile.mkdtemp(prefix="zeps-cg-")
        try:
            subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes", "--dump-instr=no",
                            "--callgrind-out-file=%s/cg.out" % out, sys.executable, os.path.abspath(__file__),
                            "--messages", str(count), "--subscribers", str(subscribers), "--ack", "written",
                            "--rounds", "1", "--poll", "0.05", "--settle", "20"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)
            main = [path for path in glob.glob(out + "/cg.out*") if path.endswith("-01")]
            if len(main) != 1:
                raise RuntimeError("callgrind left %s" % sorted(os.listdir(out)))
            with open(main[0]) as f:
                found = re.findall(r"^(?:totals|summary): (\d+)", f.read(), re.M)
            if not found:
                raise RuntimeError("no totals in %s" % main[0])
            totals.append(int(found[-1]))
        finally:
            shutil.rmtree(out, ignore_errors=True)
    return (totals[1] - totals[0]) / n


def _run(target):
    thread = threading.Thread(target=target)
    thread.start()
    thread.join()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000, help="messages per run (default %(default)s)")
    parser.add_argument("--subscribers", default="1,10", help="comma-separated counts (default %(default)s)")
    parser.add_argument("--ack", default="written,synced", help="acknowledgement levels (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians (default %(default)s)")
    parser.add_argument("--poll", type=float, default=0.0005, help="seconds between looks at the broker's progress")
    parser.add_argument("--quick", action="store_true", help="a short pass: 5000 messages, 1 round")
    parser.add_argument("--instructions", action="store_true",
                        help="instructions per message under callgrind instead (ack written; see the docstring)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the first run's broker")
    parser.add_argument("--settle", type=float, default=0.5,
                        help="seconds for libzmq to move the queued PUBLISHes to the broker before the clock starts "
                             "(--instructions: 20, valgrind is slow)")
    add_deadline_option(parser, 600)
    args = parser.parse_args()
    if args.quick:
        args.messages, args.rounds = min(args.messages, 5000), 1
    if args.messages < 1 or args.rounds < 1:
        parser.error("--messages and --rounds must be at least 1")
    if args.instructions:
        n = min(args.messages, 2000)
        print("broker main-thread instructions per message (callgrind, %d and %d messages of %d bytes, ack written, %s)"
              % (n, 2 * n, len(BODY), "pure Python" if os.environ.get("ZACTORS_PURE_PYTHON") else "C speedups"),
              flush=True)
        for subs in args.subscribers.split(","):
            print("  %2s subscriber(s): %8.0f" % (subs, instructions(n, int(subs))), flush=True)
        return
    cases = [(int(s), ack) for ack in args.ack.split(",") for s in args.subscribers.split(",")]
    load_average("start")
    runs = {case: [] for case in cases}
    steps = Steps(args.deadline)
    profile = cProfile.Profile() if args.profile else None
    for n in range(args.rounds):  # interleaved, so that the machine's load drifts over every case alike
        for subs, ack in cases:
            result = steps.run("round %d, %d subscriber(s), ack=%s" % (n + 1, subs, ack),
                               "%d messages delivered" % args.messages, measure, args.messages, subs, ack, args.poll,
                               profile, args.settle)
            if profile is not None:
                print_profile(profile, args.messages)
                profile = None
            if result is not None:
                runs[subs, ack].append(result)
    print("\nbroker main-thread CPU per message, %d messages of %d bytes, medians of %d round(s)"
          % (args.messages, len(BODY), args.rounds))
    for (subs, ack), values in runs.items():
        print("  %2d subscriber(s), ack=%-8s %s" % (subs, ack, "%6.2f us" % statistics.median(values)
                                                    if values else "failed"))
    load_average("end")


if __name__ == "__main__":
    main()
