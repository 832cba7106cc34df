"""Kernel benchmark: pipe round trips and actor streaming beside their baselines.

    python benchmarks/kernel.py [--calls 20000] [--messages 500000] [--rounds 3] [--quick]

Prints, measured in this one run:
  * pipe round trips/s (and p50/p99 latency): a zactors actor's ``call`` vs a
    naive zmq.green PAIR pipe vs ``gevent.queue.Queue`` (the in-process floor);
  * one-way tcp loopback throughput of 100-byte messages from a plain pyzmq
    PUSH in another process, received by a zactors actor vs by plain pyzmq
    PULL (the ceiling) vs by zmq.green PULL.
Targets: actor round trips >= 3x zmq.green PAIR and >= 0.5x gevent.queue; actor streaming >= 0.5x plain.
The figures run ``--rounds`` times, interleaved; the table gives medians, and
the load average is printed at the start and at the end.
Each figure is printed as it is measured; the run has a deadline
(``--deadline``; see ``_harness.py``).
"""
import argparse
import multiprocessing
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gevent  # noqa: E402
import zmq  # noqa: E402
import zmq.green as gzmq  # noqa: E402
from gevent.queue import Queue  # noqa: E402

from _harness import Steps, add_deadline_option, load_average  # noqa: E402
from zactors.actors import Actor, command  # noqa: E402

SIZE = 100


def timed_round_trips(call, n):
    """(round trips/s, p50 us, p99 us) for ``call()`` made ``n`` times."""
    lat = []
    clock = time.perf_counter
    started = clock()
    for _ in range(n):
        t = clock()
        call()
        lat.append(clock() - t)
    rate = n / (clock() - started)
    lat.sort()
    return rate, lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6


class Echo(Actor):
    @command(reply=True)
    def echo(self, value):
        return value


def bench_actor_pipe(n):
    echo = Echo()
    try:
        timed_round_trips(lambda: echo.call("ECHO", 1), 1000)  # warm up
        return timed_round_trips(lambda: echo.call("ECHO", 1), n)
    finally:
        echo.destroy()


def bench_green_pair(n):
    ctx = gzmq.Context()
    a, b = ctx.socket(gzmq.PAIR), ctx.socket(gzmq.PAIR)
    endpoint = "inproc://bench-%s" % uuid.uuid4().hex
    a.bind(endpoint)
    b.connect(endpoint)

    def server():
        while True:
            b.send_multipart(b.recv_multipart())

    g = gevent.spawn(server)

    def call():
        a.send_multipart([b"ECHO", b"1", b"\x01"])
        a.recv_multipart()

    try:
        timed_round_trips(call, 1000)
        return timed_round_trips(call, n)
    finally:
        g.kill()
        a.close(0)
        b.close(0)


def bench_queue(n):
    requests, replies = Queue(), Queue()

    def server():
        while True:
            replies.put(requests.get())

    g = gevent.spawn(server)

    def call():
        requests.put(1)
        replies.get()

    try:
        return timed_round_trips(call, n)
    finally:
        g.kill()


# -- streaming ---------------------------------------------------------------
def pusher(endpoint, n):
    """Another process: plain pyzmq PUSH, as fast as it goes."""
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.sndhwm = 100000
    push.connect(endpoint)
    payload = b"x" * SIZE
    for _ in range(n):
        push.send(payload)
    push.close(linger=-1)
    ctx.term()


def run_pusher(endpoint, n):
    proc = multiprocessing.get_context("spawn").Process(target=pusher, args=(endpoint, n))
    proc.start()
    return proc


def pull_rate(module, n):
    """msg/s received by a blocking PULL of ``module`` (``zmq`` or ``zmq.green``)."""
    ctx = module.Context()
    pull = ctx.socket(module.PULL)
    pull.rcvhwm = 100000
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    proc = run_pusher("tcp://127.0.0.1:%d" % port, n)
    pull.recv()
    started = time.perf_counter()
    for _ in range(n - 1):
        pull.recv()
    elapsed = time.perf_counter() - started
    proc.join()
    pull.close(0)
    return (n - 1) / elapsed


