"""ZEPS benchmark: zactors beside Redis Streams (the real server) and the raw ceilings, in one run.

Run: ``python benchmarks/zeps.py [--messages N] [--replay N] [--rate R] [--rounds N] [--runs deliver1,deliver10,replay]``
(smoke run: ``--messages 2000 --replay 5000 --paced 0.5``; ``--quick``: a short pass of every row).

Every party is its own process on loopback TCP; 100-byte messages.

- publish -> journal -> deliver, 1 publisher and 1 subscriber, then 1
  publisher and 10 subscribers: messages/s with the publisher unpaced
  (publish as fast as it can; rate = messages / time until the last
  subscriber has the last one), and p50/p99 latency (publish to receive,
  CLOCK_MONOTONIC, shared by processes) at a paced ``--rate``; messages lost
  (must be 0).
- replay catch-up: ``--replay`` messages journaled first, then a late joiner
  reads them all from the start (messages/s).

zactors: the ZEPS broker, fsync every 100 ms (group commit).  Redis
Streams: the Debian ``redis-server`` this script starts on a free loopback
port in a temporary directory (skipped, with the reason, if it cannot), with
AOF ``appendfsync everysec`` and with persistence off; pipelined ``XADD``
(1000 per pipeline) and a blocking ``XREAD`` consumer (``COUNT 1000``).
NATS JetStream (:mod:`jetstream`, file storage; a publish is acknowledged
once written, fsynced every 2 min unless ``sync_interval: always``): an
ordered push consumer per subscriber.  Consumer groups (``--runs groups``):
:mod:`zeps_groups`.  Raw ceilings: plain pyzmq PUSH -> PULL, and framed
appends to a file.
The Redis rows need ``redis-server`` on the PATH and the ``redis``/``hiredis``
clients (``pip install '.[bench]'``).

The stacks run ``--rounds`` times (default 3), interleaved, and the table
gives each figure's median (lost: the most any round lost); the load
average is printed at the start and at the end.  The ZEPS rows also give the
broker process's CPU per message (user + system, all its threads, over both
the unpaced and the paced run): a figure the machine's load hardly moves.
Each row is printed as it is measured, then the table; every step runs under
a deadline (``--deadline``) and says what it waits for (``_harness.py``).
"""
import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import _jetstream as jetstream  # noqa: E402 - after the path
import zeps_groups  # noqa: E402
from _harness import Steps, add_deadline_option, load_average, median_rows, subset  # noqa: E402 - after the path

SIZE = 100
_STAMP = struct.Struct("<dQ")  # send time (monotonic), index
PAD = b"x" * (SIZE - _STAMP.size)
STREAM = "bench"


def body(i):
    return _STAMP.pack(time.monotonic(), i) + PAD


def _pace(i, start, rate):
    """Sleep until message ``i`` is due at ``rate``/s (no-op when unpaced)."""
    if rate:
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            return delay
    return 0


