"""Scatter-gather benchmark: zactors Scatter->Gather beside plain pyzmq PUSH->PULL.

    python benchmarks/scatter.py [--messages 300000] [--rounds 3]

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
of paced messages, plain vs zactors.
"""
import argparse
import multiprocessing
import os
import statistics
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import zmq  # noqa: E402

from zactors.patterns.scatter import Gather, Scatter  # noqa: E402

SIZE = 100
HWM = 100000
_stamp = struct.Struct("d")


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


def send_scatter(endpoint, n, threads):
    scatter = Scatter(queue_limit=HWM, linger=None)
    scatter.connect(endpoint)
    payload = b"x" * SIZE

    def run(count):
        send = scatter.send
        for _ in range(count):
            send(payload)

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
        sock = Scatter(linger=None)
        sock.connect(endpoint)
        send = sock.send
    pad = b"x" * (SIZE - _stamp.size)
    clock = time.monotonic
    for _ in range(n):
        send(_stamp.pack(clock()) + pad)
        time.sleep(0.0002)
    sock.close()


def _spawn(target, *args):
    proc = multiprocessing.get_context("spawn").Process(target=target, args=args)
    proc.start()
    return proc


# -- receivers (here) ----------------------------------------------------------
def _plain_pull():
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    pull.rcvhwm = HWM
    pull.bind("tcp://127.0.0.1:*")
    return pull, pull.last_endpoint.decode()


def _gather():
    gather = Gather(queue_limit=HWM)
    return gather, gather.bind("tcp://127.0.0.1:*")


def throughput(receiver, sender, n, threads, multipart=False):
    sock, endpoint = receiver()
    proc = _spawn(sender, endpoint, n, threads)
    recv = sock.recv_multipart if multipart else sock.recv
    recv()
    started = time.perf_counter()
    for _ in range(n - 1):
        recv()
    elapsed = time.perf_counter() - started
    proc.join()
    sock.close()
    return (n - 1) / elapsed


def latency(receiver, kind, n):
    sock, endpoint = receiver()
    proc = _spawn(send_stamped, endpoint, n, kind)
    clock = time.monotonic
    lat = []
    for _ in range(n):
        message = sock.recv()
        lat.append(clock() - _stamp.unpack_from(message)[0])
    proc.join()
    sock.close()
    lat.sort()
    return lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=300000, help="messages per stream (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="repeat each figure, report the median (default %(default)s)")
    parser.add_argument("--latency", type=int, default=5000, help="paced messages for latency (default %(default)s)")
    args = parser.parse_args()
    n = args.messages

    configs = [
        ("plain PUSH -> PULL", (_plain_pull, send_plain, n, 1)),
        ("plain, recv_multipart", (_plain_pull, send_plain, n, 1, True)),
        ("Scatter -> Gather", (_gather, send_scatter, n, 1)),
        ("Scatter -> plain PULL", (_plain_pull, send_scatter, n, 1)),
        ("plain PUSH -> Gather", (_gather, send_plain, n, 1)),
        ("Scatter, 4 threads", (_gather, send_scatter, n, 4)),
        ("locked PUSH, 4 threads", (_plain_pull, send_plain, n, 4)),
    ]
    print("zactors scatter-gather benchmark (%d cores, pyzmq %s, libzmq %s, draft %s), medians of %d rounds"
          % (os.cpu_count(), zmq.__version__, zmq.zmq_version(), zmq.has("draft"), args.rounds))
    print("\none-way tcp loopback, %d x %d-byte messages, sender in another process" % (n, SIZE))
    # Rounds interleave the configurations, so that load from elsewhere on
    # the machine hits them alike.
    runs = {name: [] for name, _ in configs}
    for _ in range(args.rounds):
        for name, config in configs:
            runs[name].append(throughput(*config))
    rates = {name: statistics.median(values) for name, values in runs.items()}
    plain = rates["plain PUSH -> PULL"]
    for name, rate in rates.items():
        print("  %-24s %9.0f msg/s   %.2fx plain" % (name, rate, rate / plain))
    print("  Scatter/plain = %.2fx (target >= 0.8x)" % (rates["Scatter -> Gather"] / plain))
    print("\none-way latency, %d paced messages (p50 / p99)" % args.latency)
    for name, receiver, kind in (("plain PUSH -> PULL", _plain_pull, "plain"), ("Scatter -> Gather", _gather, "ours")):
        p50, p99 = latency(receiver, kind, args.latency)
        print("  %-24s %7.1f us  / %7.1f us" % (name, p50, p99))


if __name__ == "__main__":
    main()
