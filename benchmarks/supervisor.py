"""Supervisor benchmark: restart latency, from a child's death to its restarted incarnation answering a call.

    python benchmarks/supervisor.py [--restarts 200] [--zeps-mb 1024] [--clone-keys 1000000] [--fresh 3] [--quick]

Three parts, each under a :class:`~zactors.actors.supervisor.Supervisor` in
this process (``one_for_one``, no backoff), each killed ``--*-restarts``
times with :func:`zactors.actors.testkit.crash` (as a bug in a handler
would kill it).  The latency of one restart runs from the crash to the
first answer (``INFO``/``ECHO``) of the new incarnation, which the
supervisor started on the same endpoints; p50 and p99 (nearest rank: with
few restarts, p99 is the slowest).

- actor: a plain actor (no sockets but its pipe).  Target: p99 < 10 ms.
  On a loaded machine the p99 is the scheduler's: a restart that a time
  slice interrupts waits for the other processes' slices (milliseconds).
  ``cpu_per_restart`` (this process's CPU time per restart, every thread)
  is the figure that load does not move.
- zeps: a ZEPS broker whose journal holds ``--zeps-mb`` MiB of
  ``--zeps-body``-byte messages, published through it first.  The new
  incarnation recovers the journal before it answers (it checks the last
  sequence).  Target: < 2 s for 1 GiB (the default; the journal is built
  once, in a temporary directory, and its build time printed).
- clone: a Clone server journaling its map (``persist``) with
  ``--clone-keys`` keys of 100-byte values, loaded through its collector.
  Target: < 3 s for 1M keys (the default).

Beside each: a fresh process of the same part starting on the same data
(``--fresh`` runs, median): the time from spawning the interpreter to the
part's first answer, what a process supervisor (systemd, Kubernetes) pays
per restart; for the ZEPS broker and the Clone server also after a process
of the part was killed with SIGKILL (its journal left as a crash leaves it).
The defaults (the issue's sizes) run in about two minutes, ``--quick`` in
a few seconds; each figure is printed as it is measured, and every step
runs under a deadline (``--deadline``; see ``_harness.py``).
"""
import argparse
import logging
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import Steps, StepTimeout, add_deadline_option, subset, wait_until  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VALUE = b"v" * 100

#: what a fresh process runs: build the part (``make``, on argv[1] and argv[2]), ask it once, say "ready";
#: then stop it (argv[3] "stop"), or wait for the SIGKILL that leaves its journal as a crash does ("hold")
FRESH = """
import sys
%s
part = make(sys.argv[1], sys.argv[2])
part.call(*%r, timeout=60)
print("ready", flush=True)
if sys.argv[3] == "hold":
    sys.stdin.read()
part.destroy()
"""

ECHO = """
from zactors.actors import Actor, command

class Echo(Actor):
    @command(reply=True)
    def echo(self, value):
        return value

def make(_data, _endpoint):
    return Echo()
"""

ZEPS = """
def make(data, endpoint):
    from zactors.patterns.zeps.broker import Broker
    return Broker(data, endpoint, name="zeps")
"""

CLONE = """
def make(data, endpoints):
    from zactors.patterns.clone.server import CloneServer
    snapshot, publisher, collector = endpoints.split()
    return CloneServer(host="127.0.0.1", snapshot=snapshot, publisher=publisher, collector=collector,
                       persist=data, name="clone")
"""


def _namespace(source):
    namespace = {}
    exec(compile(source, "<part>", "exec"), namespace)
    return namespace


def nearest_rank(samples, q):
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def fresh_process(source, call, data, endpoints, runs, killed=False):
    """Median seconds from spawning a Python process to its part's first answer to ``call``, over ``runs``.

    ``killed``: each run follows a process of the part killed with SIGKILL (its journal not closed:
    recovery checks the active segment, and a new epoch starts), as after a crash of the node.
    """
    script = FRESH % (source, tuple(call))
    took = []

    def run(mode):
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", script, data, endpoints, mode], cwd=ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline()
            ready = time.perf_counter() - started
            if line.strip() != "ready":
                raise RuntimeError("a fresh process of the part did not start (exit status %s)" % proc.wait(60))
            if mode == "hold":
                proc.kill()
            else:
                proc.stdin.close()
            proc.wait(60)
            return ready
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for _ in range(runs):
        if killed:
            run("hold")
        took.append(run("stop"))
    return statistics.median(took)