class Sink(Actor):
    """Counts messages on a PULL socket; emits DONE (seconds from first to last)."""

    def __init__(self, expected):
        self.expected = expected

    def setup(self):
        self.pull = self.socket(zmq.PULL, rcvhwm=100000)
        self.pull.bind("tcp://127.0.0.1:*")
        self.endpoint = self.pull.last_endpoint.decode()
        self.count = 0
        self.add_reader(self.pull, self.on_message)

    def on_message(self, frames):
        self.count += 1
        if self.count == 1:
            self.started = time.perf_counter()
        elif self.count == self.expected:
            self.emit("DONE", time.perf_counter() - self.started)


def actor_pull(n):
    sink = Sink(n)
    try:
        proc = run_pusher(sink.endpoint, n)
        event = sink.recv_event(timeout=300)
        proc.join()
        return (n - 1) / event.args[0]
    finally:
        sink.destroy()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000, help="round trips per pipe (default %(default)s)")
    parser.add_argument("--messages", type=int, default=500000, help="messages per stream (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="a short pass: 2000 calls, 50000 messages, 1 round")
    add_deadline_option(parser, 600)
    args = parser.parse_args()
    if args.quick:
        args.calls, args.messages, args.rounds = min(args.calls, 2000), min(args.messages, 50000), 1
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    pipe_benches = (("zactors actor pipe", bench_actor_pipe), ("zmq.green PAIR pipe", bench_green_pair),
                    ("gevent.queue.Queue", bench_queue))
    stream_benches = (("plain pyzmq PULL", pull_rate, zmq), ("zactors actor", actor_pull),
                      ("zmq.green PULL", pull_rate, gzmq))
    with Steps(args.deadline).guard("kernel", "%d rounds of pipe round trips and tcp streams" % args.rounds):
        print("zactors kernel benchmark (%d cores, pyzmq %s, libzmq %s), medians of %d interleaved rounds"
              % (os.cpu_count(), zmq.__version__, zmq.zmq_version(), args.rounds))
        load_average("start")
        runs = {}  # rounds interleave every figure, so that the machine's load drifts over them alike
        for n in range(args.rounds):
            for name, bench in pipe_benches:
                rate, p50, p99 = result = bench(args.calls)
                runs.setdefault(name, []).append(result)
                print("  round %d %-22s %9.0f /s   p50 %6.1f us   p99 %6.1f us" % (n + 1, name, rate, p50, p99),
                      file=sys.stderr, flush=True)
            for name, bench, *extra in stream_benches:
                rate = bench(*extra, args.messages)
                runs.setdefault(name, []).append(rate)
                print("  round %d %-22s %9.0f msg/s" % (n + 1, name, rate), file=sys.stderr, flush=True)

        print("\npipe round trips, %d calls" % args.calls)
        pipes = {}
        for name, _ in pipe_benches:
            rate, p50, p99 = pipes[name] = tuple(statistics.median(r[i] for r in runs[name]) for i in range(3))
            print("  %-22s %9.0f /s   p50 %6.1f us   p99 %6.1f us" % (name, rate, p50, p99))
        print("  actor / zmq.green = %.2fx  (target >= 3x);  actor / gevent.queue = %.2fx  (target >= 0.5x)"
              % (pipes["zactors actor pipe"][0] / pipes["zmq.green PAIR pipe"][0],
                 pipes["zactors actor pipe"][0] / pipes["gevent.queue.Queue"][0]))

        print("\none-way tcp loopback, %d x %d-byte messages from a plain PUSH process" % (args.messages, SIZE))
        streams = {}
        for name, *_ in stream_benches:
            rate = streams[name] = statistics.median(runs[name])
            print("  %-22s %9.0f msg/s" % (name, rate))
        ours = streams["zactors actor"]
        print("  actor / plain = %.2fx  (target >= 0.5x);  actor / zmq.green = %.1fx"
              % (ours / streams["plain pyzmq PULL"], ours / streams["zmq.green PULL"]))
        load_average("end")


if __name__ == "__main__":
    main()
