"""ZEPS consumer groups benchmark: 4 members acking every 100 B message, beside Redis Streams and JetStream.

Run: ``python benchmarks/zeps_groups.py [--messages N] [--quick]`` (also run by ``benchmarks/zeps.py``,
``--runs groups``).

Every party is its own process on loopback TCP.  4 members join the group
first; then one publisher publishes ``--messages`` messages of 100 bytes as
fast as it can; each member takes its share and acknowledges every message.
Rate = messages / (time from the first publish until the last member handled
its last message); lost = messages - handled (must be 0).

- zactors: the ZEPS broker (fsync every 100 ms, ack level ``written``), a
  group with 4 :class:`~zactors.patterns.zeps.consumer.Consumer` members,
  each taking up to 100 queued messages at a time (``get_many``, as the
  Redis members' ``COUNT 100``) and acknowledging every one (``ack()``: the
  consumer sends them as ranges).
- Redis Streams: the Debian ``redis-server``, AOF ``appendfsync everysec``
  (the same setting: written at once, fsynced every second at most);
  pipelined ``XADD``; 4 ``XREADGROUP COUNT 100`` consumers, each batch's
  ``XACK`` pipelined.
- NATS JetStream (:mod:`jetstream`): a WorkQueue stream with file storage,
  one durable pull consumer with explicit ack; 4 members ``fetch(100)`` and
  ack each message; the publisher awaits the server's acknowledgements, 1000
  in flight.
- Redelivery after a kill: a ZEPS member takes a message and is killed -9;
  the time until another member gets it, beside the group's ``ack_wait``.

Target: ZEPS >= 1.5x the faster of Redis and JetStream.  Rows print as they
are measured; every step has a deadline (``_harness.py``).

Six processes share two cores here, so the row is bound by their total CPU,
and a member's CPU per message depends on how many messages each of its
wake-ups brings (a wake-up costs about 100-200 us of CPU, a message about
2.5 us): runs where the members got a few messages per wake-up cost more
per message and ran slower (57k vs 78k msg/s on a quiet machine when the
broker handed each member runs of 32).  The broker's own CPU per message,
which load hardly moves: ``zeps_groups_hot_path.py`` (or its instruction
count under callgrind).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import _jetstream as jetstream  # noqa: E402 - after the path
from _harness import Steps, add_deadline_option, subset  # noqa: E402

STREAM = "bench"
MEMBERS = 4
ROW = "%-40s %-22s %12s %8s"


# -- roles (each runs in its own process) ----------------------------------------------
def role_zeps_member(endpoint, idle=2):
    from zactors.patterns.zeps.consumer import Consumer
    consumer = Consumer(endpoint, STREAM, "work", window=1 << 20, timeout=30)
    print("ready", flush=True)
    received, first, last = 0, None, None
    get_many = consumer.get_many
    while True:
        messages = get_many(100, float(idle))   # as the Redis member takes XREADGROUP COUNT 100
        if not messages:
            if received:
                break
            continue
        for message in messages:
            message.ack()                        # each one acknowledged (batched to the broker as ranges)
        received += len(messages)
        last = time.monotonic()
        if first is None:
            first = last
    print(json.dumps({"received": received, "first": first, "last": last}), flush=True)
    consumer.destroy()


def role_zeps_holder(endpoint, ack_wait_ms):
    """Join, take one message, print that it holds it, never ack (the orchestrator kills it)."""
    from zactors.patterns.zeps.consumer import Consumer
    consumer = Consumer(endpoint, "redeliver", "work", ack_wait=int(ack_wait_ms) / 1000.0, timeout=30)
    print("ready", flush=True)
    message = consumer.get(60)
    print(json.dumps({"seq": message.seq, "at": time.monotonic()}), flush=True)
    time.sleep(3600)


def role_zeps_taker(endpoint, ack_wait_ms):
    from zactors.patterns.zeps.consumer import Consumer
    consumer = Consumer(endpoint, "redeliver", "work", ack_wait=int(ack_wait_ms) / 1000.0, timeout=30)
    print("ready", flush=True)
    message = consumer.get(60)
    now = time.monotonic()
    message.ack()
    print(json.dumps({"seq": message.seq, "at": now, "deliveries": message.deliveries}), flush=True)
    consumer.destroy()


def role_redis_member(port, idle=2):
    import redis
    r = redis.Redis(port=port)
    name = "m%d" % os.getpid()
    print("ready", flush=True)
    received, first, last = 0, None, None
    while True:
        reply = r.xreadgroup("work", name, {STREAM: ">"}, count=100, block=int(idle) * 1000)
        if not reply or not reply[0][1]:
            if received:
                break
            continue
        entries = reply[0][1]
        pipe = r.pipeline(transaction=False)
        pipe.xack(STREAM, "work", *[entry_id for entry_id, _ in entries])
        pipe.execute()
        received += len(entries)
        last = time.monotonic()
        if first is None:
            first = last
    print(json.dumps({"received": received, "first": first, "last": last}), flush=True)


# -- orchestration ---------------------------------------------------------------------
def spawn(*args, script=None):
    return subprocess.Popen([sys.executable, script or os.path.abspath(__file__), "--role", *map(str, args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _base(*args):
    return spawn(*args, script=os.path.join(HERE, "zeps.py"))


def share(members, publisher, n):
    """Members ready, then the publisher: the group row."""
    import zeps as base

    sent, results = base.go(members, lambda: publisher, 60)
    handled = sum(r["received"] for r in results)
    last = max(r["last"] or 0 for r in results)
    return {"rate": handled / (last - sent["start"]) if handled else 0.0, "lost": n - handled,
            "shares": [r["received"] for r in results]}


def show(stack, run, row):
    print(ROW % (stack, run, "%.0f" % row["rate"] if "rate" in row else "-", row.get("lost", "-"))
          + ("  shares %s" % row["shares"] if "shares" in row else "") + ("  %s" % row["note"] if "note" in row
                                                                            else ""), flush=True)


def zeps_rows(args):
    journal = tempfile.mkdtemp(prefix="zeps-bench-groups-")
    broker = _base("zeps_broker", journal)
    endpoint = broker.stdout.readline().strip()
    rows = {}
    try:
        members = [spawn("zeps_member", endpoint) for _ in range(MEMBERS)]
        rows["4 members, ack each"] = row = share(members, _base("zeps_pub", endpoint, args.messages, 0),
                                                  args.messages)
        show("zactors ZEPS group (fsync 100 ms)", "4 members, ack each", row)
        ack_wait = 5000   # the kill comes first; the broker sees the connection end, or the wait runs out
        holder = spawn("zeps_holder", endpoint, ack_wait)
        assert holder.stdout.readline().strip() == "ready"
        from zactors.patterns.zeps.client import Publisher
        p = Publisher(endpoint, "redeliver")
        p.publish(b"k", b"x" * 100)
        p.flush()
        p.close()
        held = json.loads(holder.stdout.readline())
        taker = spawn("zeps_taker", endpoint, ack_wait)
        assert taker.stdout.readline().strip() == "ready"
        killed = time.monotonic()
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        got = json.loads(taker.stdout.readline())
        taker.wait(30)
        rows["redelivery after kill -9"] = row = {
            "note": "seq %d redelivered (delivery %d) %.0f ms after its first delivery, %.0f ms after the kill; "
                    "ack_wait %d ms" % (got["seq"], got["deliveries"], (got["at"] - held["at"]) * 1e3,
                                        (got["at"] - killed) * 1e3, ack_wait), "ok": got["seq"] == held["seq"]}
        show("zactors ZEPS group (fsync 100 ms)", "redelivery after kill -9", row)
    finally:
        broker.kill()
        broker.wait()
    return rows


def redis_rows(args):
    import zeps as base
    started = base.start_redis(True)
    if isinstance(started, str):
        raise RuntimeError(started)
    proc, port, directory = started
    import redis
    try:
        r = redis.Redis(port=port)
        r.delete(STREAM)
        r.xgroup_create(STREAM, "work", id="$", mkstream=True)
        members = [spawn("redis_member", port) for _ in range(MEMBERS)]
        row = share(members, _base("redis_pub", port, args.messages, 0), args.messages)
        show("Redis Streams (AOF everysec)", "4 members, ack each", row)
        return {"4 members, ack each": row}
    finally:
        proc.kill()
        proc.wait()


def jetstream_rows(args):
    started = jetstream.start_nats()
    if isinstance(started, str):
        raise RuntimeError(started)
    port = started[1]
    try:
        setup = spawn("js_setup", port, 1)
        assert setup.stdout.readline().strip() == "ok"
        setup.wait(30)
        members = [spawn("js_member", port) for _ in range(MEMBERS)]
        row = share(members, spawn("js_pub", port, args.messages), args.messages)
        show("NATS JetStream (file, WorkQueue)", "4 members, ack each", row)
        return {"4 members, ack each": row}
    finally:
        jetstream.stop_nats(started)


STACKS = (("zeps", "zactors ZEPS group (fsync 100 ms)", zeps_rows),
          ("redis", "Redis Streams (AOF everysec)", redis_rows),
          ("jetstream", "NATS JetStream (file, WorkQueue)", jetstream_rows))
NAMES = tuple(key for key, _stack, _rows in STACKS)


def run(args, steps=None):
    """Every stack's rows (printed as measured), then the ratio; returns {stack: rows or "failed: ..."}."""
    steps = steps or Steps(args.deadline, out=sys.stderr)
    print(ROW % ("stack", "run", "msg/s", "lost"), flush=True)
    table = {}
    for key, stack, rows in STACKS:
        if key in args.group_stacks:
            result = steps.run(stack, "%d messages shared by %d acking members" % (args.messages, MEMBERS),
                               rows, args)
            table[stack] = "failed: %s" % steps.results[stack]["error"] if result is None else result
    ours = table.get(STACKS[0][1])
    anchors = [table[stack]["4 members, ack each"]["rate"] for _, stack, _ in STACKS[1:]
               if isinstance(table.get(stack), dict)]
    if isinstance(ours, dict) and anchors:
        print("ZEPS group / the faster anchor: x%.2f (target >= 1.5)" % (ours["4 members, ack each"]["rate"]
                                                                          / max(anchors)), flush=True)
    return table


def add_options(parser):
    parser.add_argument("--group-stacks", default=",".join(NAMES),
                        help="comma-separated subset of %s (default: all)" % ", ".join(NAMES))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--messages", type=int, default=200000, help="messages shared (default 200000)")
    parser.add_argument("--quick", action="store_true", help="a short pass: 5000 messages")
    add_options(parser)
    add_deadline_option(parser)
    args = parser.parse_args()
    if args.role:
        role, *rest = args.role
        func = globals().get("role_" + role) or jetstream.ROLES[role]
        func(*[int(x) if x.isdigit() else x for x in rest])
        return 0
    if args.quick:
        args.messages = 5000
    args.group_stacks = subset(parser, "--group-stacks", args.group_stacks, NAMES)
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
