"""ZEPS broker pair benchmark rows (issue #23), run by ``benchmarks/zeps.py`` (stacks ``pair`` and
``redis-wait``) or alone: ``python benchmarks/zeps_pair.py [--quick]``.

- replicated publish -> deliver, 1 subscriber: a primary and a backup broker (each its own process,
  ``ack="replicated"``: a message is delivered, and PING-OK'd, only once the passive has written it);
  messages/s unpaced and p50/p99 at the paced ``--rate``, as the single broker's row of zeps.py
  (target: >= 0.6x the single broker in the same run);
- Redis Streams with a real replica: pipelined ``XADD`` (1000 per pipeline) each pipeline ended by
  ``WAIT 1 0`` (the replica has it), a primary and a replica ``redis-server`` (target: ZEPS pair >= 1.5x);
- failover: SIGKILL of the active under a paced load (an idempotent publisher, a subscriber, both given
  the pair): seconds from the kill to the first delivery by the new active, messages lost and duplicated;
- catch-up: ``--catchup`` messages (default 1,000,000) journaled by a lone primary, then a fresh backup
  copies them while ``--rate`` msg/s flow to another stream: messages/s until it is ready (may take over);
  the row fails if the backup ever says it is ready without all of them.

Every step runs under the harness's deadline; each row is printed as it is measured.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import zeps as base  # noqa: E402 - after the path
from _harness import Steps, add_deadline_option, wait_until  # noqa: E402

PAIR_STACK = "zactors ZEPS pair (replicated)"
REDIS_STACK = "Redis Streams + WAIT 1 0 (replica)"


# -- roles (each in its own process) ------------------------------------------------
def role_pair_broker(journal, role, pair_bind, peer, policy="degrade"):
    import gevent
    from zactors.patterns.zeps.broker import Broker
    broker = Broker(journal, "tcp://127.0.0.1:*", fsync=0.1, role=role, pair_endpoint=pair_bind, peer=peer,
                    ack="replicated", on_passive_lost=policy, passive_timeout=0.5, heartbeat=0.25, name=role)
    print(broker.endpoint, flush=True)
    gevent.get_hub().join()


def role_redis_wait_pub(port, n, rate):
    import redis
    r = redis.Redis(port=port)
    sys.stdin.readline()
    start = time.monotonic()
    pipe = r.pipeline(transaction=False)
    batch = 1000 if not rate else max(1, int(rate / 1000))
    for i in range(n):
        delay = base._pace(i, start, rate)
        if delay:
            time.sleep(delay)
        pipe.xadd(base.STREAM, {"k": b"k.%d" % (i & 7), "b": base.body(i)})
        if len(pipe) >= batch:
            pipe.execute_command("WAIT", 1, 0)
            pipe.execute()
    if len(pipe):
        pipe.execute_command("WAIT", 1, 0)
        pipe.execute()
    print(json.dumps({"start": start, "end": time.monotonic()}), flush=True)


# -- orchestration ------------------------------------------------------------------
def spawn(*args):
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", *map(str, args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


class Pair:
    """A primary and a backup broker process on fresh journals; ipc pair link."""

    def __init__(self, start_backup=True):
        self.dir = tempfile.mkdtemp(prefix="zeps-pair-bench-")
        self.links = {r: "ipc://%s/%s.pair" % (self.dir, r) for r in ("primary", "backup")}
        self.procs, self.endpoints = {}, {}
        self.start("primary")
        if start_backup:
            self.start("backup")

    def start(self, role):
        other = "backup" if role == "primary" else "primary"
        proc = self.procs[role] = spawn("pair_broker", os.path.join(self.dir, role), role, self.links[role],
                                        self.links[other])
        self.endpoints[role] = proc.stdout.readline().strip()

    @property
    def endpoint(self):
        return ",".join(self.endpoints[r] for r in ("primary", "backup") if r in self.endpoints)

    def info(self, role):
        from zactors.patterns.zeps.client import query
        return query(self.endpoints[role], timeout=5)

    def ready(self, role):
        pair = self.info(role)["pair"]
        return pair["state"] == "passive" and pair["ready"]

    def kill(self, role):
        proc = self.procs.pop(role)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def close(self):
        for role in list(self.procs):
            self.kill(role)
        shutil.rmtree(self.dir, ignore_errors=True)


def pair_rows(args):
    rows = {}
    if args.fans:
        pair = Pair()
        try:
            wait_until(lambda: pair.ready("backup"), 30, "the backup to follow the primary")
            for subs in args.fans:
                run = "deliver %d sub" % subs
                row = rows[run] = base.deliver("zeps_pub", "zeps_sub", pair.endpoint, args, subs)
                base.show(PAIR_STACK, run, row)
        finally:
            pair.close()
    rows["failover"] = failover(args)
    base.show(PAIR_STACK, "failover", rows["failover"])
    print("  failover: service back %.2f s after SIGKILL (target < 2 s), %d lost, %d duplicated"
          % (rows["failover"]["seconds"], rows["failover"]["lost"], rows["failover"]["dup"]), flush=True)
    rows["catch-up"] = catch_up(args)
    base.show(PAIR_STACK, "catch-up", rows["catch-up"])
    return rows


def failover(args):
    """Kill the active under a paced load; time to the first delivery by the new active; lost, dup."""
    import gevent
    from zactors.patterns.zeps import Publisher, Subscriber
    pair = Pair()
    got, arrivals, stop = [], [], []
    try:
        wait_until(lambda: pair.ready("backup"), 30, "the backup to follow the primary")
        options = dict(heartbeat=0.2, expiry=0.8, timeout=10)
        pub = Publisher(pair.endpoint, base.STREAM, idempotent=True, **options)
        sub = Subscriber(pair.endpoint, base.STREAM, from_seq=1, wait=True, **options,
                         callback=lambda m: (got.append(m.body), arrivals.append((time.monotonic(),
                                                                                  sub.stats["reattached"]))))
        published = [0]

        def publish():
            while not stop:
                for _ in range(max(1, args.rate // 1000)):
                    published[0] += 1
                    pub.publish("k", b"%d" % published[0])
                gevent.sleep(0.001)

        worker = gevent.spawn(publish)
        wait_until(lambda: len(got) > args.rate // 2, 30, "traffic before the kill", sleep=gevent.sleep)
        peerings = sub.stats["reattached"]
        killed = time.monotonic()
        pair.kill("primary")
        wait_until(lambda: arrivals[-1][1] > peerings, 30, "the first delivery by the new active",
                   sleep=gevent.sleep)
        back = next(t for t, n in arrivals if n > peerings) - killed
        after = len(got)
        wait_until(lambda: len(got) > after + args.rate // 4, 30, "traffic after the failover", sleep=gevent.sleep)
        stop.append(True)
        worker.join()
        pub.flush(timeout=30)
        wait_until(lambda: len(got) >= published[0], 30, "every message at the subscriber", sleep=gevent.sleep)
        numbers = [int(b) for b in got]
        sub.destroy()
        pub.close()
        return {"rate": published[0] / (time.monotonic() - killed + 1e-9), "seconds": back,
                "lost": len(set(range(1, published[0] + 1)) - set(numbers)), "dup": len(numbers) - len(set(numbers))}
    finally:
        stop.append(True)
        pair.close()


def catch_up(args):
    """--catchup messages on a lone primary; a fresh backup copies them while --rate msg/s flow: msgs/s
    until it is ready (may take over).  Fails if it ever says ready without all of them."""
    import gevent
    from zactors.patterns.zeps import Publisher
    pair = Pair(start_backup=False)
    stop = []
    try:
        pub = base.spawn("zeps_pub", pair.endpoint, args.catchup, 0)
        pub.stdin.write("go\n")
        pub.stdin.flush()
        json.loads(pub.stdout.readline())
        pub.wait(600)
        live = Publisher(pair.endpoint, "live", idempotent=True)
        published = [0]

        def publish():   # paced at --rate while the backup copies
            begun = time.monotonic()
            while not stop:
                due = int((time.monotonic() - begun) * args.rate)
                while published[0] < due:
                    published[0] += 1
                    live.publish("k", b"%d" % published[0])
                gevent.sleep(0.005)

        worker = gevent.spawn(publish)
        started = time.monotonic()
        pair.start("backup")
        looks = []

        def ready():
            info = pair.info("backup")
            looks.append((info["pair"]["state"] == "passive" and info["pair"]["ready"],
                          info["streams"].get(base.STREAM, {}).get("last_seq", 0)))
            return looks[-1][0]
        wait_until(ready, args.deadline, "the backup to copy %d messages" % args.catchup, interval=0.05,
                   sleep=gevent.sleep)
        elapsed = time.monotonic() - started
        stop.append(True)
        worker.join()
        live.flush(timeout=30)
        live.close()
        copied = looks[-1][1]
        early = [last for is_ready, last in looks if is_ready and last < args.catchup]
        if early:
            raise AssertionError("the backup said it was ready holding %d of %d messages" % (early[0], args.catchup))
        print("  catch-up: %d messages copied at %d msg/s while %d msg/s flowed; not ready before (%d looks)"
              % (copied, copied / elapsed, published[0] / elapsed, len(looks)), flush=True)
        return {"rate": copied / elapsed, "lost": args.catchup - copied}
    finally:
        stop.append(True)
        pair.close()


def start_redis_replica(port):
    """A redis-server replica of the one on ``port``: (process, port, dir), or a reason."""
    import redis
    directory = tempfile.mkdtemp(prefix="zeps-bench-replica-")
    replica_port = base._free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(replica_port), "--bind", "127.0.0.1", "--dir", directory,
                             "--save", "", "--appendonly", "no", "--replicaof", "127.0.0.1", str(port),
                             "--logfile", os.path.join(directory, "log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _answers(replica_port), 10, "the Redis replica to start")
        wait_until(lambda: redis.Redis(port=replica_port).info("replication").get("master_link_status") == "up",
                   30, "the Redis replica's initial sync")
        redis.Redis(port=port).execute_command("WAIT", 1, 0)    # the first WAIT after a sync takes seconds
    except (TimeoutError, OSError):
        proc.kill()
        proc.wait()
        return "the redis replica did not connect"
    return proc, replica_port, directory


def _answers(port):
    import redis
    try:
        return redis.Redis(port=port).ping()
    except redis.ConnectionError:
        return False


def redis_wait_rows(args):
    started = base.start_redis(False)
    if isinstance(started, str):
        return started
    proc, port, directory = started
    replica = start_redis_replica(port)
    if isinstance(replica, str):
        proc.kill()
        return replica
    import redis
    rows = {}
    try:
        for subs in args.fans:
            run = "deliver %d sub" % subs
            row = rows[run] = base.deliver("redis_wait_pub", "redis_sub", port, args, subs,  # this module's WAIT pub
                                           fresh=lambda: redis.Redis(port=port).delete(base.STREAM), pub_spawn=spawn)
            base.show(REDIS_STACK, run, row)
    finally:
        for p, d in ((replica[0], replica[2]), (proc, directory)):
            p.terminate()
            p.wait(10)
            shutil.rmtree(d, ignore_errors=True)
    return rows


def ratios(table):
    """The issue's targets, from one run's table."""
    pair, single, wait = table.get(PAIR_STACK), table.get("zactors ZEPS (fsync 100 ms)"), table.get(REDIS_STACK)
    out = []
    if isinstance(pair, dict) and isinstance(single, dict) and "deliver 1 sub" in pair and "deliver 1 sub" in single:
        out.append("pair / single broker x%.2f (target >= 0.6)" % (pair["deliver 1 sub"]["rate"]
                                                                   / single["deliver 1 sub"]["rate"]))
    if isinstance(pair, dict) and isinstance(wait, dict) and "deliver 1 sub" in pair and "deliver 1 sub" in wait:
        out.append("pair / Redis WAIT x%.2f (target >= 1.5)" % (pair["deliver 1 sub"]["rate"]
                                                                / wait["deliver 1 sub"]["rate"]))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="a short pass (small counts)")
    parser.add_argument("--messages", type=int, default=200000)
    parser.add_argument("--rate", type=int, default=10000)
    parser.add_argument("--paced", type=float, default=3.0)
    parser.add_argument("--catchup", type=int, default=1000000)
    add_deadline_option(parser)
    args = parser.parse_args()
    if args.role:
        role, *rest = args.role
        fn = globals().get("role_" + role) or getattr(base, "role_" + role)
        fn(*[int(x) if x.isdigit() else x for x in rest])
        return 0
    if args.quick:
        args.messages, args.paced, args.catchup, args.rate = 5000, 0.5, 20000, 2000
    args.fans = [1]
    steps = Steps(args.deadline, out=sys.stderr)
    print(base.ROW % ("stack", "run", "msg/s", "p50 ms", "p99 ms", "lost", ""), flush=True)
    table = {}
    for stack, func in (("zactors ZEPS (fsync 100 ms)", base.zeps_rows), (PAIR_STACK, pair_rows),
                        (REDIS_STACK, redis_wait_rows)):
        args.replay_run = False
        result = steps.run(stack, "%d messages to the subscriber" % args.messages, func, args)
        table[stack] = "failed: %s" % steps.results[stack]["error"] if result is None else result
        if isinstance(table[stack], str):
            print("%-32s skipped: %s" % (stack, table[stack]), flush=True)
    for line in ratios(table):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
