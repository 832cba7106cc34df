"""Scatter-gather benchmark: zactors Scatter->Gather beside plain pyzmq PUSH->PULL.

    python benchmarks/scatter.py [--messages 300000] [--rounds 3] [--latency 5000] [--quick]

Each zactors figure is given for both wires side by side: the emulation
(PUSH/PULL, the default) and libzmq's native SCATTER/GATHER (``native=True``),
the latter only where pyzmq has the draft API (else its column says "n/a").
Rows that cannot apply to a wire say so ("-": a plain PUSH or PULL peer cannot
talk to a native socket).  Every blocking call has a timeout (--timeout).

One-way throughput of 100-byte messages over tcp loopback, sender and
receiver in two processes, measured at the receiver (first to last message),
all in this one run:

  * plain pyzmq PUSH -> PULL (the ceiling: not thread-safe);
  * the same received with ``recv_multipart`` (what checking ``RCVMORE`` per
    message costs: Gather must, to discard multipart messages);
  * zactors Scatter -> Gather, one sending thread (target >= 0.8x plain),
    and each side alone against a plain peer, to see where the cost is;
  * zactors Scatter -> Gather, 4 sending threads sharing the one Scatter;
  * plain PUSH behind a threading.Lock, 4 threads (the naive thread-safe way).

Also one-way latency (p50/p99, CLOCK_MONOTONIC is shared by both processes)
of paced messages, plain vs zactors, and the CPU the process uses while ten
callers (five greenlets, five plain threads) are blocked on an empty Gather.

The configurations run ``--rounds`` times, interleaved, and the table gives
medians; the load average is printed at the start and at the end.
Each round's figure is printed as it is measured, then the medians; the run
has a deadline too (``--deadline``; see ``_harness.py``).
"""
import argparse
import multiprocessing
import os
import statistics
import struct
import sys
import threading
import time

import gevent

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import zmq  # noqa: E402

from _harness import Steps, add_deadline_option, load_average  # noqa: E402

from zactors.patterns.scatter import Gather, Scatter, native_available  # noqa: E402

SIZE = 100
HWM = 100000
_stamp = struct.Struct("d")
#: seconds any one blocking call may take (a receive, a process to end)
TIMEOUT = 60.0


class Skipped(Exception):
    """A row that cannot apply."""


# -- senders (in another process) ------------------------------------------------
def _split(n, threads):
    bounds = [n * k // threads for k in range(threads + 1)]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def send_plain(endpoint, n, threads):
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.sndhwm = HWM
    push.connect(endpoint)
    payload = b"x" * SIZE
    if threads == 1:
        send = push.send
        for _ in range(n):
            send(payload)
    else:
        lock = threading.Lock()

        def run(count):
            send = push.send
            for _ in range(count):
                with lock:
                    send(payload)  # blocking while holding the lock: fine for a benchmark only

        _run_threads(run, _split(n, threads))
    push.close(linger=-1)
    ctx.term()


def send_scatter(endpoint, n, threads, native=False):
    scatter = Scatter(queue_limit=HWM, linger=None, native=native)
    scatter.connect(endpoint)
    payload = b"x" * SIZE

    def run(count):
        send = scatter.send
        for _ in range(count):
            send(payload, timeout=TIMEOUT)

    if threads == 1:
        run(n)
    else:
        _run_threads(run, _split(n, threads))
    scatter.close()
    zmq.Context.instance().term()


def _run_threads(run, counts):
    workers = [threading.Thread(target=run, args=(c,)) for c in counts]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def send_stamped(endpoint, n, kind):
    """Paced messages carrying their send time, for latency."""
    if kind == "plain":
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PUSH)
        sock.connect(endpoint)
        send = sock.send
    else:
        sock = Scatter(linger=None, native=kind == "native")
        sock.connect(endpoint)
        send = sock.send
    pad = b"x" * (SIZE - _stamp.size)
    clock = time.monotonic
    for _ in range(n):
        send(_stamp.pack(clock()) + pad)
        time.sleep(0.0002)
    sock.close()


