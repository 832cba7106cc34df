"""Majordomo benchmark: zactors beside majortomo 0.2.0, a bare pyzmq floor and a raw echo (the ceiling).

Run: ``/tmp/venv/bin/python benchmarks/majordomo.py [--sync SECONDS] [--load SECONDS]``

Every party is its own process on loopback TCP.  Stacks run interleaved
for ``--rounds`` rounds (default 3) and each figure is the median of the
rounds; the load average is printed at the start and at the end.  For each stack:

- sync: 1 client process + 1 worker process, one request at a time
  (req/s, p50/p99 latency);
- load: 8 client processes + 4 worker processes, one request at a time each
  (total req/s);
- broker CPU microseconds per request in both phases, from the broker
  process's own CPU time (psutil, user + system).

The raw ceiling is a DEALER client and a ROUTER that echoes: no broker, no
worker hop.  The ``bare`` stack is the floor for a Python client and worker:
each is a plain blocking pyzmq DEALER with the MDP/0.2 frames prebuilt (no
checks, no timeouts, no pool), through the zactors broker; what our client
and worker cost above it is their own.  Clients wait for a "go" line so that
every window is aligned.

Each round's figures are printed as they are measured; every round runs
under a deadline (``--deadline``) and says what it waits for (``_harness.py``).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from _harness import Steps, add_deadline_option, load_average, subset  # noqa: E402 - after the path

BODY = b"x" * 64
STACKS = ("raw", "bare", "majortomo", "zactors")


# -- roles (each runs in its own process) -----------------------------------------------
def role_broker(stack):
    if stack in ("zactors", "bare"):
        from zactors.patterns.majordomo import Broker
        broker = Broker("tcp://127.0.0.1:*")
        print(broker.endpoint, flush=True)
        for _ in broker.events():
            pass
    elif stack == "majortomo":
        from majortomo.broker import Broker

        class Bound(Broker):
            def bind(self):
                super().bind()
                print(self._socket.last_endpoint.decode(), flush=True)
        Bound("tcp://127.0.0.1:*").run()
    else:  # raw ROUTER echo
        import zmq
        sock = zmq.Context.instance().socket(zmq.ROUTER)
        sock.bind("tcp://127.0.0.1:*")
        print(sock.last_endpoint.decode(), flush=True)
        while True:
            sock.send_multipart(sock.recv_multipart())


def role_worker(stack, endpoint):
    if stack == "zactors":
        from zactors.patterns.majordomo import Worker

        class Echo(Worker):
            def handle(self, request):
                return request
        worker = Echo(endpoint, b"echo")
        for _ in worker.events():
            pass
    elif stack == "bare":  # the floor: blocking pyzmq, frames prebuilt, a HEARTBEAT when idle
        import zmq
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.connect(endpoint)
        sock.send_multipart([b"MDPW02", b"\x01", b"echo"])
        final = [b"MDPW02", b"\x04"]
        while True:
            if not sock.poll(1000):
                sock.send_multipart([b"MDPW02", b"\x05"])
                continue
            frames = sock.recv_multipart()
            if frames[1] == b"\x02":  # REQUEST: address, empty, body
                sock.send_multipart(final + frames[2:])
    else:
        import majortomo
        worker = majortomo.Worker(endpoint, b"echo")
        requests = majortomo.WorkerRequestsIterator(worker)
        for request in requests:
            requests.send_reply_final(request)


def role_client(stack, endpoint, seconds, inflight=1):
    if stack == "zactors":
        from zactors.patterns.majordomo import Client
        client = Client(endpoint, timeout=10, retries=1)

        def call():
            client.request(b"echo", BODY)
    elif stack == "majortomo":
        import majortomo
        client = majortomo.Client(endpoint)
        client.connect()

        def call():
            client.send(b"echo", BODY)
            client.recv_all_as_list(timeout=10)
    elif stack == "bare":
        import zmq
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.connect(endpoint)
        request = [b"MDPC02", b"\x01", b"echo", BODY]

        def call():
            sock.send_multipart(request)
            sock.recv_multipart()
    else:
        import zmq
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.connect(endpoint)

        def call():
            sock.send(BODY)
            sock.recv()
    call()  # warm up: the service is there
    print("ready", flush=True)
    sys.stdin.readline()
    latencies = []
    clock = time.perf_counter
    cpu = time.process_time()
    end = clock() + seconds

    def loop():
        now = clock()
        while now < end:
            call()
            after = clock()
            latencies.append(after - now)
            now = after
    if inflight > 1:  # zactors only: one Client, many greenlets with a request in flight each
        import gevent
        gevent.joinall([gevent.spawn(loop) for _ in range(inflight)], raise_error=True)
    else:
        loop()
    cpu = time.process_time() - cpu
    print(json.dumps({"n": len(latencies), "lat": latencies, "cpu": cpu}), flush=True)


# -- the conductor -----------------------------------------------------------------------
def spawn(*args):
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT)


def phase(stack, endpoint, broker_pid, workers, clients, seconds, inflight=1):
    procs = [spawn("client", stack, endpoint, str(seconds), str(inflight)) for _ in range(clients)]
    try:
        return _measure(procs, broker_pid, [w.pid for w in workers])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _measure(procs, broker_pid, worker_pids):
    import psutil
    workers = [psutil.Process(pid) for pid in worker_pids]

    def workers_cpu():
        return sum(sum(w.cpu_times()[:2]) for w in workers)
    for proc in procs:
        if proc.stdout.readline().strip() != b"ready":
            raise RuntimeError("a client did not start (see its error above)")
    broker = psutil.Process(broker_pid)

    def main_thread():  # the thread that runs Python (the rest is libzmq's I/O thread)
        return sum(t.user_time + t.system_time for t in broker.threads() if t.id == broker_pid)
    before = sum(broker.cpu_times()[:2])
    before_main = main_thread()
    before_workers = workers_cpu()
    started = time.perf_counter()
    for proc in procs:
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    results = [json.loads(proc.stdout.readline()) for proc in procs]
    elapsed = time.perf_counter() - started
    cpu = sum(broker.cpu_times()[:2]) - before
    cpu_main = main_thread() - before_main
    cpu_workers = workers_cpu() - before_workers
    total = sum(r["n"] for r in results)
    lat = sorted(x for r in results for x in r["lat"])
    return {
        "rate": total / elapsed,
        "p50": lat[len(lat) // 2] * 1e6 if lat else None,
        "p99": lat[int(len(lat) * 0.99)] * 1e6 if lat else None,
        "cpu": cpu / total * 1e6,
        "main": cpu_main / total * 1e6,
        "workers": cpu_workers / total * 1e6,
        "clients": sum(r["cpu"] for r in results) / total * 1e6,
    }


def run_stack(stack, sync_s, load_s):
    broker = spawn("broker", stack)
    workers = []
    try:
        endpoint = broker.stdout.readline().decode().strip()
        if stack != "raw":
            workers.append(spawn("worker", stack, endpoint))
        sync = phase(stack, endpoint, broker.pid, workers, 1, sync_s)
        if stack != "raw":
            workers += [spawn("worker", stack, endpoint) for _ in range(3)]
            time.sleep(1.0)  # let them register (a benchmark, not a test)
        load = phase(stack, endpoint, broker.pid, workers, 8, load_s)
        many = phase(stack, endpoint, broker.pid, workers, 8, load_s, 8) if stack == "zactors" else {}
        return sync, load, many
    finally:
        for proc in [broker] + workers:
            proc.kill()
            proc.wait()


def _rounded(run):
    """``run`` with its figures rounded to 0.1, to print them as they come."""
    def rounded(*args):
        return [{k: None if v is None else round(v, 1) for k, v in phase.items()} for phase in run(*args)]
    return rounded


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--sync", type=float, default=4.0, help="seconds of the sync phase (default 4)")
    parser.add_argument("--load", type=float, default=5.0, help="seconds of the load phase (default 5)")
    parser.add_argument("--stacks", default=",".join(STACKS),
                        help="comma-separated subset of %s (default: all)" % ", ".join(STACKS))
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds, stacks interleaved; each figure is the median of the rounds (default 3)")
    parser.add_argument("--quick", action="store_true", help="a short pass: 1 s phases, 1 round")
    add_deadline_option(parser, 300)
    args = parser.parse_args()
    if args.role:
        role, *rest = args.role
        {"broker": role_broker, "worker": role_worker,
         "client": lambda s, e, t, n: role_client(s, e, float(t), int(n))}[role](*rest)
        return
    if args.quick:
        args.sync, args.load, args.rounds = min(args.sync, 1.0), min(args.load, 1.0), 1
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    stacks = subset(parser, "--stacks", args.stacks, STACKS)
    import psutil
    print("Majordomo benchmark: %d cores, %d-byte requests, loopback TCP" % (psutil.cpu_count(), len(BODY)))
    load_average("start")
    runs = {}
    steps = Steps(args.deadline)
    for n in range(args.rounds):
        for stack in stacks:
            measured = steps.run(
                "round %d %s" % (n + 1, stack),
                "1 client, then 8, through the %s broker (%gs each; the broker and its peers are processes)"
                % (stack, args.sync + args.load), _rounded(run_stack), stack, args.sync, args.load)
            if measured is not None:
                runs.setdefault(stack, []).append(measured)
    results = {}  # each figure's median over the rounds
    for stack, rounds in runs.items():
        results[stack] = [{key: statistics.median(values) if values else None
                           for key in ("rate", "p50", "p99", "cpu", "main", "clients", "workers")
                           for values in [[r[which][key] for r in rounds if r[which].get(key) is not None]]}
                          for which in range(3)]

    def cell(stack, which, key, fmt):
        value = results[stack][which].get(key)
        return (fmt % value) if value is not None else "-"
    rows = [
        ("sync 1 client + 1 worker, req/s", 0, "rate", "%.0f"),
        ("sync p50 latency, us", 0, "p50", "%.0f"),
        ("sync p99 latency, us", 0, "p99", "%.0f"),
        ("8 clients + 4 workers, req/s", 1, "rate", "%.0f"),
        ("broker CPU us/request, sync", 0, "cpu", "%.1f"),
        ("  of which its Python thread", 0, "main", "%.1f"),
        ("broker CPU us/request, load", 1, "cpu", "%.1f"),
        ("  of which its Python thread", 1, "main", "%.1f"),
        ("client CPU us/request, sync", 0, "clients", "%.1f"),
        ("client CPU us/request, load", 1, "clients", "%.1f"),
        ("worker CPU us/request, sync", 0, "workers", "%.1f"),
        ("worker CPU us/request, load", 1, "workers", "%.1f"),
        ("8 clients x 8 greenlets + 4 workers, req/s", 2, "rate", "%.0f"),
        ("broker CPU us/request, 8x8", 2, "cpu", "%.1f"),
    ]
    stacks = [s for s in STACKS if s in results]
    names = {"raw": "raw ceiling", "bare": "bare pyzmq", "majortomo": "majortomo", "zactors": "zactors"}
    print("\nmedians of %d round(s):" % args.rounds)
    print("%-44s" % "" + "".join("%13s" % names[s] for s in stacks))
    for label, which, key, fmt in rows:
        print("%-44s" % label + "".join("%13s" % cell(s, which, key, fmt) for s in stacks))
    if "majortomo" in results and "zactors" in results:
        (ms, ml, _), (zs, zl, zm) = results["majortomo"], results["zactors"]
        print("\nzactors vs majortomo (targets in brackets):")
        print("  broker CPU/request, sync  %.2fx  [<= 0.5x]" % (zs["cpu"] / ms["cpu"]))
        print("  broker CPU/request, load  %.2fx  [<= 0.5x]" % (zl["cpu"] / ml["cpu"]))
        print("  client CPU/request, sync  %.2fx  [<= 0.7x]" % (zs["clients"] / ms["clients"]))
        print("  worker CPU/request, sync  %.2fx  [<= 0.7x]" % (zs["workers"] / ms["workers"]))
        print("  client CPU/request, load  %.2fx  [<= 0.7x]" % (zl["clients"] / ml["clients"]))
        print("  worker CPU/request, load  %.2fx  [<= 0.7x]" % (zl["workers"] / ml["workers"]))
        print("  sync p50                  %.2fx  [<= 1.0x]" % (zs["p50"] / ms["p50"]))
        print("  throughput under load     %.2fx  [>= 1.5x]  (8 x 1 in flight, like for like)" % (zl["rate"] / ml["rate"]))
        print("  throughput, 8 x 8 greenlets against majortomo's 8 x 1: %.2fx (its client has one request"
              " in flight at most)" % (zm["rate"] / ml["rate"]))
        if "bare" in results:
            bs, bl, _ = results["bare"]
            print("\nthe floor (bare pyzmq MDP client and worker through the zactors broker) vs majortomo:")
            print("  client CPU/request, sync  %.2fx   load %.2fx" % (bs["clients"] / ms["clients"],
                                                                       bl["clients"] / ml["clients"]))
            print("  worker CPU/request, sync  %.2fx   load %.2fx" % (bs["workers"] / ms["workers"],
                                                                       bl["workers"] / ml["workers"]))
            print("  throughput under load     %.2fx" % (bl["rate"] / ml["rate"]))
    load_average("end")


if __name__ == "__main__":
    main()
