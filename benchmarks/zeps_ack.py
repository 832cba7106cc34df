"""ZEPS acknowledgement levels beside Redis Streams' fsync policies, in one run (issue #19).

Run through ``benchmarks/zeps.py`` (the ``ack`` stack, in its default run;
``--stacks ack`` for these rows alone; ``--quick`` for a short pass), or as
``python benchmarks/zeps_ack.py --baseline REV`` for the +-5% check of
``written`` mode against an older commit (see :func:`baseline`).

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
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]

import zeps  # noqa: E402 - after the path: the roles, fan() and start_redis are zeps.py's

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


def _deliver(pub_role, sub_role, target, args, subs):
    """One delivery row: the unpaced rate, then p50/p99 of a paced run."""
    row = zeps.fan((pub_role, target, args.messages, 0), (sub_role, target, args.messages, 0), subs, args.messages)
    paced_n = int(args.rate * args.paced)
    paced = zeps.fan((pub_role, target, paced_n, args.rate), (sub_role, target, paced_n, 0), subs, paced_n)
    row.update(p50=paced["p50"], p99=paced["p99"], lost=row["lost"] + paced["lost"])
    return row


def zeps_ack_rows(args, ack):
    rows = {}
    for subs in args.fans:
        journal = tempfile.mkdtemp(prefix="zeps-bench-ack-")  # a fresh journal per row: same start for both
        broker, endpoint = _spawn_broker(journal, ack)
        try:
            rows["deliver %d sub" % subs] = row = _deliver("zeps_pub", "zeps_sub", endpoint, args, subs)
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
    proc, port, directory = started
    import redis
    rows = {}
    try:
        for subs in args.fans:
            redis.Redis(port=port).delete(zeps.STREAM)
            rows["deliver %d sub" % subs] = row = _deliver("redis_pub", "redis_sub", port, args, subs)
            zeps.show(REDIS_ALWAYS if appendfsync == "always" else REDIS_EVERYSEC, "deliver %d sub" % subs, row)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(directory, ignore_errors=True)
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


# -- the +-5% check against an older commit -------------------------------------------
def baseline(rev, zeps_args, rounds=3):
    """Run ``zeps.py --stacks zeps`` (ack ``written``, the only level before #19) on the commit ``rev``
    and on this tree, interleaved ``rounds`` times, printing every run; then per row the median of each
    side and their ratio (this tree / then), for the rule that no figure gets worse by more than 5%.

    The old tree is exported with ``git archive`` and installed (no dependencies: this venv has them)
    into a temporary directory that goes first on its PYTHONPATH.
    """
    work = tempfile.mkdtemp(prefix="zeps-baseline-")
    tree, target = os.path.join(work, "tree"), os.path.join(work, "site")
    try:
        os.makedirs(tree)
        archive = subprocess.run(["git", "-C", ROOT, "archive", rev], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--target", target, tree], check=True)
        sides = (("%s (then)" % rev, os.path.join(tree, "benchmarks", "zeps.py"), dict(os.environ, PYTHONPATH=target)),
                 ("this tree", os.path.join(HERE, "zeps.py"), dict(os.environ)))
        figures = {name: [] for name, _, _ in sides}
        for name, _, env in sides:
            probe = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=work, capture_output=True, text=True,
                                   check=True).stdout.strip()
            print("== %s: zactors from %s" % (name, probe), flush=True)
        for round_ in range(1, rounds + 1):
            for name, script, env in sides:
                print("== round %d of %d: %s (load average %s)" % (round_, rounds, name, os.getloadavg()), flush=True)
                out = subprocess.run([sys.executable, script, "--stacks", "zeps", *zeps_args], env=env, cwd=work,
                                     stdout=subprocess.PIPE, text=True, check=True).stdout
                print(out, flush=True)
                figures[name].append(_rows(out))
        then, now = figures.values()
        for run_name in then[0]:
            if all(run_name in r for r in then + now):
                rate0, rate1 = (statistics.median(r[run_name][0] for r in side) for side in (then, now))
                p50_0, p50_1 = ([r[run_name][1] for r in side] for side in (then, now))
                print("written mode, %s: median msg/s %.0f then, %.0f now: x%.3f; p50 ms then %s, now %s "
                      "(rule: no figure worse by more than 5%%)" % (run_name, rate0, rate1, rate1 / rate0,
                                                                     ", ".join(p50_0), ", ".join(p50_1)), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


_PROBE = "import zactors.patterns.zeps.broker as b; print(b.__file__)"


def _rows(out):
    """{run: (msg/s, p50 ms text)} from the table at the end of a zeps.py run (its last row of each run)."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("zactors ZEPS"):
            parts = line[32:].split()
            if len(parts) >= 4 and parts[-4].replace(".", "").isdigit():
                rows[" ".join(parts[:-4])] = (float(parts[-4]), parts[-3])
    return rows


def main():
    if sys.argv[1:2] == ["--role"]:
        role, *rest = sys.argv[2:]
        globals()["role_" + role](*rest)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REV", required=True,
                        help="compare zeps.py --stacks zeps (ack written) on commit REV with this tree")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved runs of each side (default 3)")
    args, rest = parser.parse_known_args()
    started = time.monotonic()
    baseline(args.baseline, rest, args.rounds)
    print("baseline comparison took %.0fs" % (time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
