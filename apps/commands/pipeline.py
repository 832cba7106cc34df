"""``zactors pipeline``: ventilator -> workers -> sink over scatter-gather."""
import sys
import time
from collections import Counter

import gevent
import zmq
from gevent.event import Event
from tqdm import tqdm

from zactors.actors.auth import Authenticator, curve_client, curve_server, generate_keypair
from zactors.actors.monitor import HandshakeFailed
from zactors.apps import exitstatus, options
from zactors.apps.pipeline import Sink, Ventilator, Worker
from zactors.patterns.scatter import native_available
from zactors.apps.stopping import Interrupted, wait_until_stopped

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


DISTRIBUTION = ("tasks go round-robin to the workers whose queue has room, so a faster worker takes more")


#: default endpoints: clear of the node's (zactors up: 5555 Majordomo, 5556-5559 Clone, 5570 ZEPS)
VENTILATOR = "tcp://127.0.0.1:5590"
SINK = "tcp://127.0.0.1:5591"


def register(subparsers):
    parser = subparsers.add_parser(
        "pipeline", help="parallel tasks: ventilator -> workers -> sink (scatter-gather)",
        description="The classic parallel task pipeline on thread-safe scatter-gather sockets: "
                    "a ventilator spreads tasks over workers (%s), a sink gathers the results. "
                    "Run 'demo' for all of it in one process, or ventilate/work/sink in separate shells."
                    % DISTRIBUTION,
        epilog="Three shells: 'zactors pipeline sink --tasks 10000', then 'zactors pipeline work' "
               "(once per worker), then 'zactors pipeline ventilate --tasks 10000 --workers 2'.")
    sub = parser.add_subparsers(dest="pipeline_command", metavar="ROLE")
    parser.set_defaults(func=lambda args: parser.print_help() or exitstatus.USAGE)

    d = sub.add_parser("demo", help="ventilator, workers and sink in this one process",
                       description="Run a ventilator, --workers workers and a sink in this process, and report "
                                   "who did what and how fast.")
    d.add_argument("--tasks", type=options.positive_int, default=30000, help="tasks to run (default %(default)s)")
    d.add_argument("--workers", type=options.positive_int, default=3, help="worker actors (default %(default)s)")
    d.add_argument("--encrypt", action="store_true",
                   help="encrypt and authenticate every link with CURVE, with fresh keys")
    _worker_options(d)
    _wire_option(d)
    d.set_defaults(func=run_demo)

    v = sub.add_parser("ventilate", help="send tasks to the workers that connect",
                       description="Wait for --workers workers (a worker counts once its ZeroMQ handshake "
                                   "succeeds), then send --tasks tasks: %s." % DISTRIBUTION)
    v.add_argument("--bind", default=VENTILATOR, type=options.bind_endpoint, metavar="ENDPOINT",
                   help="endpoint workers connect to (default %(default)s)")
    v.add_argument("--tasks", type=options.positive_int, default=1000, help="tasks to send (default %(default)s)")
    v.add_argument("--workers", type=options.positive_int, default=1,
                   help="wait for this many workers first (default %(default)s)")
    v.add_argument("--wait", type=options.positive_float, default=60.0,
                   help="seconds to wait for them (default %(default)s)")
    options.curve_options(v, "server")
    _wire_option(v)
    v.set_defaults(func=run_ventilate)

    w = sub.add_parser("work", help="process tasks until interrupted (Ctrl-C)",
                       description="Take tasks from the ventilator, square them, send the results to the sink; "
                                   "until Ctrl-C or SIGTERM (exit status 0), or until the ventilator or "
                                   "sink refuses our key (exit status 4).")
    w.add_argument("--ventilator", default=VENTILATOR, type=options.connect_endpoint, metavar="ENDPOINT",
                   help="the ventilator's endpoint, where tasks come from (default %(default)s)")
    w.add_argument("--sink", default=SINK, type=options.connect_endpoint, metavar="ENDPOINT",
                   help="the sink's endpoint, where results go (default %(default)s)")
    options.curve_options(w, "client")
    _worker_options(w)
    _wire_option(w)
    w.set_defaults(func=run_work)

    s = sub.add_parser("sink", help="collect results and report who did what",
                       description="Collect --tasks results and report each worker's share and the "
                                   "throughput (timed from the first result to the last).")
    s.add_argument("--bind", default=SINK, type=options.bind_endpoint, metavar="ENDPOINT",
                   help="endpoint workers send results to (default %(default)s)")
    s.add_argument("--tasks", type=options.positive_int, default=1000,
                   help="results to wait for (default %(default)s)")
    s.add_argument("--timeout", type=options.positive_float, default=60.0,
                   help="give up after this many seconds without a result (default %(default)s)")
    options.curve_options(s, "server")
    _wire_option(s)
    s.set_defaults(func=run_sink)


