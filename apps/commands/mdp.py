"""Majordomo commands: ``zactors mdp broker|worker|request|mmi`` and the Majordomo part of the demo."""
import json
import logging
import re
import sys
import time

import gevent
import zmq

from zactors.apps import contexts, exitstatus, options
from zactors.apps.stopping import Interrupted, serve, wait_until_stopped
from zactors.patterns.majordomo.protocol import MAX_MESSAGE

ORDER = 20
log = logging.getLogger("zactors.mdp")

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"


def register(sub):
    mdp = sub.add_parser("mdp", help="Majordomo (18/MDP v0.2): run a broker or a worker, call a service",
                         description="Majordomo service-oriented request-reply (18/MDP v0.2).")
    cmds = mdp.add_subparsers(dest="mdp_command", metavar="SUBCOMMAND")
    mdp.set_defaults(func=lambda args: mdp.print_help() or exitstatus.USAGE)

    broker = cmds.add_parser("broker", help="run a broker until Ctrl-C",
                             description="Run a Majordomo broker; clients and workers connect to --bind. "
                                         "Ctrl-C or SIGTERM stops it (exit status 0).")
    broker.add_argument("--bind", default=DEFAULT_ENDPOINT, type=options.bind_endpoint, metavar="ENDPOINT",
                        help="endpoint for clients and workers, e.g. tcp://*:5555 for every interface "
                             "(default: %(default)s)")
    broker.add_argument("--worker-bind", type=options.bind_endpoint, metavar="ENDPOINT", help="a second endpoint, for workers only")
    broker.add_argument("--heartbeat", type=options.positive_float, default=2.5,
                        help="seconds between heartbeats (default: %(default)s)")
    broker.add_argument("--liveness", type=options.positive_int, default=3,
                        help="heartbeats missed before a worker is dead (default: %(default)s)")
    broker.add_argument("--expiry", type=options.positive_float, default=10.0,
                        help="seconds a request waits for a service that has no worker (default: %(default)s)")
    broker.add_argument("--max-queue", type=options.positive_int, default=10000,
                        help="requests queued per service (default: %(default)s)")
    broker.add_argument("--max-message", type=options.size, default=MAX_MESSAGE, metavar="SIZE",
                        help="largest frame a client or worker may send; a larger one drops its connection "
                             "unread (default: 16M)")
    _framing(broker)
    options.curve_options(broker, "server")
    broker.add_argument("--stats", type=options.non_negative_float, default=0, metavar="SECONDS",
                        help="log services, queues and counters every SECONDS (default: never)")
    broker.set_defaults(func=run_broker)

    worker = cmds.add_parser("worker", help="run a sample worker that echoes requests",
                             description="Serve SERVICE by echoing each request back, optionally as partials "
                                         "first. Ctrl-C or SIGTERM stops it (exit status 0).")
    worker.add_argument("service", type=options.service_name, help="service name to register (not mmi.*)")
    _connect(worker)
    worker.add_argument("--partials", type=options.count, default=0,
                        help="send the echo N times as PARTIAL first (default: 0)")
    worker.add_argument("--delay", type=options.non_negative_float, default=0.0,
                        help="seconds to wait before each reply (default: 0)")
    worker.add_argument("--heartbeat", type=options.positive_float, default=2.5,
                        help="seconds between heartbeats (default: %(default)s)")
    _framing(worker)
    worker.set_defaults(func=run_worker)

    request = cmds.add_parser(
        "request", help="send one request and print every reply",
        description="Send BODY frames to SERVICE; print each PARTIAL and the FINAL reply, one line each: "
                    "the kind, then the frames as a JSON array of strings (bytes that are not UTF-8 "
                    "show as \\udcXX escapes).",
        epilog="Retries can run a request more than once: when an attempt times out, the request is sent "
               "again, and a late worker may still run the earlier copy (its reply is dropped). Use "
               "--retries 1 for requests that must not repeat. A service that failed (its handler raised, or its "
               "worker was lost) answers at once with an error, printed on stderr in one line. Exit status: 0 "
               "replied, 1 the service failed or no reply (no worker?), 3 no broker answered, 4 the broker "
               "refused our key.")
    request.add_argument("service", type=options.service_name, help="service name")
    request.add_argument("body", nargs="+", help="request body frames")
    _connect(request)
    request.add_argument("--timeout", type=options.positive_float, default=2.5,
                         help="seconds to wait for each reply (default: %(default)s)")
    request.add_argument("--retries", type=options.positive_int, default=3,
                         help="attempts in all before giving up; each may run the request again on a "
                              "late worker (default: %(default)s)")
    _framing(request)
    request.set_defaults(func=run_request)

    mmi = cmds.add_parser("mmi", help="ask the broker whether SERVICE has workers (mmi.service)",
                          description="Ask the broker (mmi.service) whether SERVICE has workers.",
                          epilog="Exit status: 0 SERVICE has workers (200), 1 it has none (404), "
                                 "3 no broker answered, 4 the broker refused our key.")
    mmi.add_argument("service", type=options.service_name, help="service name")
    _connect(mmi)
    mmi.add_argument("--timeout", type=options.positive_float, default=2.5,
                     help="seconds to wait (default: %(default)s)")
    mmi.set_defaults(func=run_mmi)


