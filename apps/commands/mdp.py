"""Majordomo commands: ``zactors mdp broker|worker|request|mmi`` and the Majordomo part of the demo."""
import logging
import signal
import time

import gevent
from gevent.event import Event

ORDER = 20
log = logging.getLogger("zactors.mdp")

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"


def register(sub):
    mdp = sub.add_parser("mdp", help="Majordomo (18/MDP v0.2): run a broker or a worker, call a service",
                         description="Majordomo service-oriented request-reply (18/MDP v0.2).")
    cmds = mdp.add_subparsers(dest="mdp_command", metavar="SUBCOMMAND")
    mdp.set_defaults(func=lambda args: mdp.print_help() or 2)

    broker = cmds.add_parser("broker", help="run a broker until Ctrl-C",
                             description="Run a Majordomo broker; clients and workers connect to --bind.")
    broker.add_argument("--bind", default=DEFAULT_ENDPOINT,
                        help="endpoint for clients and workers, e.g. tcp://*:5555 for every interface "
                             "(default: %(default)s)")
    broker.add_argument("--worker-bind", help="a second endpoint, for workers only")
    broker.add_argument("--heartbeat", type=float, default=2.5, help="seconds between heartbeats (default: %(default)s)")
    broker.add_argument("--liveness", type=int, default=3, help="heartbeats missed before a worker is dead (default: %(default)s)")
    broker.add_argument("--expiry", type=float, default=10.0,
                        help="seconds a request waits for a service that has no worker (default: %(default)s)")
    broker.add_argument("--max-queue", type=int, default=10000, help="requests queued per service (default: %(default)s)")
    _framing(broker)
    broker.add_argument("--curve", metavar="KEYFILE",
                        help="serve CURVE with this secret certificate (zactors keygen makes one)")
    broker.add_argument("--curve-clients", metavar="DIR",
                        help="with --curve: accept only clients and workers whose public key is in DIR "
                             "(default: anyone who knows the broker's public key)")
    broker.add_argument("--stats", type=float, default=0, metavar="SECONDS",
                        help="log services, queues and counters every SECONDS (default: never)")
    broker.set_defaults(func=run_broker)

    worker = cmds.add_parser("worker", help="run a sample worker that echoes requests",
                             description="Serve SERVICE by echoing each request back, optionally as partials first.")
    worker.add_argument("service", help="service name to register")
    _connect(worker)
    worker.add_argument("--partials", type=int, default=0, help="send the echo N times as PARTIAL first (default: 0)")
    worker.add_argument("--delay", type=float, default=0.0, help="seconds to wait before each reply (default: 0)")
    worker.add_argument("--heartbeat", type=float, default=2.5, help="seconds between heartbeats (default: %(default)s)")
    _framing(worker)
    worker.set_defaults(func=run_worker)

    request = cmds.add_parser("request", help="send one request and print every reply",
                              description="Send BODY frames to SERVICE; print each PARTIAL and the FINAL reply.")
    request.add_argument("service", help="service name")
    request.add_argument("body", nargs="+", help="request body frames")
    _connect(request)
    request.add_argument("--timeout", type=float, default=2.5, help="seconds to wait for each reply (default: %(default)s)")
    request.add_argument("--retries", type=int, default=3, help="attempts before giving up (default: %(default)s)")
    _framing(request)
    request.set_defaults(func=run_request)

    mmi = cmds.add_parser("mmi", help="ask the broker whether SERVICE has workers (mmi.service)",
                          description="Exit status 0 if SERVICE has workers (200), 1 if not (404).")
    mmi.add_argument("service", help="service name")
    _connect(mmi)
    mmi.add_argument("--timeout", type=float, default=2.5, help="seconds to wait (default: %(default)s)")
    mmi.set_defaults(func=run_mmi)


def _connect(parser):
    parser.add_argument("--connect", default=DEFAULT_ENDPOINT, help="broker endpoint (default: %(default)s)")
    parser.add_argument("--curve", metavar="KEYFILE", help="connect with CURVE, using this secret certificate")
    parser.add_argument("--curve-server", metavar="KEYFILE", help="with --curve: the broker's public certificate")


def _curve_client(args):
    """``(broker public key, own keys)`` from --curve/--curve-server, or None."""
    if not args.curve:
        return None
    if not args.curve_server:
        raise ValueError("--curve needs --curve-server (the broker's public key file)")
    from zactors.actors.auth import load_keypair, load_public_key
    return load_public_key(args.curve_server), load_keypair(args.curve)


def _framing(parser):
    parser.add_argument("--framing", choices=("spec", "majortomo"), default="spec",
                        help="wire framing: 'spec' (18/MDP as written) or 'majortomo' (majortomo 0.2.0 peers)")