def _serve_securely(args):
    """``(secure, authenticator)`` for a binding role, from its CURVE options."""
    options.check_curve(args, "server")
    if not args.curve:
        return None, None
    keys = args.curve
    authenticator = Authenticator(curve=args.curve_clients or "*")
    return (lambda sock: curve_server(sock, keys)), authenticator


def _wire_option(parser):
    parser.add_argument("--native", action="store_true",
                        help="speak libzmq's draft SCATTER/GATHER on the wire instead of PUSH/PULL (needs pyzmq "
                             "built with the draft API; every role of one pipeline must agree)")


def _native(args):
    """The wire the user chose; a native wire this pyzmq lacks is a usage error."""
    native = getattr(args, "native", False)
    if native and not native_available():
        raise options.UsageError("--native needs pyzmq and libzmq built with the draft API "
                                 "(zmq.has('draft') is False here); leave --native out to speak PUSH/PULL")
    return native


def _worker_options(parser):
    parser.add_argument("--threads", type=options.count, default=0,
                        help="OS threads per worker sharing its sockets, besides its greenlets (default %(default)s)")
    parser.add_argument("--concurrency", type=options.positive_int, default=1,
                        help="greenlets per worker (default %(default)s)")
    parser.add_argument("--work-ms", type=options.non_negative_float, default=0.0,
                        help="simulated I/O per task, ms (default %(default)s)")


def _make_worker(args, tasks, results, name=None):
    curve = options.client_curve(args)
    secure = None
    if curve is not None:
        server_public, keys = curve
        secure = lambda sock: curve_client(sock, keys, server_public)  # noqa: E731
    return SquareWorker(tasks, results, concurrency=args.concurrency, threads=args.threads,
                        work_ms=args.work_ms, name=name, secure=secure, native=_native(args))


class _Tally:
    """Results per worker, timed from the first result to the latest."""

    def __init__(self):
        self.per_worker = Counter()
        self.first = self.last = None

    def add(self, result):
        self.last = time.monotonic()
        if self.first is None:
            self.first = self.last
        self.per_worker[result.worker] += 1

    @property
    def elapsed(self):
        return 0.0 if self.first is None else self.last - self.first


def _collect(sink, count, timeout, progress, tally):
    bar = tqdm(total=count, unit="task", file=sys.stderr, disable=not progress)
    with bar:
        for result in sink.results(count, timeout=timeout):
            tally.add(result)
            bar.update()
    return tally


def _report(out, tally, expected):
    per_worker, elapsed = tally.per_worker, tally.elapsed
    total = sum(per_worker.values())
    for worker, n in sorted(per_worker.items()):
        out("  %-24s %7d results  %5.1f%%" % (worker, n, 100.0 * n / max(total, 1)))
    rate = "" if total < 2 else " (%.0f tasks/s, first to last result)" % ((total - 1) / max(elapsed, 1e-9))
    out("  %d of %d results in %.2fs%s" % (total, expected, elapsed, rate))
    return total == expected


def pipeline(out, tasks, workers, args=None, progress=False):
    """Run ventilator, ``workers`` workers and sink in this process; True if every result came."""
    server_secure = worker_secure = authenticator = None
    if getattr(args, "encrypt", False):
        server, client = generate_keypair(), generate_keypair()
        authenticator = Authenticator(curve="*")
        server_secure = lambda sock: curve_server(sock, server)  # noqa: E731
        worker_secure = lambda sock: curve_client(sock, client, server.public)  # noqa: E731
    native = _native(args) if args is not None else False
    sink = Sink(secure=server_secure, native=native)
    ventilator = Ventilator(secure=server_secure, native=native)
    crew = []
    try:
        for i in range(workers):
            crew.append(SquareWorker(ventilator.endpoint, sink.endpoint, name="worker-%d" % (i + 1),
                                     concurrency=getattr(args, "concurrency", 1),
                                     threads=getattr(args, "threads", 0),
                                     work_ms=getattr(args, "work_ms", 0), secure=worker_secure, native=native))
        if not ventilator.wait_for_workers(workers, timeout=30):
            raise RuntimeError("only %d of %d workers connected to the ventilator" % (ventilator.workers, workers))
        out("ventilator %s -> %d workers -> sink %s: %d tasks%s" % (
            ventilator.endpoint, workers, sink.endpoint, tasks, " (CURVE)" if authenticator else ""))
        sender = gevent.spawn(lambda: [ventilator.send(b"%d" % n) for n in range(tasks)])
        tally = _Tally()
        try:
            _collect(sink, tasks, 30, progress, tally)
        except Interrupted:
            sender.kill()
            print("zactors pipeline: interrupted; %d of %d results had come" % (sum(tally.per_worker.values()), tasks),
                  file=sys.stderr)
            raise
        sender.get(timeout=30)
        return _report(out, tally, tasks)
    finally:
        for worker in crew:
            worker.destroy()
        ventilator.close()
        sink.close()
        if authenticator is not None:
            authenticator.destroy()


