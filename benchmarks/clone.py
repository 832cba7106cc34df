"""Clone benchmark: snapshot, update throughput and failover, beside raw pyzmq ceilings.

    python benchmarks/clone.py [--keys 100000] [--updates 200000] [--rate 1000] [--failover-seconds 4]

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
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

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
    probe.wait_synced(30)
    pub = context().socket(zmq.PUB, socket_class=Socket)
    pub.sndhwm = 0
    pub.connect("tcp://127.0.0.1:%d" % (port + 2))
    gevent.sleep(0.3)
    base = probe.sequence
    for i in range(n):
        pub.send_multipart(encode_kvmsg(b"key-%07d" % i, 0, VALUE))
        if i % 1000 == 999:
            gevent.sleep(0)
    deadline = time.monotonic() + 120
    while probe.sequence < base + n and time.monotonic() < deadline:
        gevent.sleep(0.05)
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
        clone.wait_synced(60)
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
        c.wait_synced(30)
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
    while min(counts) < args.n:
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
        json.loads(sub.stdout.readline())
        ctx = zmq.Context.instance()
        pub = ctx.socket(zmq.PUB)
        pub.sndhwm = 0
        pub.connect("tcp://127.0.0.1:%d" % (port + 2))
        time.sleep(0.3)
        seq = (0).to_bytes(8, "big")
        for i in range(n):
            pub.send_multipart([b"key-%07d" % (i % 10000), seq, b"", b"", VALUE])
        result = json.loads(sub.stdout.readline())
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
        while True:  # until the relay passes messages both ways
            sender.stdin.write("1\n")
            sender.stdin.flush()
            if sub.poll(200):
                break
            if zactors:
                sub.setsockopt(zmq.SUBSCRIBE, b"")
        while sub.poll(300):
            sub.recv_multipart()
        sender.stdin.write("%d\n" % n)
        sender.stdin.flush()
        sub.rcvtimeo = 2000
        got, first = 0, None
        try:
            while got < n:
                sub.recv_multipart()
                got += 1
                if first is None:
                    first = time.perf_counter()
        except zmq.Again:
            pass
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
        client.wait_synced(30)
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100000)
    parser.add_argument("--updates", type=int, default=200000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--failover-seconds", type=float, default=4.0)
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
    def step(name, run, *a, **kw):
        print("%s ..." % name, file=sys.stderr, flush=True)  # progress: each part takes seconds
        return run(*a, **kw)

    results = {
        "snapshot": step("snapshot", bench_snapshot, args.keys),
        "snapshot_raw_pyzmq": step("snapshot_raw_pyzmq", raw_snapshot, args.keys),
        "updates_1_client": step("updates_1_client", bench_updates, args.updates, 1),
        "updates_10_clients": step("updates_10_clients", bench_updates, args.updates, 10),
        "updates_raw_pyzmq_relay": step("updates_raw_pyzmq_relay", raw_updates, args.updates),
        "updates_server_to_plain_sub": step("updates_server_to_plain_sub", raw_updates, args.updates, zactors=True),
        "failover": step("failover", bench_failover, args.rate, args.failover_seconds),
    }
    s = results["snapshot"]
    print("snapshot       %d keys: %d received in %.3f s (raw pyzmq ROUTER->DEALER %.3f s)"
          % (s["keys"], s["received"], s["seconds"], results["snapshot_raw_pyzmq"]["seconds"]))
    for name in ("updates_1_client", "updates_10_clients"):
        u = results[name]
        print("KVSET->KVPUB   %2d client(s): %d updates/s, missed %s (raw pyzmq relay %d/s)"
              % (u["clients"], u["updates_per_s"], u["missed"], results["updates_raw_pyzmq_relay"]["updates_per_s"]))
    print("KVSET->KVPUB   the server alone, to a plain pyzmq SUB: %d updates/s"
          % results["updates_server_to_plain_sub"]["updates_per_s"])
    f = results["failover"]
    print("failover       at %d updates/s: %.3f s, %d of %d updates lost" % (f["rate"], f["failover_s"], f["lost"],
                                                                           f["written"]))
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    sys.exit(main())