def _report(received, latencies, first, last):
    latencies.sort()
    n = len(latencies)
    p50 = latencies[n // 2] if n else None
    p99 = latencies[min(n - 1, n * 99 // 100)] if n else None
    print(json.dumps({"received": received, "first": first, "last": last, "p50": p50, "p99": p99}), flush=True)


# -- roles (each runs in its own process) -------------------------------------------
def role_zeps_broker(journal):
    import gevent
    from zactors.patterns.zeps.broker import Broker
    broker = Broker(journal, "tcp://127.0.0.1:*", fsync=0.1)
    print(broker.endpoint, flush=True)
    gevent.get_hub().join()


def role_zeps_sub(endpoint, n, from_start):
    from zactors.patterns.zeps import Subscriber
    sub = Subscriber(endpoint, STREAM, from_seq=1 if from_start else None, new=not from_start, window=16 << 20,
                     timeout=30, wait=True)
    print("ready", flush=True)
    latencies, received, first = [], 0, None
    unpack, clock, get_many = _STAMP.unpack_from, time.monotonic, sub.get_many
    while received < n:
        messages = get_many(1000, timeout=20)  # as the Redis consumer takes XREAD COUNT 1000
        if not messages:
            break
        now = clock()
        if first is None:
            first = now
        for message in messages:
            latencies.append(now - unpack(message.body)[0])
        received += len(messages)
    _report(received, latencies, first, clock())
    sub.destroy()


def role_zeps_pub(endpoint, n, rate):
    import gevent
    from zactors.patterns.zeps import Publisher
    pub = Publisher(endpoint, STREAM, timeout=30)
    sys.stdin.readline()  # go
    start = time.monotonic()
    publish = pub.publish
    for i in range(n):
        delay = _pace(i, start, rate)
        if delay:
            gevent.sleep(delay)
        publish(b"k.%d" % (i & 7), body(i))
    pub.flush(timeout=120)
    print(json.dumps({"start": start, "end": time.monotonic()}), flush=True)
    pub.close()


def role_redis_sub(port, n, from_start):
    import redis
    r = redis.Redis(port=port)
    last = "0-0" if from_start else "$"
    print("ready", flush=True)
    latencies, received, first = [], 0, None
    unpack, clock = _STAMP.unpack_from, time.monotonic
    while received < n:
        reply = r.xread({STREAM: last}, count=1000, block=20000)
        if not reply:
            break
        now = clock()
        if first is None:
            first = now
        entries = reply[0][1]
        for _, fields in entries:
            latencies.append(now - unpack(fields[b"b"])[0])
        received += len(entries)
        last = entries[-1][0]
    _report(received, latencies, first, clock())


def role_redis_pub(port, n, rate):
    import redis
    r = redis.Redis(port=port)
    sys.stdin.readline()
    start = time.monotonic()
    pipe = r.pipeline(transaction=False)
    batch = 1000 if not rate else max(1, int(rate / 1000))  # paced: a pipeline per millisecond or so
    for i in range(n):
        delay = _pace(i, start, rate)
        if delay:
            time.sleep(delay)
        pipe.xadd(STREAM, {"k": b"k.%d" % (i & 7), "b": body(i)})
        if len(pipe) >= batch:
            pipe.execute()
    if len(pipe):
        pipe.execute()
    print(json.dumps({"start": start, "end": time.monotonic()}), flush=True)


def role_push(endpoint, n):
    import zmq
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.connect(endpoint)
    sys.stdin.readline()
    start = time.monotonic()
    payload = b"x" * SIZE
    for _ in range(n):
        sock.send(payload)
    print(json.dumps({"start": start, "end": time.monotonic()}), flush=True)
    sock.close(linger=-1)


def role_pull(n):
    import zmq
    sock = zmq.Context.instance().socket(zmq.PULL)
    sock.bind("tcp://127.0.0.1:*")
    print(sock.last_endpoint.decode(), flush=True)
    print("ready", flush=True)
    received, first = 0, None
    while received < n:
        sock.recv()
        if first is None:
            first = time.monotonic()
        received += 1
    _report(received, [], first, time.monotonic())


# -- orchestration ------------------------------------------------------------------
def spawn(*args):
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", *map(str, args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def go(readers, start_publisher, timeout=30):
    """Once every reader process says "ready", start the publisher (``start_publisher()``
    returns its process) and tell it to go; returns (the publisher's JSON line, each
    reader's JSON line) once all have ended (``timeout`` s each)."""
    for proc in readers:
        assert proc.stdout.readline().strip() == "ready"
    publisher = start_publisher()
    publisher.stdin.write("go\n")
    publisher.stdin.flush()
    sent = json.loads(publisher.stdout.readline())
    results = [json.loads(proc.stdout.readline()) for proc in readers]
    for proc in readers + [publisher]:
        proc.wait(timeout)
    return sent, results


def fan(pub_args, sub_args, subscribers, n, pub_spawn=None):
    """Start ``subscribers`` subscriber processes, then the publisher (by ``pub_spawn``,
    default :func:`spawn`: another script may bring its own); per-message figures."""
    sent, results = go([spawn(*sub_args) for _ in range(subscribers)], lambda: (pub_spawn or spawn)(*pub_args))
    last = max(r["last"] for r in results)
    return {"rate": n / (last - sent["start"]), "lost": sum(n - r["received"] for r in results),
            "p50": max(r["p50"] or 0 for r in results), "p99": max(r["p99"] or 0 for r in results)}


def deliver(pub_role, sub_role, target, args, subs, fresh=None, pub_spawn=None):
    """One delivery row: the unpaced rate, then p50/p99 of a paced run (lost: both runs').
    ``fresh()``, if given, runs before each run (to empty the stream); ``pub_spawn`` as for :func:`fan`."""
    runs = []
    for n, rate in ((args.messages, 0), (int(args.rate * args.paced), args.rate)):
        if fresh is not None:
            fresh()
        runs.append(fan((pub_role, target, n, rate), (sub_role, target, n, 0), subs, n, pub_spawn))
    row, paced = runs
    row.update(p50=paced["p50"], p99=paced["p99"], lost=row["lost"] + paced["lost"])
    return row


def catch_up(sub_args, n):
    proc = spawn(*sub_args)
    assert proc.stdout.readline().strip() == "ready"
    result = json.loads(proc.stdout.readline())
    proc.wait(30)
    return {"rate": result["received"] / (result["last"] - result["first"]) if result["received"] > 1 else 0,
            "lost": n - result["received"]}


STACKS = ("raw", "zeps", "redis-aof", "redis-none", "jetstream", "ack", "pair", "redis-wait")
ROW = "%-32s %-16s %12s %10s %10s %6s %s"


def show(stack, run, row):
    """Print one measured row at once (the table at the end repeats it)."""
    print(ROW % (stack, run, "%.0f" % row["rate"],
                 "%.3f" % (row["p50"] * 1e3) if row.get("p50") is not None else "-",
                 "%.3f" % (row["p99"] * 1e3) if row.get("p99") is not None else "-",
                 row.get("lost", "-"),
                 "broker %.1f us CPU/msg" % row["broker_us"] if "broker_us" in row else ""), flush=True)


def zeps_rows(args):
    stack = "zactors ZEPS (fsync 100 ms)"
    rows = {}
    journal = tempfile.mkdtemp(prefix="zeps-bench-")
    broker = spawn("zeps_broker", journal)
    endpoint = broker.stdout.readline().strip()
    try:
        import psutil
        node = psutil.Process(broker.pid)
        for subs in args.fans:
            cpu = sum(node.cpu_times()[:2])
            row = rows["deliver %d sub" % subs] = deliver("zeps_pub", "zeps_sub", endpoint, args, subs)
            row["broker_us"] = (sum(node.cpu_times()[:2]) - cpu) / (args.messages + int(args.rate * args.paced)) * 1e6
            show(stack, "deliver %d sub" % subs, row)
    finally:
        broker.kill()
        broker.wait()
    if not args.replay_run:
        shutil.rmtree(journal, ignore_errors=True)
        return rows
    # replay: a fresh journal of --replay messages, then a late joiner from the start
    shutil.rmtree(journal, ignore_errors=True)
    broker = spawn("zeps_broker", journal)
    endpoint = broker.stdout.readline().strip()
    try:
        pub = spawn("zeps_pub", endpoint, args.replay, 0)
        pub.stdin.write("go\n")
        pub.stdin.flush()
        json.loads(pub.stdout.readline())
        pub.wait(60)
        rows["replay"] = catch_up(("zeps_sub", endpoint, args.replay, 1), args.replay)
        show(stack, "replay", rows["replay"])
    finally:
        broker.kill()
        broker.wait()
        shutil.rmtree(journal, ignore_errors=True)
    return rows


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(persistence):
    """A redis-server on loopback in a temp dir: (process, port, dir), or a reason string.

    ``persistence``: AOF with ``appendfsync everysec`` if true, or the ``appendfsync`` policy named.
    """
    server = shutil.which("redis-server")
    if server is None:
        return "redis-server not found (Debian: apt-get install redis-server)"
    try:
        import redis
    except ImportError:
        return "the redis client is not installed (pip install '.[bench]')"
    directory = tempfile.mkdtemp(prefix="zeps-bench-redis-")
    port = _free_port()
    options = ["--port", str(port), "--bind", "127.0.0.1", "--dir", directory, "--save", "",
               "--protected-mode", "yes", "--daemonize", "no", "--logfile", os.path.join(directory, "log")]
    fsync = persistence if isinstance(persistence, str) else "everysec"
    options += ["--appendonly", "yes", "--appendfsync", fsync] if persistence else ["--appendonly", "no"]
    proc = subprocess.Popen([server, *options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            redis.Redis(port=port).ping()
            return proc, port, directory
        except redis.ConnectionError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    shutil.rmtree(directory, ignore_errors=True)
    return "redis-server did not start on port %d" % port


def stop_redis(started):
    """Stop the server of ``started`` (what :func:`start_redis` returned) and remove its directory."""
    proc, _, directory = started
    proc.terminate()
    proc.wait(10)
    shutil.rmtree(directory, ignore_errors=True)


def redis_rows(args, persistence):
    started = start_redis(persistence)
    if isinstance(started, str):
        return started
    port = started[1]
    import redis
    stack = "Redis Streams (%s)" % ("AOF everysec" if persistence else "no persistence")
    rows = {}
    try:
        for subs in args.fans:
            row = rows["deliver %d sub" % subs] = deliver("redis_pub", "redis_sub", port, args, subs,
                                                          fresh=lambda: redis.Redis(port=port).delete(STREAM))
            show(stack, "deliver %d sub" % subs, row)
        if not args.replay_run:
            return rows
        redis.Redis(port=port).delete(STREAM)
        pub = spawn("redis_pub", port, args.replay, 0)
        pub.stdin.write("go\n")
        pub.stdin.flush()
        json.loads(pub.stdout.readline())
        pub.wait(120)
        rows["replay"] = catch_up(("redis_sub", port, args.replay, 1), args.replay)
        show(stack, "replay", rows["replay"])
    finally:
        stop_redis(started)
    return rows


def raw_rows(args):
    pull = spawn("pull", args.messages)
    endpoint = pull.stdout.readline().strip()
    assert pull.stdout.readline().strip() == "ready"
    push = spawn("push", endpoint, args.messages)
    push.stdin.write("go\n")
    push.stdin.flush()
    sent = json.loads(push.stdout.readline())
    got = json.loads(pull.stdout.readline())
    push.wait(30)
    pull.wait(30)
    rows = {"push->pull": {"rate": args.messages / (got["last"] - sent["start"]),
                           "lost": args.messages - got["received"]}}
    show("raw", "push->pull", rows["push->pull"])
    directory = tempfile.mkdtemp(prefix="zeps-bench-file-")
    try:
        frame = struct.Struct("<IIQd")
        payload = b"x" * SIZE
        buf = bytearray()
        start = time.perf_counter()
        with open(os.path.join(directory, "log"), "wb", buffering=0) as f:
            for i in range(args.replay):
                buf += frame.pack(SIZE, 0, i, 0.0)
                buf += payload
                if len(buf) >= 1 << 16:
                    f.write(buf)
                    buf.clear()
            f.write(buf)
        rows["file appends"] = {"rate": args.replay / (time.perf_counter() - start)}
        show("raw", "file appends", rows["file appends"])
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--messages", type=int, default=200000, help="messages per delivery run (default 200000)")
    parser.add_argument("--replay", type=int, default=1000000, help="messages to replay (default 1000000)")
    parser.add_argument("--rate", type=int, default=20000, help="paced rate for the latency runs (default 20000/s)")
    parser.add_argument("--paced", type=float, default=3.0, help="seconds of each paced run (default 3)")
    parser.add_argument("--stacks", default=",".join(STACKS),
                        help="comma-separated subset to run (ack: both acknowledgement levels beside Redis everysec "
                        "and always, _zeps_ack.py; pair, redis-wait: the replicated pair, zeps_pair.py; jetstream: "
                        "NATS JetStream, _jetstream.py)")
    parser.add_argument("--runs", default="deliver1,deliver10,replay,groups",
                        help="comma-separated subset of deliver1,deliver10,replay,groups (default: all)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds, the stacks interleaved in each; every figure is the median (default 3)")
    parser.add_argument("--quick", action="store_true", help="a short pass: 20000 messages, replay 50000, paced 0.5 s")
    zeps_groups.add_options(parser)
    add_deadline_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.messages, args.replay, args.paced = min(args.messages, 20000), min(args.replay, 50000), 0.5
    runs = subset(parser, "--runs", args.runs, ("deliver1", "deliver10", "replay", "groups"))
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    stacks = subset(parser, "--stacks", args.stacks, STACKS)
    args.group_stacks = subset(parser, "--group-stacks", args.group_stacks, zeps_groups.NAMES)
    args.fans = [n for n in (1, 10) if "deliver%d" % n in runs]
    args.replay_run = "replay" in runs
    if args.role:
        role, *rest = args.role
        (globals().get("role_" + role) or jetstream.ROLES[role])(*[int(x) if x.isdigit() else x for x in rest])
        return 0
    import zeps_pair  # the broker pair's rows (issue #23)
    args.catchup = args.replay
    steps = Steps(args.deadline, out=sys.stderr)  # the rows print themselves as measured
    load_average("start")
    print(ROW % ("stack", "run", "msg/s", "p50 ms", "p99 ms", "lost", ""), flush=True)  # rows print as measured
    what = "%d messages to reach every subscriber, then the replay of %d" % (args.messages, args.replay)
    rounds = {}  # stack -> its rows (or why not) in each round
    for n in range(args.rounds):  # interleaved: the machine's load drifts over every stack alike
        for key, stack, rows, *extra in (("raw", "raw", raw_rows), ("zeps", "zactors ZEPS (fsync 100 ms)", zeps_rows),
                                         ("redis-aof", "Redis Streams (AOF everysec)", redis_rows, True),
                                         ("redis-none", "Redis Streams (no persistence)", redis_rows, False),
                                         ("pair", zeps_pair.PAIR_STACK, zeps_pair.pair_rows),
                                         ("redis-wait", zeps_pair.REDIS_STACK, zeps_pair.redis_wait_rows),
                                         ("jetstream", "NATS JetStream (file)", jetstream.rows, spawn, fan, catch_up,
                                          show)):
            if key in stacks:
                name = stack if args.rounds == 1 else "%s, round %d" % (stack, n + 1)
                result = steps.run(name, what, rows, args, *extra)
                rounds.setdefault(stack, []).append("failed: %s" % steps.results[name]["error"]
                                                    if result is None else result)
        if "ack" in stacks:
            import _zeps_ack as zeps_ack
            for stack, rows in zeps_ack.run(args, steps).items():
                rounds.setdefault(stack, []).append(rows)
    table = {stack: median_rows(rows) for stack, rows in rounds.items()}
    print("\n%d messages of %d bytes per delivery run; latency at %d msg/s paced; replay of %d; medians of %d "
          "interleaved round(s)" % (args.messages, SIZE, args.rate, args.replay, args.rounds))
    print(ROW % ("stack", "run", "msg/s", "p50 ms", "p99 ms", "lost", ""))
    for stack, rows in table.items():
        if isinstance(rows, str):
            print("%-32s skipped: %s" % (stack, rows))
            continue
        for run, row in rows.items():
            show(stack, run, row)
    if "groups" in runs:  # consumer groups: benchmarks/zeps_groups.py, same run
        print()
        zeps_groups.run(args, steps)
    zeps, aof = table.get("zactors ZEPS (fsync 100 ms)"), table.get("Redis Streams (AOF everysec)")
    if isinstance(zeps, dict) and isinstance(aof, dict):
        ratios = ["%s x%.2f" % (run, zeps[run]["rate"] / aof[run]["rate"]) for run in zeps if run in aof]
        print("\nZEPS / Redis AOF: %s (targets: deliver 1 sub >= 1.5, replay >= 2)" % ", ".join(ratios))
    if "ack" in stacks:
        print("\n" + "\n".join("ack levels: " + line for line in zeps_ack.ratios(table)))
    for line in zeps_pair.ratios(table):
        print(line)
    load_average("end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
