"""``zactors pipeline``: ventilator -> workers -> sink over scatter-gather."""
import sys
import time
from collections import Counter

import gevent
from tqdm import tqdm

from zactors.actors.auth import Authenticator, curve_client, curve_server, generate_keypair, load_keypair
from zactors.apps.pipeline import Sink, Ventilator, Worker

__all__ = ["register", "demo", "SquareWorker", "ORDER"]

ORDER = 40

#: runs with at least this many tasks show a progress bar
PROGRESS_FROM = 20000


class SquareWorker(Worker):
    """Squares the number in each task; with ``work_ms`` it also waits that long (simulated I/O)."""

    def __init__(self, *args, work_ms=0, **kwargs):
        super().__init__(*args, **kwargs)
        self.work_ms = work_ms

    def process(self, payload):
        if self.work_ms:
            gevent.sleep(self.work_ms / 1000.0)
        return b"%d" % (int(payload) ** 2)


def register(subparsers):
    parser = subparsers.add_parser(
        "pipeline", help="parallel tasks: ventilator -> workers -> sink (scatter-gather)",
        description="The classic parallel task pipeline on thread-safe scatter-gather sockets: "
                    "a ventilator spreads tasks round-robin over workers, a sink gathers the results. "
                    "Run 'demo' for all of it in one process, or ventilate/work/sink in separate shells.",
        epilog="Three shells: 'zactors pipeline sink --tasks 10000', then 'zactors pipeline work' "
               "(once per worker), then 'zactors pipeline ventilate --tasks 10000 --workers 2'.")
    sub = parser.add_subparsers(dest="pipeline_command", metavar="ROLE", required=True)

    d = sub.add_parser("demo", help="ventilator, workers and sink in this one process")
    d.add_argument("--tasks", type=int, default=30000, help="tasks to run (default %(default)s)")
    d.add_argument("--workers", type=int, default=3, help="worker actors (default %(default)s)")
    d.add_argument("--curve", action="store_true", help="encrypt and authenticate every link with CURVE")
    _worker_options(d)
    d.set_defaults(func=run_demo)

    v = sub.add_parser("ventilate", help="send tasks to the workers that connect")
    v.add_argument("--bind", default="tcp://127.0.0.1:5557", help="endpoint workers connect to (default %(default)s)")
    v.add_argument("--tasks", type=int, default=1000, help="tasks to send (default %(default)s)")
    v.add_argument("--workers", type=int, default=1, help="wait for this many workers first (default %(default)s)")
    v.add_argument("--wait", type=float, default=60.0, help="seconds to wait for them (default %(default)s)")
    _server_security(v)
    v.set_defaults(func=run_ventilate)

    w = sub.add_parser("work", help="process tasks until interrupted (Ctrl-C)")
    w.add_argument("--tasks", dest="tasks_endpoint", default="tcp://127.0.0.1:5557",
                   help="the ventilator's endpoint (default %(default)s)")
    w.add_argument("--results", dest="results_endpoint", default="tcp://127.0.0.1:5558",
                   help="the sink's endpoint (default %(default)s)")
    w.add_argument("--curve-server", metavar="FILE",
                   help="the ventilator's and sink's public key file (turns CURVE on)")
    w.add_argument("--curve-secret", metavar="FILE",
                   help="this worker's secret key file (default: a fresh key, for servers that accept any)")
    _worker_options(w)
    w.set_defaults(func=run_work)

    s = sub.add_parser("sink", help="collect results and report who did what")
    s.add_argument("--bind", default="tcp://127.0.0.1:5558", help="endpoint workers send results to (default %(default)s)")
    s.add_argument("--tasks", type=int, default=1000, help="results to wait for (default %(default)s)")
    s.add_argument("--timeout", type=float, default=60.0,
                   help="give up after this many seconds without a result (default %(default)s)")
    _server_security(s)
    s.set_defaults(func=run_sink)


def _server_security(parser):
    parser.add_argument("--curve-secret", metavar="FILE",
                        help="serve with CURVE, using this secret key file (see 'zactors keygen')")
    parser.add_argument("--curve-clients", metavar="DIR",
                        help="with --curve-secret: only workers whose public key file is in DIR "
                             "(default: any worker that knows the server's public key)")


def _serve_securely(args):
    """``(secure, authenticator)`` for a binding role, from its CURVE options."""
    if not args.curve_secret:
        if args.curve_clients:
            raise ValueError("--curve-clients needs --curve-secret")
        return None, None
    keys = load_keypair(args.curve_secret)
    if keys.secret is None:
        raise ValueError("%s holds no secret key: pass the .key_secret file" % args.curve_secret)
    authenticator = Authenticator(curve=args.curve_clients or "*")
    return (lambda sock: curve_server(sock, keys)), authenticator


