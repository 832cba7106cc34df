"""Clone benchmark: snapshot, update throughput and failover, beside raw pyzmq ceilings.

    python benchmarks/clone.py [--keys 100000] [--updates 200000] [--rate 1000] [--failover-seconds 4]
                               [--only snapshot,updates,failover]

In one run, servers as separate processes (``zactors clone server``):

- snapshot: a server holding ``--keys`` keys of 100-byte values; time for a new
  zactors client to receive it all, and keys received.  Raw ceiling: plain
  pyzmq ROUTER -> DEALER streaming the same number of five-frame messages.
- updates: ``--updates`` KVSETs pushed as fast as a raw PUB can into the
  collector; KVPUBs/s seen by 1 and by 10 zactors clients (in another
  process), and how many each missed.  Raw ceiling: a plain pyzmq SUB -> PUB
  relay process with the same message shape.
- failover: a Binary Star pair; a client writes unique keys at ``--rate``
  updates/s; the primary is SIGKILLed; time until the client follows the
  backup, and updates lost (written, never in the final map).

Anchors (the issue): the Guide's Clone model 6 took 3.6-8 s per 100k-key
snapshot and lost entries, moved 3-10.7k updates/s, and failed over in about
5 s losing up to 575 updates.  Targets: < 1 s with none lost; >= 50k/s;
< 2 s with 0 lost.  Smoke-run with small counts: ``--keys 2000 --updates 5000
--failover-seconds 2``.

Each figure is printed as it is measured; every wait has a deadline and
says what it waits for (``--deadline`` per step; see ``_harness.py``).
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

from _harness import Steps, StepTimeout, add_deadline_option, subset, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VALUE = b"v" * 100


def free_base_port():
    import random
    for _ in range(200):
        base = random.randrange(20000, 60000)
        held = []
        try:
            for port in range(base, base + 4):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise SystemExit("no free ports")


def server(port, *extra):
    argv = [sys.executable, "-m", "zactors.apps.cli", "-q", "clone", "server", "--port", str(port), *extra]
    return subprocess.Popen(argv, cwd=ROOT)


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def load(port, n):
    """Push n KVSETs into a server's collector; wait until a client sees the last."""
    import gevent
    import zmq
    from zactors.actors.sockets import Socket, context
    from zactors.patterns.clone.client import Clone
    from zactors.patterns.clone.protocol import encode_kvmsg

    probe = Clone("tcp://127.0.0.1:%d" % port, timeout=5)
    if not probe.wait_synced(30):
        raise StepTimeout("no snapshot from the server on port %d within 30s" % port)
    pub = context().socket(zmq.PUB, socket_class=Socket)
    pub.sndhwm = 0
    pub.connect("tcp://127.0.0.1:%d" % (port + 2))
    gevent.sleep(0.3)
    base = probe.sequence
    for i in range(n):
        pub.send_multipart(encode_kvmsg(b"key-%07d" % i, 0, VALUE))
        if i % 1000 == 999:
            gevent.sleep(0)
    wait_until(lambda: probe.sequence >= base + n, 120, "the server to publish the %d keys loaded" % n,
               gevent.sleep, 0.05)
    pub.close(0)
    probe.destroy()


def bench_snapshot(keys):
    from zactors.patterns.clone.client import Clone

    port = free_base_port()
    proc = server(port)
    try:
        load(port, keys)
        started = time.perf_counter()
        clone = Clone("tcp://127.0.0.1:%d" % port, timeout=5, sub_wait=0.0001)
        if not clone.wait_synced(60):
            raise StepTimeout("no complete snapshot of %d keys within 60s" % keys)
        took = time.perf_counter() - started
        got = len(clone)
        clone.destroy()
    finally:
        stop(proc)
    return {"keys": keys, "received": got, "seconds": round(took, 3)}


def raw_snapshot(keys):
    import threading

    import zmq
    ctx = zmq.Context.instance()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    router.router_mandatory = 1  # block at the HWM instead of dropping (the Guide's lossy snapshots)
    dealer.rcvtimeo = 10000      # never hang the benchmark
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer.connect("tcp://127.0.0.1:%d" % port)
    dealer.send(b"ICANHAZ?")
    ident, _ = router.recv_multipart()
    seq = (0).to_bytes(8, "big")

    def send():
        for i in range(keys):
            router.send_multipart([ident, b"key-%07d" % i, seq, b"", b"", VALUE])
    started = time.perf_counter()
    t = threading.Thread(target=send)
    t.start()
    for _ in range(keys):
        dealer.recv_multipart()
    took = time.perf_counter() - started
    t.join()
    router.close(0)
    dealer.close(0)
    return {"seconds": round(took, 3)}