def _connect(parser):
    contexts.connect_options(parser, "mdp", DEFAULT_ENDPOINT)


def _framing(parser):
    parser.add_argument("--framing", choices=("spec", "majortomo"), default="spec",
                        help="wire framing: 'spec' (18/MDP as written) or 'majortomo' (majortomo 0.2.0 peers)")


def run_broker(args):
    from zactors.patterns.majordomo import Broker

    options.check_curve(args, "server")
    auth = None
    if args.curve:
        from zactors.actors.auth import Authenticator
        auth = Authenticator(curve=args.curve_clients or "*")
    try:
        broker = Broker(args.bind, worker_endpoint=args.worker_bind, heartbeat=args.heartbeat,
                        liveness=args.liveness, request_expiry=args.expiry, max_queue=args.max_queue,
                        framing=args.framing, curve=args.curve, max_message=args.max_message)
    except BaseException as exc:
        if auth is not None:
            auth.destroy()
        if isinstance(exc, zmq.ZMQError):
            failed = args.worker_bind if args.worker_bind and args.worker_bind in str(exc) else args.bind
            raise options.bind_error(failed, exc) from None
        raise
    log.info("broker on %s%s (%s framing%s); Ctrl-C stops", broker.endpoint,
             "" if not args.worker_bind else ", workers on %s" % broker.worker_endpoint, args.framing,
             "" if args.curve is None else ", CURVE, public key %s" % args.curve.public.decode())
    def summary(info):
        counters = info.get("counters", {})
        replies = counters.get("replies", 0)
        return "broker stopped: %d request(s), %d repl%s, %d worker(s) came" % (
            counters.get("requests", 0), replies, "y" if replies == 1 else "ies", counters.get("workers_ready", 0))

    return serve(broker, summary, describe=_describe, every=args.stats, cleanup=(auth,))


def _describe(info):
    """One line of the server's INFO, for --stats."""
    services = ", ".join("%s: %d workers (%d idle), %d queued" % (name, s["workers"], s["idle"], s["queued"])
                         for name, s in sorted(info["services"].items())) or "no services"
    return "%s | %s" % (services, " ".join("%s=%d" % kv for kv in sorted(info["counters"].items())))


def _echo_worker(partials, delay):
    from zactors.patterns.majordomo import Worker

    class EchoWorker(Worker):
        """Echoes each request, ``partials`` times as PARTIAL first."""

        def handle(self, request):
            if delay:
                deadline = time.monotonic() + delay
                while time.monotonic() < deadline:  # wait without stopping heartbeats
                    gevent.sleep(min(0.05, delay))
                    yield None
            for _ in range(partials):
                yield request
            return request
    return EchoWorker


def _check_broker(args, curve, what):
    """See the broker's handshake before serving or calling: HandshakeFailed if it refuses us.

    True once connected, False if nobody answered within a second (the
    caller waits on: a broker may come later).
    """
    from zactors.actors.auth import curve_client
    from zactors.actors.monitor import probe
    secure = None if curve is None else (lambda sock: curve_client(sock, curve[1], curve[0]))
    return probe(args.connect, secure, timeout=1.0, peer="the broker at %s" % args.connect)


def run_worker(args):
    if args.service.startswith("mmi."):
        raise options.UsageError("mmi.* names are the broker's own services (MMI); choose another name "
                                 "for your worker")
    curve = options.client_curve(args)
    connected = _check_broker(args, curve, "worker")
    worker = _echo_worker(args.partials, args.delay)(args.connect, args.service, heartbeat=args.heartbeat,
                                                     framing=args.framing, curve=curve)
    if connected:
        log.info("worker for %r serving through the broker at %s; Ctrl-C stops", args.service, args.connect)
    else:
        log.warning("worker for %r: no broker answers at %s yet; connecting on (Ctrl-C stops)",
                    args.service, args.connect)
    stats = {}
    try:
        wait_until_stopped()
        stats = worker.call("$STATS", timeout=5) if worker.alive else {}
    finally:
        worker.destroy()
        print("worker for %r stopped: %d request(s) served" % (args.service, stats.get("requests", 0)),
              file=sys.stderr)
    return exitstatus.OK


def _no_reply(exc, args, service):
    """Log a RequestTimeout in words; the exit status that says which case it is."""
    if not exc.connected:
        log.error("no broker answered at %s within %gs (is one running there?)",
                  args.connect, args.timeout * getattr(args, "retries", 1))
        return exitstatus.NO_ANSWER
    log.error("%s (the broker is there: is a worker for %r? 'zactors mdp mmi %s' tells)", exc, service, service)
    return exitstatus.FAILED