def _spawn(target, *args):
    proc = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


def _join(proc):
    proc.join(TIMEOUT)
    if proc.is_alive():
        proc.kill()
        raise TimeoutError("the sender did not finish within %gs" % TIMEOUT)


# -- receivers (here) ----------------------------------------------------------
class _PlainPull:
    """A plain PULL whose receives time out (pyzmq's RCVTIMEO: no per-call cost)."""

    def __init__(self):
        self.sock = zmq.Context.instance().socket(zmq.PULL)
        self.sock.rcvhwm = HWM
        self.sock.rcvtimeo = int(TIMEOUT * 1000)
        self.sock.bind("tcp://127.0.0.1:*")
        self.recv, self.recv_multipart = self.sock.recv, self.sock.recv_multipart

    def close(self):
        self.sock.close(0)


def _plain_pull(native=False):
    if native:
        raise Skipped("a plain PUSH or PULL cannot talk to a native socket")
    pull = _PlainPull()
    return pull, pull.sock.last_endpoint.decode()


def _gather(native=False):
    if native and not native_available():
        raise Skipped("no draft API")
    gather = Gather(queue_limit=HWM, native=native)
    gather.recv_multipart = gather.recv  # (unused: multipart rows are plain only)
    return gather, gather.bind("tcp://127.0.0.1:*")


def _sender(sender, native):
    if sender is send_plain:
        if native:
            raise Skipped("a plain PUSH or PULL cannot talk to a native socket")
        return sender, ()
    if native and not native_available():
        raise Skipped("no draft API")
    return sender, (native,)


def throughput(receiver, sender, n, threads, multipart=False, native=False):
    sock, endpoint = receiver(native)
    try:
        sender, extra = _sender(sender, native)
        proc = _spawn(sender, endpoint, n, threads, *extra)
        if isinstance(sock, Gather):
            def recv(timeout=TIMEOUT, _recv=sock.recv):
                return _recv(timeout=timeout)
        else:
            recv = sock.recv_multipart if multipart else sock.recv
        recv()
        started = time.perf_counter()
        for _ in range(n - 1):
            recv()
        elapsed = time.perf_counter() - started
        _join(proc)
    finally:
        sock.close()
    return (n - 1) / elapsed


def latency(receiver, kind, n):
    native = kind == "native"
    sock, endpoint = receiver(native)
    try:
        proc = _spawn(send_stamped, endpoint, n, kind)
        clock = time.monotonic
        lat = []
        recv = (lambda: sock.recv(timeout=TIMEOUT)) if isinstance(sock, Gather) else sock.recv
        for _ in range(n):
            message = recv()
            lat.append(clock() - _stamp.unpack_from(message)[0])
        _join(proc)
    finally:
        sock.close()
    lat.sort()
    return lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6