def _worker_options(parser):
    parser.add_argument("--threads", type=int, default=0,
                        help="OS threads per worker sharing its sockets, besides its greenlets (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=1, help="greenlets per worker (default %(default)s)")
    parser.add_argument("--work-ms", type=float, default=0.0, help="simulated I/O per task, ms (default %(default)s)")


def _make_worker(args, tasks, results, name=None):
    secure = None
    if args.curve_server:
        server_public = load_keypair(args.curve_server).public
        keys = load_keypair(args.curve_secret) if args.curve_secret else generate_keypair()
        if keys.secret is None:
            raise ValueError("%s holds no secret key: pass the .key_secret file" % args.curve_secret)
        secure = lambda sock: curve_client(sock, keys, server_public)  # noqa: E731
    elif args.curve_secret:
        raise ValueError("--curve-secret needs --curve-server")
    return SquareWorker(tasks, results, concurrency=args.concurrency, threads=args.threads,
                        work_ms=args.work_ms, name=name, secure=secure)


def _collect(sink, count, timeout, progress):
    per_worker = Counter()
    bar = tqdm(total=count, unit="task", file=sys.stderr, disable=not progress)
    started = time.monotonic()
    with bar:
        for result in sink.results(count, timeout=timeout):
            per_worker[result.worker] += 1
            bar.update()
    return per_worker, time.monotonic() - started


def _report(out, per_worker, expected, elapsed):
    total = sum(per_worker.values())
    for worker, n in sorted(per_worker.items()):
        out("  %-24s %7d results  %5.1f%%" % (worker, n, 100.0 * n / max(total, 1)))
    out("  %d of %d results in %.2fs (%.0f tasks/s)" % (total, expected, elapsed, total / max(elapsed, 1e-9)))
    return total == expected


def pipeline(out, tasks, workers, args=None, progress=False):
    """Run ventilator, ``workers`` workers and sink in this process; True if every result came."""
    server_secure = worker_secure = authenticator = None
    if getattr(args, "curve", False):
        server, client = generate_keypair(), generate_keypair()
        authenticator = Authenticator(curve="*")
        server_secure = lambda sock: curve_server(sock, server)  # noqa: E731
        worker_secure = lambda sock: curve_client(sock, client, server.public)  # noqa: E731
    sink = Sink(secure=server_secure)
    ventilator = Ventilator(secure=server_secure)
    crew = []
    try:
        for i in range(workers):
            crew.append(SquareWorker(ventilator.endpoint, sink.endpoint, name="worker-%d" % (i + 1),
                                     concurrency=getattr(args, "concurrency", 1),
                                     threads=getattr(args, "threads", 0),
                                     work_ms=getattr(args, "work_ms", 0), secure=worker_secure))
        if not ventilator.wait_for_workers(workers, timeout=30):
            raise RuntimeError("only %d of %d workers connected to the ventilator" % (ventilator.workers, workers))
        out("ventilator %s -> %d workers -> sink %s: %d tasks%s" % (
            ventilator.endpoint, workers, sink.endpoint, tasks, " (CURVE)" if authenticator else ""))
        sender = gevent.spawn(lambda: [ventilator.send(b"%d" % n) for n in range(tasks)])
        per_worker, elapsed = _collect(sink, tasks, 30, progress)
        sender.get(timeout=30)
        return _report(out, per_worker, tasks, elapsed)
    finally:
        for worker in crew:
            worker.destroy()
        ventilator.close()
        sink.close()
        if authenticator is not None:
            authenticator.destroy()


def run_demo(args):
    ok = pipeline(print, args.tasks, args.workers, args, progress=args.tasks >= PROGRESS_FROM)
    return 0 if ok else 1


def run_ventilate(args):
    secure, authenticator = _serve_securely(args)
    ventilator = Ventilator(args.bind, secure=secure)
    try:
        print("ventilator on %s, waiting for %d worker(s)..." % (ventilator.endpoint, args.workers))
        if not ventilator.wait_for_workers(args.workers, timeout=args.wait):
            print("zactors: only %d of %d workers connected within %gs; start them with "
                  "'zactors pipeline work --tasks %s'" % (ventilator.workers, args.workers, args.wait,
                                                          ventilator.endpoint), file=sys.stderr)
            return 1
        for n in tqdm(range(args.tasks), unit="task", file=sys.stderr, disable=args.tasks < PROGRESS_FROM):
            ventilator.send(b"%d" % n)
        print("sent %d tasks round-robin to %d worker(s)" % (args.tasks, ventilator.workers))
        return 0
    finally:
        ventilator.close()  # flushes queued tasks (linger)
        if authenticator is not None:
            authenticator.destroy()


def run_work(args):
    worker = _make_worker(args, args.tasks_endpoint, args.results_endpoint)
    print("%s: tasks from %s, results to %s (Ctrl-C to stop)" % (worker.name, args.tasks_endpoint,
                                                               args.results_endpoint))
    try:
        worker.recv_event()  # only $EXIT or $DIED ever comes
    finally:
        stats = worker.call("$STATS", timeout=5) if worker.alive else {}
        worker.destroy()
        print("%s: %d done, %d failed" % (worker.name, stats.get("done", 0), stats.get("failed", 0)))
    return 0


def run_sink(args):
    secure, authenticator = _serve_securely(args)
    sink = Sink(args.bind, secure=secure)
    try:
        print("sink on %s, waiting for %d results..." % (sink.endpoint, args.tasks))
        per_worker, elapsed = _collect(sink, args.tasks, args.timeout, args.tasks >= PROGRESS_FROM)
        return 0 if _report(print, per_worker, args.tasks, elapsed) else 1
    finally:
        sink.close()
        if authenticator is not None:
            authenticator.destroy()


def demo(out):
    """Scatter-gather pipeline: tasks round-robin over 3 workers, results gathered"""
    pipeline(out, 3000, 3)