def restart_latencies(sup, name, call, restarts, check=None):
    """Crash child ``name`` ``restarts`` times; the seconds from each crash to the new incarnation's answer.

    The crashed actors' tracebacks (logged at ERROR) are muted meanwhile: they are the deaths we cause.
    """
    from zactors.actors.testkit import crash

    proxy = sup.proxy(name, wait=120)
    took = []
    cpu = time.process_time()
    events = sup.subscribe()
    library = logging.getLogger("zactors")
    saved = library.level
    library.setLevel(logging.CRITICAL)
    try:
        for _ in range(restarts):
            old = sup.child(name)
            crash(old, "killed by the benchmark")
            died = time.perf_counter()
            while True:  # the supervisor's word that the new incarnation has started
                event = events.recv(timeout=120)
                if event is None:
                    raise StepTimeout("no restart of %s within 120s" % name)
                if event.name == "CHILD_STARTED" and event.args[0] == name:
                    break
            answer = proxy.call(*call, timeout=120)
            took.append(time.perf_counter() - died)
            if check is not None:
                check(answer)
    finally:
        library.setLevel(saved)
        events.close()
    restart_latencies.cpu = (time.process_time() - cpu) / max(1, len(took))
    return took


def same_endpoints(make, *endpoints):
    """A factory whose incarnations bind the endpoints the first one got (as ``zactors up`` does)."""
    bound = list(endpoints)

    def factory():
        part = make(*bound)
        bound[:] = part.endpoints[:3] if hasattr(part, "endpoints") else [part.endpoint]
        return part
    return factory


def figures(took, unit, fresh, **extra):
    scale = 1000.0 if unit == "ms" else 1.0
    out = dict(extra)
    out.update({"restarts": len(took), "p50_" + unit: round(nearest_rank(took, 0.5) * scale, 3),
                "p99_" + unit: round(nearest_rank(took, 0.99) * scale, 3),
                "cpu_per_restart_" + unit: round(restart_latencies.cpu * scale, 3),
                "fresh_process_" + unit: round(fresh * scale, 3)})
    return out


def bench_actor(restarts, fresh_runs):
    from zactors.actors.supervisor import ChildSpec, Supervisor
    make = _namespace(ECHO)["make"]
    sup = Supervisor([ChildSpec("echo", lambda: make(None, None))], intensity=10 ** 9, period=1.0)
    try:
        sup.proxy("echo").call("ECHO", "warm", timeout=10)
        took = restart_latencies(sup, "echo", ("ECHO", "x"), restarts)
    finally:
        sup.destroy()
    fresh = fresh_process(ECHO, ("ECHO", "x"), "-", "-", fresh_runs)
    return figures(took, "ms", fresh, target_p99_ms=10)