def run_request(args):
    from zactors.patterns.majordomo import Client, RequestTimeout, ServiceError

    curve = options.client_curve(args)
    replies = 0
    with Client(args.connect, timeout=args.timeout, retries=args.retries, framing=args.framing,
                curve=curve) as client:
        try:
            for _ in _print_replies(client.stream(args.service, *args.body)):
                replies += 1
        except RequestTimeout as exc:
            return _no_reply(exc, args, args.service)
        except ServiceError as exc:
            print("zactors mdp request: error: %s" % exc, file=sys.stderr)
            return exitstatus.FAILED
        except Interrupted:
            print("zactors mdp request: interrupted after %d repl%s" % (replies, "y" if replies == 1 else "ies"),
                  file=sys.stderr)
            raise
    return exitstatus.OK if replies else exitstatus.FAILED


def _print_replies(replies):
    replies = iter(replies)
    previous = next(replies, None)
    for reply in replies:
        print("PARTIAL", _show(previous), flush=True)
        yield previous
        previous = reply
    if previous is not None:
        print("FINAL  ", _show(previous), flush=True)
        yield previous


_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def _show(frames):
    """Frames as a JSON array of strings: unambiguous whatever the frames hold.

    A byte that is not UTF-8 shows as a ``\\udcXX`` escape (Python's
    ``surrogateescape``): ``json.loads(...)[i].encode("utf-8", "surrogateescape")``
    gives the frame back.
    """
    text = json.dumps([f.decode("utf-8", "surrogateescape") for f in frames], ensure_ascii=False)
    return _NOT_UTF8.sub(lambda m: "\\u%04x" % ord(m.group()), text)


def run_mmi(args):
    from zactors.patterns.majordomo import Client, RequestTimeout

    with Client(args.connect, timeout=args.timeout, retries=1, curve=options.client_curve(args)) as client:
        try:
            code = client.request("mmi.service", args.service)[-1][0]
        except Interrupted:
            print("zactors mdp mmi: interrupted before the broker answered", file=sys.stderr)
            raise
        except RequestTimeout as exc:
            if exc.connected:
                log.error("the broker at %s did not answer mmi.service within %gs", args.connect, args.timeout)
                return exitstatus.NO_ANSWER
            return _no_reply(exc, args, "mmi.service")
    print("%s: %s (%s)" % (args.service, "has workers" if code == b"200" else "no workers", code.decode()))
    return exitstatus.OK if code == b"200" else exitstatus.FAILED


def demo(out, node):
    """Majordomo: workers and a client through the node's broker, with partial replies"""
    from zactors.patterns.majordomo import Client, Worker

    class Words(Worker):
        service = b"words"

        def handle(self, request):
            for word in request[0].split():
                gevent.sleep(0.05)          # some work per word...
                yield [word.upper()]        # ...streamed as a PARTIAL
            return [b"%d words" % len(request[0].split())]

    class Echo(Worker):
        service = b"echo"

        def handle(self, request):
            return request

    broker = node.broker
    before = broker.call("INFO")["workers"]
    workers = [Words(broker.endpoint), Echo(broker.endpoint), Echo(broker.endpoint)]
    client = Client(broker.endpoint)
    calls = []
    try:
        deadline = time.monotonic() + 5
        while broker.call("INFO")["workers"] < before + 3 and time.monotonic() < deadline:
            gevent.sleep(0.01)
        out("the node's broker on %s; workers: 1 'words' (streams), 2 'echo'" % broker.endpoint)
        out("client.stream('words', ...): PARTIALs as the worker makes them, then the FINAL:")
        started = time.monotonic()
        for reply in client.stream("words", "majordomo streams partial replies"):
            out("  +%4.0f ms  %s" % ((time.monotonic() - started) * 1000, reply[0].decode()))
        calls.extend(gevent.spawn(client.request, "echo", b"%d" % i) for i in range(500))
        gevent.joinall(calls, raise_error=True)
        ok = all(call.value == [[b"%d" % i]] for i, call in enumerate(calls))
        out("500 concurrent echo requests from 500 greenlets: all answered correctly: %s" % ok)
        n, t = 1000, time.perf_counter()
        for i in range(n):
            client.request("echo", b"x")
        out("one client, one request at a time: %.0f req/s" % (n / (time.perf_counter() - t)))
        for service in ("echo", "nothing"):
            out("mmi.service %-8s -> %s" % (service, client.request("mmi.service", service)[-1][0].decode()))
        info = broker.call("INFO")
        out("broker: %s" % ", ".join("%s=%d" % kv for kv in sorted(info["counters"].items())))
    finally:
        gevent.killall(calls)   # interrupted (Ctrl-C): none is left to fail on the workers stopped next
        client.close()
        for worker in workers:
            worker.destroy()