def _until_signal():
    """Park until SIGINT or SIGTERM."""
    stop = Event()
    handlers = [gevent.signal_handler(sig, stop.set) for sig in (signal.SIGINT, signal.SIGTERM)]
    try:
        stop.wait()
    finally:
        for handler in handlers:
            handler.cancel()


def run_broker(args):
    from zactors.patterns.majordomo import Broker

    keys, auth = None, None
    if args.curve:
        from zactors.actors.auth import Authenticator, load_keypair
        keys = load_keypair(args.curve)
        if keys.secret is None:
            raise ValueError("%s holds no secret key (use the .key_secret file)" % args.curve)
        auth = Authenticator(curve=args.curve_clients or "*")
    elif args.curve_clients:
        raise ValueError("--curve-clients needs --curve")
    try:
        broker = Broker(args.bind, worker_endpoint=args.worker_bind, heartbeat=args.heartbeat,
                        liveness=args.liveness, request_expiry=args.expiry, max_queue=args.max_queue,
                        framing=args.framing, curve=keys)
    except BaseException:
        if auth is not None:
            auth.destroy()
        raise
    log.info("broker on %s%s (%s framing%s); Ctrl-C stops", broker.endpoint,
             "" if not args.worker_bind else ", workers on %s" % broker.worker_endpoint, args.framing,
             "" if keys is None else ", CURVE, public key %s" % keys.public.decode())
    ticker = gevent.spawn(_log_stats, broker, args.stats) if args.stats > 0 else None
    try:
        _until_signal()
    finally:
        if ticker is not None:
            ticker.kill()
        broker.destroy()
        if auth is not None:
            auth.destroy()
    return 0


def _log_stats(broker, every):
    while True:
        gevent.sleep(every)
        info = broker.call("INFO", timeout=5)
        services = ", ".join("%s: %d workers (%d idle), %d queued" % (name, s["workers"], s["idle"], s["queued"])
                             for name, s in sorted(info["services"].items())) or "no services"
        log.info("%s | %s", services, " ".join("%s=%d" % kv for kv in sorted(info["counters"].items())))


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


def run_worker(args):
    worker = _echo_worker(args.partials, args.delay)(args.connect, args.service, heartbeat=args.heartbeat,
                                                     framing=args.framing, curve=_curve_client(args))
    log.info("worker for %r connected to %s; Ctrl-C stops", args.service, args.connect)
    try:
        _until_signal()
    finally:
        worker.destroy()
    return 0


def run_request(args):
    from zactors.patterns.majordomo import Client, RequestTimeout

    with Client(args.connect, timeout=args.timeout, retries=args.retries, framing=args.framing,
                curve=_curve_client(args)) as client:
        try:
            replies = list(_print_replies(client.stream(args.service, *args.body)))
        except RequestTimeout as exc:
            log.error("%s (is a broker running there, and a worker for %r?)", exc, args.service)
            return 1
    return 0 if replies else 1


def _print_replies(replies):
    replies = iter(replies)
    previous = next(replies, None)
    for reply in replies:
        print("PARTIAL", _show(previous))
        yield previous
        previous = reply
    if previous is not None:
        print("FINAL  ", _show(previous))
        yield previous


def _show(frames):
    return " | ".join(f.decode("utf-8", "backslashreplace") for f in frames)


def run_mmi(args):
    from zactors.patterns.majordomo import Client, RequestTimeout

    with Client(args.connect, timeout=args.timeout, retries=1, curve=_curve_client(args)) as client:
        try:
            code = client.request("mmi.service", args.service)[-1][0]
        except RequestTimeout as exc:
            log.error("%s (is a broker running there?)", exc)
            return 1
    print("%s: %s (%s)" % (args.service, "has workers" if code == b"200" else "no workers", code.decode()))
    return 0 if code == b"200" else 1


def demo(out):
    """Majordomo: a broker, workers and a client, with partial replies"""
    from zactors.patterns.majordomo import Broker, Client, Worker

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

    broker = Broker("tcp://127.0.0.1:*", heartbeat=0.5)
    workers = [Words(broker.endpoint, heartbeat=0.5), Echo(broker.endpoint, heartbeat=0.5),
               Echo(broker.endpoint, heartbeat=0.5)]
    client = Client(broker.endpoint)
    try:
        deadline = time.monotonic() + 5
        while broker.call("INFO")["workers"] < 3 and time.monotonic() < deadline:
            gevent.sleep(0.01)
        out("broker on %s; workers: 1 'words' (streams), 2 'echo'" % broker.endpoint)
        out("client.stream('words', ...): PARTIALs as the worker makes them, then the FINAL:")
        started = time.monotonic()
        for reply in client.stream("words", "majordomo streams partial replies"):
            out("  +%4.0f ms  %s" % ((time.monotonic() - started) * 1000, reply[0].decode()))
        calls = [gevent.spawn(client.request, "echo", b"%d" % i) for i in range(500)]
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
        client.close()
        for worker in workers:
            worker.destroy()
        broker.destroy()