def bench_zeps(megabytes, body_size, restarts, fresh_runs):
    import gevent
    from zactors.actors.supervisor import ChildSpec, Supervisor
    from zactors.patterns.zeps import Publisher
    make = _namespace(ZEPS)["make"]
    data = tempfile.mkdtemp(prefix="zactors-bench-sup-zeps-")
    sup = None
    try:
        sup = Supervisor([ChildSpec("zeps", same_endpoints(lambda e: make(data, e), "tcp://127.0.0.1:*"))],
                         intensity=10 ** 9, period=1.0)
        endpoint = sup.child("zeps").endpoint
        body = b"b" * body_size
        messages = max(1, megabytes * (1 << 20) // body_size)
        pub = Publisher(endpoint, "bench")
        loaded = time.perf_counter()
        for i in range(messages):
            pub.publish(b"k.%d" % (i % 100), body)
            if i % 1000 == 999:
                gevent.sleep(0)
        pub.flush(timeout=600)
        pub.close()
        print("zeps: %d messages (%d MiB) journaled in %.1fs" % (messages, megabytes, time.perf_counter() - loaded),
              file=sys.stderr, flush=True)

        def recovered(info):
            last = info["streams"]["bench"]["last_seq"]
            if last != messages:
                raise AssertionError("the restarted broker recovered up to %s, not %d" % (last, messages))
        took = restart_latencies(sup, "zeps", ("INFO",), restarts, recovered)
        journal = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
        sup.destroy()
        sup = None
        fresh = fresh_process(ZEPS, ("INFO",), data, endpoint, fresh_runs)
        print("zeps: a fresh process started in %.3fs" % fresh, file=sys.stderr, flush=True)
        after_kill = fresh_process(ZEPS, ("INFO",), data, endpoint, fresh_runs, killed=True)
    finally:
        if sup is not None:
            sup.destroy()
        shutil.rmtree(data, ignore_errors=True)
    return figures(took, "s", fresh, messages=messages, journal_mib=round(journal / (1 << 20), 1),
                   target_s_for_1gib=2, fresh_process_after_sigkill_s=round(after_kill, 3))


def bench_clone(keys, restarts, fresh_runs):
    import gevent
    import zmq
    from zactors.actors.sockets import Socket, context
    from zactors.actors.supervisor import ChildSpec, Supervisor
    from zactors.patterns.clone.protocol import encode_kvmsg
    make = _namespace(CLONE)["make"]
    data = tempfile.mkdtemp(prefix="zactors-bench-sup-clone-")
    sup = None
    try:
        sup = Supervisor([ChildSpec("clone", same_endpoints(lambda *e: make(data, " ".join(e)),
                                                            *("tcp://127.0.0.1:*",) * 3))],
                         intensity=10 ** 9, period=1.0)
        endpoints = sup.child("clone").endpoints[:3]
        pub = context().socket(zmq.PUB, socket_class=Socket)
        pub.sndhwm = 0
        pub.linger = 0
        pub.connect(endpoints[2])
        loaded = time.perf_counter()
        try:
            # a PUB drops what it sends before the connection is up: send the first key until the server has it
            wait_until(lambda: pub.send_multipart(encode_kvmsg(b"key-0000000", 0, VALUE)) or
                       sup.child("clone").call("INFO", timeout=10)["keys"] >= 1, 30,
                       "the collector to take a first key", gevent.sleep, 0.05)
            for i in range(1, keys):
                pub.send_multipart(encode_kvmsg(b"key-%07d" % i, 0, VALUE))
                if i % 1000 == 999:
                    gevent.sleep(0)
            wait_until(lambda: sup.child("clone").call("INFO", timeout=10)["keys"] >= keys, 600,
                       "the server to hold the %d keys loaded" % keys, gevent.sleep, 0.05)
        finally:
            pub.close(0)
        print("clone: %d keys loaded in %.1fs" % (keys, time.perf_counter() - loaded), file=sys.stderr, flush=True)

        def recovered(info):
            if info["keys"] != keys:
                raise AssertionError("the restarted server recovered %s keys, not %d" % (info["keys"], keys))
        took = restart_latencies(sup, "clone", ("INFO",), restarts, recovered)
        sup.destroy()
        sup = None
        fresh = fresh_process(CLONE, ("INFO",), data, " ".join(endpoints), fresh_runs)
        print("clone: a fresh process started in %.3fs" % fresh, file=sys.stderr, flush=True)
        after_kill = fresh_process(CLONE, ("INFO",), data, " ".join(endpoints), fresh_runs, killed=True)
    finally:
        if sup is not None:
            sup.destroy()
        shutil.rmtree(data, ignore_errors=True)
    return figures(took, "s", fresh, keys=keys, target_s_for_1m_keys=3,
                   fresh_process_after_sigkill_s=round(after_kill, 3))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--restarts", type=int, default=200, help="restarts of the plain actor (default: %(default)s)")
    parser.add_argument("--zeps-mb", type=int, default=1024, help="MiB in the ZEPS journal (default: %(default)s)")
    parser.add_argument("--zeps-body", type=int, default=4096, help="bytes per ZEPS message (default: %(default)s)")
    parser.add_argument("--zeps-restarts", type=int, default=5, help="(default: %(default)s)")
    parser.add_argument("--clone-keys", type=int, default=1000000, help="keys in the Clone map (default: %(default)s)")
    parser.add_argument("--clone-restarts", type=int, default=5, help="(default: %(default)s)")
    parser.add_argument("--fresh", type=int, default=3, help="fresh-process starts per part (default: %(default)s)")
    parser.add_argument("--runs", default="actor,zeps,clone", help="which parts (default: %(default)s)")
    parser.add_argument("--quick", action="store_true",
                        help="a short pass: 50 actor restarts, a 16 MiB journal, 20,000 keys, 2 restarts each, "
                             "1 fresh process")
    add_deadline_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.restarts, args.zeps_mb, args.clone_keys, args.fresh = 50, 16, 20000, 1
        args.zeps_restarts = args.clone_restarts = 2
    runs = subset(parser, "--runs", args.runs, ("actor", "zeps", "clone"))
    steps = Steps(deadline=args.deadline)
    if "actor" in runs:
        steps.run("actor", "%d restarts of a plain actor, then %d fresh processes" % (args.restarts, args.fresh),
                  bench_actor, args.restarts, args.fresh)
    if "zeps" in runs:
        steps.run("zeps", "a %d MiB ZEPS journal, %d broker restarts, %d fresh processes"
                  % (args.zeps_mb, args.zeps_restarts, args.fresh),
                  bench_zeps, args.zeps_mb, args.zeps_body, args.zeps_restarts, args.fresh)
    if "clone" in runs:
        steps.run("clone", "%d Clone keys, %d server restarts, %d fresh processes"
                  % (args.clone_keys, args.clone_restarts, args.fresh),
                  bench_clone, args.clone_keys, args.clone_restarts, args.fresh)
    failed = [name for name, result in steps.results.items() if "error" in result]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