def run_demo(args):
    ok = pipeline(print, args.tasks, args.workers, args, progress=args.tasks >= PROGRESS_FROM)
    return exitstatus.OK if ok else exitstatus.FAILED


def _bound(make, endpoint):
    try:
        return make()
    except zmq.ZMQError as exc:
        raise options.bind_error(endpoint, exc) from None


def run_ventilate(args):
    secure, authenticator = _serve_securely(args)
    sent = 0
    try:
        ventilator = _bound(lambda: Ventilator(args.bind, secure=secure, native=_native(args)), args.bind)
        try:
            print("ventilator on %s, waiting for %d worker(s)..." % (ventilator.endpoint, args.workers), flush=True)
            if not ventilator.wait_for_workers(args.workers, timeout=args.wait):
                refused = ventilator.peers.failed
                print("zactors pipeline ventilate: error: only %d of %d workers connected within %gs%s; start them with "
                      "'zactors pipeline work --ventilator %s'" % (
                          ventilator.workers, args.workers, args.wait,
                          " (%d connection(s) failed the handshake: a refused key?)" % refused if refused else "",
                          ventilator.endpoint), file=sys.stderr)
                return exitstatus.FAILED
            for n in tqdm(range(args.tasks), unit="task", file=sys.stderr, disable=args.tasks < PROGRESS_FROM):
                ventilator.send(b"%d" % n)
                sent += 1
            print("sent %d tasks to %d worker(s): %s" % (args.tasks, ventilator.workers, DISTRIBUTION))
            return exitstatus.OK
        except Interrupted:
            print("zactors pipeline ventilate: interrupted; %d of %d tasks sent" % (sent, args.tasks),
                  file=sys.stderr)
            raise
        finally:
            ventilator.close()  # flushes queued tasks (linger)
    finally:
        if authenticator is not None:
            authenticator.destroy()


def run_work(args):
    worker = _make_worker(args, args.ventilator, args.sink)
    print("%s: tasks from %s, results to %s (Ctrl-C to stop)" % (worker.name, args.ventilator, args.sink),
          flush=True)
    refused = []
    ended = Event()

    def watch():
        event = worker.recv_event()  # REFUSED, or $EXIT/$DIED
        if event is not None and event.name == "REFUSED":
            refused.append(event.args[0])
        ended.set()

    watcher = gevent.spawn(watch)
    stats = {}
    try:
        wait_until_stopped(ended)
        stats = worker.call("$STATS", timeout=5) if worker.alive else {}
    finally:
        watcher.kill()
        worker.destroy()
        print("%s: %d done, %d failed" % (worker.name, stats.get("done", 0), stats.get("failed", 0)), flush=True)
    if refused:
        raise HandshakeFailed(refused[0], None)
    return exitstatus.OK


def run_sink(args):
    secure, authenticator = _serve_securely(args)
    tally = _Tally()
    try:
        sink = _bound(lambda: Sink(args.bind, secure=secure, native=_native(args)), args.bind)
        try:
            print("sink on %s, waiting for %d results..." % (sink.endpoint, args.tasks), flush=True)
            _collect(sink, args.tasks, args.timeout, args.tasks >= PROGRESS_FROM, tally)
        except Interrupted:
            print("zactors pipeline sink: interrupted", file=sys.stderr)
            _report(print, tally, args.tasks)
            raise
        finally:
            sink.close()
    finally:
        if authenticator is not None:
            authenticator.destroy()
    return exitstatus.OK if _report(print, tally, args.tasks) else exitstatus.FAILED


def demo(out, node):
    """Scatter-gather pipeline: 3 workers; tasks go round-robin to those with room in their queue"""
    pipeline(out, 3000, 3)
