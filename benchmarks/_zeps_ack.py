"""ZEPS acknowledgement levels beside Redis Streams' fsync policies, in one run (issue #19).

Rows for ``benchmarks/zeps.py`` (the ``ack`` stack, in its default run; ``--stacks ack`` for these
rows alone; ``--quick`` for a short pass).  The +-5% check of ``written`` mode against an older commit
is ``python benchmarks/compare.py 03f311a``.

Rows, each publish -> journal -> deliver with ``zeps.py``'s publisher and
subscriber processes (messages/s unpaced, p50/p99 at the paced ``--rate``):

- ZEPS ``ack="written"`` and ``ack="synced"`` (fsync every 100 ms, as the
  ``zeps`` rows; with ``synced`` a message is delivered, and PING-OK sent,
  only once an fsync covered it: group commit, one fsync per write round);
- Redis Streams with AOF ``appendfsync everysec`` and ``appendfsync always``
  (a real ``redis-server`` started here, as ``zeps.py``'s Redis rows).

Then the ratios the issue sets: synced/written throughput (>= 0.8), synced
against Redis ``always`` (>= 1.5x), the synced p50 (< 5 ms).  Journals and
Redis directories are temporary directories on the disk of ``TMPDIR`` (they
must be on a real disk, not tmpfs, for fsync to cost what it costs).
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]

import zeps  # noqa: E402 - after the path: the roles, deliver() and start_redis are zeps.py's

WRITTEN = "zactors ZEPS (ack written)"
SYNCED = "zactors ZEPS (ack synced)"
REDIS_EVERYSEC = "Redis Streams (AOF everysec)"
REDIS_ALWAYS = "Redis Streams (AOF always)"


def role_ack_broker(journal, ack):
    import gevent
    from zactors.patterns.zeps.broker import Broker
    broker = Broker(journal, "tcp://127.0.0.1:*", fsync=0.1, ack=ack)
    print(broker.endpoint, flush=True)
    gevent.get_hub().join()


def _spawn_broker(journal, ack):
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "ack_broker", journal, ack],
                            stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def zeps_ack_rows(args, ack):
    rows = {}
    for subs in args.fans:
        journal = tempfile.mkdtemp(prefix="zeps-bench-ack-")  # a fresh journal per row: same start for both
        broker, endpoint = _spawn_broker(journal, ack)
        try:
            rows["deliver %d sub" % subs] = row = zeps.deliver("zeps_pub", "zeps_sub", endpoint, args, subs)
            zeps.show(WRITTEN if ack == "written" else SYNCED, "deliver %d sub" % subs, row)
        finally:
            broker.kill()
            broker.wait()
            shutil.rmtree(journal, ignore_errors=True)
    return rows


def redis_fsync_rows(args, appendfsync):
    started = zeps.start_redis(appendfsync)
    if isinstance(started, str):
        return started
    port = started[1]
    import redis
    rows = {}
    try:
        for subs in args.fans:
            redis.Redis(port=port).delete(zeps.STREAM)
            rows["deliver %d sub" % subs] = row = zeps.deliver("redis_pub", "redis_sub", port, args, subs)
            zeps.show(REDIS_ALWAYS if appendfsync == "always" else REDIS_EVERYSEC, "deliver %d sub" % subs, row)
    finally:
        zeps.stop_redis(started)
    return rows


def ratios(table):
    """The issue's three targets, from the rows of one run (a line each; '-' where a row is missing)."""
    written, synced, always = (table.get(k) for k in (WRITTEN, SYNCED, REDIS_ALWAYS))
    lines = []
    for run in (synced or {}):
        if not isinstance(synced, dict):
            break
        s = synced[run]
        w = written.get(run) if isinstance(written, dict) else None
        a = always.get(run) if isinstance(always, dict) else None
        lines.append("%s: synced/written x%s (target >= 0.8), synced/Redis always x%s (target >= 1.5), "
                     "synced p50 %s ms (target < 5)" % (
                         run, "%.2f" % (s["rate"] / w["rate"]) if w else "-",
                         "%.2f" % (s["rate"] / a["rate"]) if a else "-",
                         "%.3f" % (s["p50"] * 1e3) if s.get("p50") is not None else "-"))
    return lines


def run(args, steps):
    """Every row of this module, each a step of ``zeps.py``'s run; {stack: rows or reason}; prints the ratios."""
    table = {}
    for stack, func, level in ((WRITTEN, zeps_ack_rows, "written"), (SYNCED, zeps_ack_rows, "synced"),
                               (REDIS_EVERYSEC, redis_fsync_rows, "everysec"),
                               (REDIS_ALWAYS, redis_fsync_rows, "always")):
        result = steps.run(stack, "%d messages to reach every subscriber, then %gs paced" % (
            args.messages, args.paced), func, args, level)
        table[stack] = "failed: %s" % steps.results[stack]["error"] if result is None else result
    for line in ratios(table):
        print("ack levels: " + line, flush=True)
    return table


def main():
    """Only the roles this module's rows start as processes (``--role NAME ARGS...``)."""
    if sys.argv[1:2] != ["--role"]:
        print("_zeps_ack.py is a part of benchmarks/zeps.py: run python benchmarks/zeps.py --stacks ack "
              "(the +-5%% check: benchmarks/compare.py)", file=sys.stderr)
        return 2
    role, *rest = sys.argv[2:]
    globals()["role_" + role](*rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