def idle_cpu(native, seconds=2.0):
    """Share of a core used while 10 callers (5 greenlets, 5 plain threads) block on an empty Gather."""
    gather, _ = _gather(native)
    try:
        def wait():
            try:
                gather.recv(timeout=TIMEOUT)
            except zmq.ZMQError:
                pass  # closed: the end of the measurement

        greenlets = [gevent.spawn(wait) for _ in range(5)]
        threads = [threading.Thread(target=wait, daemon=True) for _ in range(5)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + TIMEOUT
        while len(gather._waiters) < 10:
            if time.monotonic() > deadline:
                raise TimeoutError("the ten callers did not block")
            gevent.sleep(0.01)
        cpu, wall = time.process_time(), time.monotonic()
        gevent.sleep(seconds)
        used = (time.process_time() - cpu) / (time.monotonic() - wall)
    finally:
        gather.close()
    gevent.joinall(greenlets, timeout=TIMEOUT)
    for thread in threads:
        thread.join(TIMEOUT)
    return used


def _cell(run):
    try:
        return run()
    except Skipped as why:
        return why


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=300000, help="messages per stream (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="repeat each figure, report the median (default %(default)s)")
    parser.add_argument("--latency", type=int, default=5000, help="paced messages for latency (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT,
                        help="seconds any one blocking call may take (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="a short pass: 30000 messages, 1 round, 500 paced")
    add_deadline_option(parser, 1200)
    args = parser.parse_args()
    if args.quick:
        args.messages, args.rounds, args.latency = min(args.messages, 30000), 1, min(args.latency, 500)
    if args.messages < 2 or args.rounds < 1 or args.latency < 1 or args.timeout <= 0:
        parser.error("--messages needs at least 2, --rounds and --latency at least 1, --timeout > 0")
    globals()["TIMEOUT"] = args.timeout
    with Steps(args.deadline).guard("scatter", "%d rounds of streams, then latency and idle CPU" % args.rounds):
        measure(args)


def measure(args):
    n = args.messages

    configs = [
        ("plain PUSH -> PULL", (_plain_pull, send_plain, n, 1), False),
        ("plain, recv_multipart", (_plain_pull, send_plain, n, 1, True), False),
        ("Scatter -> Gather", (_gather, send_scatter, n, 1), True),
        ("Scatter -> plain PULL", (_plain_pull, send_scatter, n, 1), True),
        ("plain PUSH -> Gather", (_gather, send_plain, n, 1), True),
        ("Scatter, 4 threads", (_gather, send_scatter, n, 4), True),
        ("locked PUSH, 4 threads", (_plain_pull, send_plain, n, 4), False),
    ]
    wires = ("emulated", "native")
    print("zactors scatter-gather benchmark (%d cores, pyzmq %s, libzmq %s, draft %s), medians of %d rounds"
          % (os.cpu_count(), zmq.__version__, zmq.zmq_version(), zmq.has("draft"), args.rounds))
    load_average("start")
    print("\none-way tcp loopback, %d x %d-byte messages, sender in another process" % (n, SIZE))
    print("  %-24s %-26s %s" % ("", "emulated (default)", "native (native=True)"))
    # Rounds interleave the configurations, so that load from elsewhere on
    # the machine hits them alike.
    runs = {(name, wire): [] for name, _, _ in configs for wire in wires}
    for _ in range(args.rounds):
        for name, config, both in configs:
            for wire in wires if both else wires[:1]:
                result = _cell(lambda: throughput(*config, native=wire == "native"))
                runs[name, wire].append(result)
                if not isinstance(result, Skipped):  # as measured; the medians follow
                    print("    %-24s %-8s %9.0f msg/s" % (name, wire, result), file=sys.stderr, flush=True)
    plain = statistics.median(runs["plain PUSH -> PULL", "emulated"])

    def rate(name, wire):
        values = runs[name, wire]
        if not values:
            return "%-26s" % ""
        if isinstance(values[0], Skipped):
            return "%-26s" % ("- (%s)" % values[0] if str(values[0]) != "no draft API" else "n/a (no draft API)")
        value = statistics.median(values)
        return "%-26s" % ("%9.0f msg/s %5.2fx plain" % (value, value / plain))

    for name, _, _ in configs:
        print("  %-24s %s %s" % (name, rate(name, "emulated"), rate(name, "native").rstrip()))
    print("\none-way latency, %d paced messages (p50 / p99)" % args.latency)
    for name, receiver, kind in (("plain PUSH -> PULL", _plain_pull, "plain"),
                                 ("Scatter -> Gather", _gather, "ours"),
                                 ("Scatter -> Gather, native", _gather, "native")):
        result = _cell(lambda: latency(receiver, kind, args.latency))
        if isinstance(result, Skipped):
            print("  %-26s n/a (%s)" % (name, result))
        else:
            print("  %-26s %7.1f us  / %7.1f us" % (name, result[0], result[1]))
    print("\nidle CPU, 10 callers blocked on an empty Gather (5 greenlets, 5 plain threads)")
    for wire in wires:
        result = _cell(lambda: idle_cpu(wire == "native"))
        print("  %-24s %s" % (wire, "n/a (%s)" % result if isinstance(result, Skipped)
                                  else "%5.2f%% of a core" % (result * 100)))
    load_average("end")


if __name__ == "__main__":
    main()