def subscribers_role(args):
    """Child: ``clients`` zactors clients; report when each saw ``n`` updates (or went quiet)."""
    import gevent
    from zactors.patterns.clone.client import Clone

    clients = [Clone("tcp://127.0.0.1:%d" % args.port, timeout=5) for _ in range(args.clients)]
    for c in clients:
        if not c.wait_synced(30):
            raise StepTimeout("a client got no snapshot within 30s")
    base = [c.sequence for c in clients]
    first = [None] * len(clients)
    last = [None] * len(clients)
    counts = [0] * len(clients)

    def counter(i):
        def seen(key, value, seq):
            now = time.perf_counter()
            if first[i] is None:
                first[i] = now
            last[i] = now
            counts[i] += 1
        return seen
    for i, c in enumerate(clients):
        c.on_change(counter(i))
    print(json.dumps({"ready": True}), flush=True)
    quiet_since = time.monotonic()
    seen_total = 0
    give_up = time.monotonic() + 300
    while min(counts) < args.n and time.monotonic() < give_up:
        gevent.sleep(0.05)
        if sum(counts) != seen_total:
            seen_total, quiet_since = sum(counts), time.monotonic()
        elif time.monotonic() - quiet_since > 3 and seen_total:
            break
    rates = [counts[i] / (last[i] - first[i]) if counts[i] > 1 else 0 for i in range(len(clients))]
    print(json.dumps({"received": counts, "rate": min(rates), "base": base}), flush=True)
    for c in clients:
        c.destroy()


def bench_updates(n, clients):
    import zmq
    port = free_base_port()
    proc = server(port)
    try:
        sub = subprocess.Popen([sys.executable, __file__, "--role", "subscribers", "--port", str(port),
                                "--clients", str(clients), "--n", str(n)], stdout=subprocess.PIPE, cwd=ROOT)
        if not sub.stdout.readline():
            raise RuntimeError("the subscribers' process ended before its clients synced")
        ctx = zmq.Context.instance()
        pub = ctx.socket(zmq.PUB)
        pub.sndhwm = 0
        pub.connect("tcp://127.0.0.1:%d" % (port + 2))
        time.sleep(0.3)
        seq = (0).to_bytes(8, "big")
        for i in range(n):
            pub.send_multipart([b"key-%07d" % (i % 10000), seq, b"", b"", VALUE])
        line = sub.stdout.readline()
        if not line:
            raise RuntimeError("the subscribers' process ended without a result")
        result = json.loads(line)
        sub.wait(30)
        pub.close(0)
    finally:
        stop(proc)
    return {"clients": clients, "updates_per_s": round(result["rate"]), "missed": [n - c for c in result["received"]]}


def relay_role(args):
    import zmq
    ctx = zmq.Context.instance()
    sub, pub = ctx.socket(zmq.SUB), ctx.socket(zmq.PUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.rcvhwm = pub.sndhwm = 100000
    sub.bind("tcp://127.0.0.1:%d" % (args.port + 2))
    pub.bind("tcp://127.0.0.1:%d" % (args.port + 1))
    while True:
        pub.send_multipart(sub.recv_multipart())


def rawsend_role(args):
    """Child: a plain pyzmq PUB pushing ``n`` KVSET-shaped messages into PORT+2 once told to start."""
    import zmq
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.sndhwm = 0
    pub.connect("tcp://127.0.0.1:%d" % (args.port + 2))
    seq = (0).to_bytes(8, "big")
    for line in sys.stdin:
        count = int(line)
        for i in range(count):
            pub.send_multipart([b"key-%07d" % (i % 10000), seq, b"", b"", VALUE])
    pub.close(linger=-1)


def raw_updates(n, zactors=False):
    """A plain SUB counting what arrives through a plain relay (or, ``zactors``: through a zactors server)."""
    import zmq
    port = free_base_port()
    relay = server(port) if zactors else subprocess.Popen(
        [sys.executable, __file__, "--role", "relay", "--port", str(port)], cwd=ROOT)
    sender = subprocess.Popen([sys.executable, __file__, "--role", "rawsend", "--port", str(port)], cwd=ROOT,
                              stdin=subprocess.PIPE, text=True)
    try:
        sub = zmq.Context.instance().socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.rcvhwm = 0
        sub.connect("tcp://127.0.0.1:%d" % (port + 1))
        def updates(wait_ms):
            """Updates received until none for ``wait_ms`` (a zactors server also sends HUGZ: not counted)."""
            count = 0
            while sub.poll(wait_ms):
                if sub.recv_multipart()[0].startswith(b"key-"):
                    count += 1
            return count

        def passes():  # a probe update sent now comes through
            sender.stdin.write("1\n")
            sender.stdin.flush()
            if updates(100 if zactors else 200):   # shorter than HUGZ (0.2 s): a silent server ends the poll
                return True
            if zactors:
                sub.setsockopt(zmq.SUBSCRIBE, b"")
            return False
        what = "zactors server" if zactors else "pyzmq relay"
        wait_until(passes, 30, "probe update through the %s to a plain SUB" % what, interval=0)
        wait_until(lambda: updates(100) == 0, 30, "end of the probe updates from the %s" % what, interval=0)
        sender.stdin.write("%d\n" % n)
        sender.stdin.flush()
        got, first = 0, None
        last = time.monotonic()
        while got < n and time.monotonic() - last < 2.0:  # until all came, or none for 2 s (lost)
            if not sub.poll(100):
                continue
            if sub.recv_multipart()[0].startswith(b"key-"):
                got += 1
                last = time.monotonic()
                if first is None:
                    first = time.perf_counter()
        rate = got / (time.perf_counter() - first) if first else 0
        sub.close(0)
    finally:
        sender.stdin.close()
        sender.wait(10)
        if zactors:
            stop(relay)
        else:
            relay.kill()
            relay.wait()
    return {"updates_per_s": round(rate), "missed": n - got}


def bench_failover(rate, seconds):
    import gevent
    from zactors.patterns.clone.client import Clone

    p, b = free_base_port(), free_base_port()
    primary = server(p, "--primary", "--peer", "tcp://127.0.0.1:%d" % b)
    backup = server(b, "--backup", "--peer", "tcp://127.0.0.1:%d" % p)
    try:
        client = Clone(["tcp://127.0.0.1:%d" % p, "tcp://127.0.0.1:%d" % b])
        if not client.wait_synced(30):
            raise StepTimeout("no snapshot from the primary within 30s")
        written = []
        running = [True]

        def write():
            next_at = time.monotonic()
            i = 0
            while running[0]:
                key = "w-%d" % i
                client.set(key, "1")
                written.append(key.encode())
                i += 1
                next_at += 1.0 / rate
                gevent.sleep(max(0.0, next_at - time.monotonic()))
        writer = gevent.spawn(write)
        gevent.sleep(seconds / 2)
        killed = time.monotonic()
        primary.kill()
        target = "tcp://127.0.0.1:%d" % b
        give_up = killed + 30
        while not (client.server == target and client.call("INFO")["synced"]):
            if time.monotonic() > give_up:  # report it, never hang
                raise RuntimeError("the client did not switch to the backup within 30 s")
            gevent.sleep(0.002)
        switched = time.monotonic() - killed
        gevent.sleep(seconds / 2)
        running[0] = False
        writer.join()
        client.set("final", "1", wait=10)
        lost = sum(1 for k in written if k not in client)
        client.destroy()
    finally:
        stop(backup)
        stop(primary)
    return {"rate": rate, "failover_s": round(switched, 3), "written": len(written), "lost": lost}


def snapshot_part(run, args):
    s = run("snapshot", "a new client to receive %d keys from a server process" % args.keys,
            bench_snapshot, args.keys)
    raw = run("snapshot_raw_pyzmq", "a plain DEALER to receive %d messages" % args.keys, raw_snapshot, args.keys)
    if s and raw:
        print("snapshot       %d keys: %d received in %.3f s (raw pyzmq ROUTER->DEALER %.3f s)"
              % (s["keys"], s["received"], s["seconds"], raw["seconds"]), flush=True)


def updates_part(run, args):
    for name, clients in (("updates_1_client", 1), ("updates_10_clients", 10)):
        u = run(name, "%d client(s) in another process to see %d updates" % (clients, args.updates),
                bench_updates, args.updates, clients)
        if u:
            print("KVSET->KVPUB   %2d client(s): %d updates/s, missed %s" % (u["clients"], u["updates_per_s"],
                                                                            u["missed"]), flush=True)
    r = run("updates_raw_pyzmq_relay", "a plain SUB to receive %d messages through a pyzmq relay" % args.updates,
            raw_updates, args.updates)
    if r:
        print("KVSET->KVPUB   raw pyzmq relay: %d updates/s" % r["updates_per_s"], flush=True)
    r = run("updates_server_to_plain_sub", "a plain SUB to receive %d updates from a zactors server" % args.updates,
            raw_updates, args.updates, zactors=True)
    if r:
        print("KVSET->KVPUB   the server alone, to a plain pyzmq SUB: %d updates/s" % r["updates_per_s"], flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100000)
    parser.add_argument("--updates", type=int, default=200000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--failover-seconds", type=float, default=4.0)
    parser.add_argument("--only", default="snapshot,updates,failover",
                        help="comma-separated parts to run: snapshot, updates, failover (default: all)")
    add_deadline_option(parser)
    parser.add_argument("--role", choices=("subscribers", "relay", "rawsend"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--clients", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "subscribers":
        return subscribers_role(args)
    if args.role == "relay":
        return relay_role(args)
    if args.role == "rawsend":
        return rawsend_role(args)
    only = subset(parser, "--only", args.only, ("snapshot", "updates", "failover"))
    steps = Steps(args.deadline)
    run = steps.run
    if "snapshot" in only:
        snapshot_part(run, args)
    if "updates" in only:
        updates_part(run, args)
    if "failover" in only:
        f = run("failover", "a client to follow the backup after the primary is killed", bench_failover, args.rate,
                args.failover_seconds)
        if f:
            print("failover       at %d updates/s: %.3f s, %d of %d updates lost"
                  % (f["rate"], f["failover_s"], f["lost"], f["written"]), flush=True)
    print(json.dumps(steps.results), flush=True)
    return 0 if all("error" not in (r or {}) for r in steps.results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
