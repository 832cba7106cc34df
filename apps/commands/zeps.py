"""ZEPS commands: ``zactors zeps broker|publish|subscribe|consume|groups|streams|dump`` and the ZEPS part of
the demo (``consume`` and ``groups``: :mod:`._zeps_groups`)."""
import argparse
import datetime
import logging
import math
import os
import re
import sys
import time

import gevent
import zmq

from zactors.apps import contexts, exitstatus, options
from zactors.apps.stopping import Interrupted, serve
from zactors.apps.terminal import lines

from ._zeps_groups import register as _register_groups

ORDER = 40
log = logging.getLogger("zactors.zeps")

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5570"
#: where ``zactors up`` (default --data ./zactors-data) journals its streams
DEFAULT_JOURNAL = os.path.join("zactors-data", "zeps")


def register(sub):
    zeps = sub.add_parser("zeps", help="ZEPS: journaled publish-subscribe with replay and credit flow control",
                          description="ZEPS: a broker that journals every message and replays it to "
                                      "late or slow subscribers.")
    cmds = zeps.add_subparsers(dest="zeps_command", metavar="SUBCOMMAND")
    zeps.set_defaults(func=lambda args: zeps.print_help() or exitstatus.USAGE)

    broker = cmds.add_parser("broker", help="run a broker until Ctrl-C",
                             description="Run a ZEPS broker journaling under --journal, until Ctrl-C or "
                                         "SIGTERM (then a summary line and exit status 0).")
    broker.add_argument("--journal", required=True, metavar="DIR",
                        help="journal directory (one subdirectory per stream)")
    broker.add_argument("--bind", default=DEFAULT_ENDPOINT, type=options.bind_endpoint,
                        help="endpoint for clients, e.g. tcp://*:5570 for every interface (default: %(default)s)")
    broker.add_argument("--fsync", default="100ms", metavar="POLICY", type=options.fsync_policy,
                        help="'never', 'batch' (after every write) or a period such as 100ms or 1s "
                             "(default: %(default)s)")
    broker.add_argument("--ack", choices=("written", "synced", "replicated"), default="written",
                        help="acknowledge a message (PING-OK, so a publisher's flush; and deliver it) once it is "
                             "written (survives a crash of the broker) or synced (fsynced: survives a power "
                             "loss; fsync after every write round, group commit), or replicated (a pair: the "
                             "passive has it too, at --replica-ack: survives the loss of a machine) "
                             "(default: %(default)s)")
    pair = broker.add_argument_group("pair (Binary Star failover and replication)")
    pair.add_argument("--role", choices=("primary", "backup"),
                      help="run as one broker of a pair (with --peer and --pair-bind)")
    pair.add_argument("--peer", metavar="ENDPOINT", type=options.connect_endpoint,
                      help="the other broker's --pair-bind endpoint")
    pair.add_argument("--pair-bind", metavar="ENDPOINT", type=options.bind_endpoint,
                      help="endpoint for the pair link (heartbeats, replication), e.g. tcp://*:5571")
    pair.add_argument("--replica-ack", choices=("written", "synced"), default="written",
                      help="with --ack replicated: the level on both brokers (default: %(default)s)")
    pair.add_argument("--on-passive-lost", choices=("wait", "degrade"), default="wait",
                      help="with --ack replicated, when the passive is gone or lags --passive-timeout: wait "
                           "(flush fails with a timeout error) or degrade to --replica-ack, said in the log and "
                           "INFO (default: %(default)s)")
    pair.add_argument("--passive-timeout", type=options.positive_float, default=5.0, metavar="SECONDS",
                      help="see --on-passive-lost (default: %(default)s)")
    pair.add_argument("--peer-key", metavar="KEY",
                      help="with --curve: the other broker's public key (z85); the pair link hears only it")
    broker.add_argument("--retain", action="append", default=[], metavar="LIMIT", type=_limit,
                        help="keep at most this much per stream: a size (500M, 10G) or an age (30m, 12h, 7d); "
                             "may be given twice (default: keep everything)")
    broker.add_argument("--heartbeat", type=options.positive_float, default=1.0,
                        help="seconds between heartbeats (default: %(default)s)")
    broker.add_argument("--expiry", type=options.positive_float, default=5.0,
                        help="seconds of silence before a peer is dropped (default: %(default)s)")
    broker.add_argument("--max-message", type=_size, default=1 << 20, metavar="SIZE",
                        help="largest key + body accepted (default: 1M)")
    broker.add_argument("--max-credit", type=_size, default=32 << 20, metavar="SIZE",
                        help="credit one subscriber may hold: bytes sent to it and not yet drained, and "
                             "its balance (default: 32M)")
    broker.add_argument("--max-credit-total", type=_size, default=64 << 20, metavar="SIZE",
                        help="credit all subscribers together may hold; more waits for them to drain "
                             "(default: 64M)")
    broker.add_argument("--require-tokens", action="store_true",
                        help="refuse the credit of subscribers that do not echo probe tokens (spec-only "
                             "clients, whose drain cannot be checked: docs/zeps-extensions.md)")
    broker.add_argument("--max-streams-per-peer", type=options.positive_int, default=16, metavar="N",
                        help="streams one peer (its key, else its connection) may create (default: 16)")
    broker.add_argument("--group-ack-wait", type=options.positive_float, default=30.0, metavar="SECONDS",
                        help="consumer groups: redeliver what is not acknowledged within this (default: 30; a "
                             "group created with its own keeps it)")
    broker.add_argument("--group-max-deliver", type=options.positive_int, default=5, metavar="N",
                        help="consumer groups: deliveries before the dead-letter stream (default: 5)")
    broker.add_argument("--group-dlq", default="{stream}.dlq.{group}", metavar="TEMPLATE",
                        help="consumer groups: the dead-letter stream's name (default: {stream}.dlq.{group})")
    broker.add_argument("--stream-idle", type=options.positive_float, default=60.0, metavar="SECONDS",
                        help="close a stream without peers after SECONDS, releasing its files; one that "
                             "never held a message is deleted (default: 60)")
    options.curve_options(broker, "server")
    broker.add_argument("--permissions", metavar="FILE", type=_permissions,
                        help="with --curve: which client keys may publish and subscribe to which streams "
                             "(lines of KEY ACTIONS STREAMS; see docs/patterns/zeps.md)")
    broker.add_argument("--stats", type=options.non_negative_float, default=0, metavar="SECONDS",
                        help="log streams and counters every SECONDS (default: never)")
    broker.set_defaults(func=run_broker)

    publish = cmds.add_parser("publish", help="publish BODY, or each line of stdin, under KEY",
                              description="Publish to STREAM under routing KEY: BODY if given, else one message "
                                          "per line of standard input, idempotently: what the broker has not "
                                          "confirmed is sent again if the peering is lost (a broker killed and "
                                          "restarted), and the broker journals each line once.  Returns once "
                                          "the broker has written all (exit status 0), 1 if it refused any or "
                                          "did not confirm some in time (the lines not confirmed are named; "
                                          "when its journal refuses them, a full disk, it says exactly how "
                                          "many it journaled: 'N of M journaled (lines 1-N); lines N+1-M "
                                          "refused: REASON'), 3 if no broker answers.")
    publish.add_argument("stream", help="stream name")
    publish.add_argument("key", help="routing key")
    publish.add_argument("body", nargs="?", help="message body (default: each line of stdin, until end of input "
                                                 "or Ctrl-D)")
    publish.add_argument("--no-resend", dest="resend", action="store_false",
                         help="do not send again what a lost peering left unconfirmed: name the lines that may "
                              "be lost instead (for a broker without the PUBLISH-ID extension)")
    _connect(publish)
    publish.set_defaults(func=run_publish)

    subscribe = cmds.add_parser("subscribe", help="print messages of STREAM matching PATTERN",
                                description="Print 'SEQ<TAB>KEY<TAB>BODY' for each message of STREAM whose key "
                                            "matches PATTERN (a prefix; re:REGEX or glob:GLOB), until Ctrl-C "
                                            "(exit status 130) or --count messages (0).  A stream that does "
                                            "not exist is exit status 1, unless --wait.")
    subscribe.add_argument("stream", help="stream name")
    subscribe.add_argument("pattern", nargs="?", default="", help="subscription pattern (default: everything)")
    start = subscribe.add_mutually_exclusive_group()
    start.add_argument("--from", dest="from_seq", type=options.count, metavar="SEQ",
                       help="start at sequence SEQ (default: 1, the whole journal)")
    start.add_argument("--since", type=_time, metavar="TIME",
                       help="start at a time: seconds since the epoch, an ISO date, or an age such as 10m")
    start.add_argument("--new", action="store_true", help="only messages published from now on")
    subscribe.add_argument("--count", type=options.count, default=0, help="stop after N messages (default: never)")
    subscribe.add_argument("--wait", type=options.positive_float, nargs="?", const=math.inf, metavar="SECONDS",
                           help="if STREAM does not exist yet, create it (empty) and wait for its first message, "
                                "up to SECONDS if given (then exit status 1) (default: say so and exit 1)")
    subscribe.add_argument("--window", type=_size, default=8 << 20, metavar="SIZE",
                           help="credit window (default: 8M)")
    _connect(subscribe)
    subscribe.set_defaults(func=run_subscribe)

    streams = cmds.add_parser("streams", help="show a broker's streams, subscribers and counters",
                              description="Ask a running broker for its streams (sequence range, rate, bytes "
                                          "on disk), subscribers (patterns, mode, lag, credit) and counters; "
                                          "exit status 3 if no broker answers.")
    _connect(streams)
    streams.add_argument("--json", action="store_true", help="print the raw JSON")
    streams.set_defaults(func=run_streams)

    _register_groups(cmds)

    dump = cmds.add_parser("dump", help="print a stream's journal offline",
                           description="Print the records of a stream (no broker needed) in aligned columns: "
                                       "sequence, time journaled (local time, with its UTC offset), key, "
                                       "body.  Given a broker's journal directory, list its streams.")
    dump.add_argument("target", metavar="STREAM|DIR",
                      help="a stream name (found under --journal), a stream's journal directory, or a broker's "
                           "journal directory")
    dump.add_argument("--journal", metavar="DIR", default=None,
                      help="the broker's journal directory, for a stream name (default: %s, where zactors up "
                           "journals)" % DEFAULT_JOURNAL)
    dump.add_argument("--from", dest="from_seq", type=options.positive_int, default=None, metavar="SEQ",
                      help="first sequence")
    dump.add_argument("--count", type=options.count, default=0, help="stop after N records (default: all)")
    dump.set_defaults(func=run_dump)


def _connect(parser):
    contexts.connect_options(parser, "zeps", DEFAULT_ENDPOINT, pair=True)
    parser.add_argument("--timeout", type=options.positive_float, default=5.0,
                        help="seconds to wait for the broker (default: %(default)s)")


class NoMessage(Exception):
    """``subscribe --wait SECONDS`` saw no message in time (exit status 1)."""


class NoAnswer(Exception):
    """Nobody answered at the endpoint (exit status 3)."""

    exit_status = exitstatus.NO_ANSWER


def _answered(func, *args, **kwargs):
    """Call a client constructor or query; a broker that never answers is :class:`NoAnswer`."""
    from zactors.patterns.zeps import ZepsError
    try:
        return func(*args, **kwargs)
    except ZepsError as exc:
        if str(exc).startswith("no answer"):
            raise NoAnswer("%s (is a ZEPS broker running there?)" % exc) from None
        raise


_AGES = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


_size = options.size


def _age(text):
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)", text.strip().lower())
    if not match:
        return None
    return float(match.group(1)) * _AGES[match.group(2)]


def _time(text):
    """Seconds since the epoch from a number, an ISO date, or an age (10m: ten minutes ago)."""
    age = _age(text)
    if age is not None:
        return time.time() - age
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a time: say 1700000000, 2026-11-23T12:00, or 10m for ten "
                                         "minutes ago" % text) from None


def _limit(text):
    """A retention limit: ``("age", seconds)`` or ``("size", bytes)``."""
    age = _age(text)
    if age is not None:
        if age <= 0:
            raise argparse.ArgumentTypeError("%r: a retention age must be above 0" % text)
        return "age", age
    try:
        return "size", _size(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError("%r is neither a size (500M, 10G) nor an age (30m, 12h, 7d)" % text) \
            from None


def _permissions(path):
    from zactors.patterns.zeps.permissions import Permissions, PermissionsError
    try:
        return Permissions.load(path)
    except OSError as exc:
        raise argparse.ArgumentTypeError("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    except PermissionsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_time.__name__ = "time"
_limit.__name__ = "retention limit"
_permissions.__name__ = "permissions file"


def _dlq_template(text):
    """``--group-dlq``: a name with ``{stream}`` and ``{group}`` (UsageError for anything else)."""
    try:
        text.format(stream="s", group="g")
    except (KeyError, IndexError, ValueError) as exc:
        raise options.UsageError("--group-dlq %r: use {stream} and {group} only (%s)" % (text, exc)) from None
    return text


def run_broker(args):
    from zactors.patterns.zeps.broker import Broker

    options.check_curve(args, "server")
    if args.permissions is not None and not args.curve:
        raise options.UsageError("--permissions needs --curve: permissions are granted to client keys")
    if args.heartbeat > args.expiry:
        raise options.UsageError("--heartbeat (%gs) must not be longer than --expiry (%gs)"
                                 % (args.heartbeat, args.expiry))
    options.writable_directory(args.journal, "journal")
    if args.ack == "synced" and args.fsync == "never":
        raise options.UsageError("--ack synced needs fsync: not --fsync never")
    pair = {}
    if args.role is None:
        if args.peer or args.pair_bind or args.ack == "replicated":
            raise options.UsageError("--peer, --pair-bind and --ack replicated need --role primary|backup")
    elif not (args.peer and args.pair_bind):
        raise options.UsageError("--role needs --peer (the other broker's --pair-bind) and --pair-bind")
    elif args.curve and not args.peer_key:
        raise options.UsageError("--role with --curve needs --peer-key (the other broker's public key)")
    else:
        pair = dict(role=args.role, peer=args.peer, pair_endpoint=args.pair_bind, replica_ack=args.replica_ack,
                    on_passive_lost=args.on_passive_lost, passive_timeout=args.passive_timeout,
                    peer_key=args.peer_key)
    limits = dict(args.retain)
    auth = None
    if args.curve:
        from zactors.actors.auth import Authenticator
        auth = Authenticator(curve=args.curve_clients or "*")
    try:
        broker = Broker(args.journal, args.bind, fsync=args.fsync, ack=args.ack, heartbeat=args.heartbeat,
                        expiry=args.expiry, max_message=args.max_message, max_credit=args.max_credit,
                        max_credit_total=args.max_credit_total,
                        require_tokens=args.require_tokens, max_streams_per_peer=args.max_streams_per_peer,
                        stream_idle=args.stream_idle, retain_bytes=limits.get("size"),
                        retain_seconds=limits.get("age"), curve=args.curve, permissions=args.permissions,
                        group_ack_wait=args.group_ack_wait, group_max_deliver=args.group_max_deliver,
                        group_dlq=_dlq_template(args.group_dlq), **pair)
    except BaseException as exc:
        if auth is not None:
            auth.destroy()
        if isinstance(exc, zmq.ZMQError):
            raise options.bind_error(args.bind, exc) from None
        raise
    log.info("broker on %s, journal %s (ack %s, fsync %s%s%s); Ctrl-C stops", broker.endpoint, broker.journal_dir,
             args.ack, "after every write" if args.ack == "synced" else
             args.fsync if isinstance(args.fsync, str) else "every %gs" % args.fsync,
             "" if args.curve is None else ", CURVE, public key %s" % args.curve.public.decode(),
             "" if args.permissions is None else ", %d grants" % len(args.permissions.grants))
    if pair:
        log.info("pair: %s, link %s, peer %s", args.role, broker.pair_endpoint, args.peer)
    def summary(info):
        streams = info.get("streams", {})
        return "broker stopped: %d stream(s), %d message(s) journaled, %d peer(s) attached" % (
            len(streams), sum(s["last_seq"] - s["first_seq"] + 1 for s in streams.values()),
            info.get("counters", {}).get("attached", 0))

    return serve(broker, summary, describe=_describe, every=args.stats, cleanup=(auth,))


def _describe(info):
    """One line of the server's INFO, for --stats."""
    streams = ", ".join("%s: %d..%d %.0f/s %d subscribers"
                        % (name, s["first_seq"], s["last_seq"], s["rate"], len(s["subscribers"]))
                        for name, s in sorted(info["streams"].items())) or "no streams"
    return "%s | %s" % (streams, " ".join("%s=%d" % kv for kv in sorted(info["counters"].items())))


def run_publish(args):
    from zactors.patterns.zeps import MessagesLost, Publisher, ZepsError

    pub = _answered(Publisher, args.connect, args.stream, curve=options.client_curve(args), timeout=args.timeout,
                    idempotent=args.resend)
    count = 0
    flushed = False
    lost = []           # (first, last) input numbers (lines) the broker may have lost
    failure = None      # why the rest is not confirmed (the broker refused, or did not answer in time)
    try:
        if args.body is not None:
            pub.publish(args.key, args.body.encode())
            count = 1
        elif sys.stdin.isatty():  # a person types: wait without blocking the hub (heartbeats go on)
            print("zactors zeps publish: reading messages from the terminal, one a line, until Ctrl-D "
                  "(or give BODY)", file=sys.stderr, flush=True)
            for line in lines(sys.stdin.fileno()):
                pub.publish(args.key, line)
                count += 1
        else:
            for line in sys.stdin.buffer:
                pub.publish(args.key, line.rstrip(b"\r\n"))
                count += 1
                if count % 1000 == 0:
                    gevent.sleep(0)
        for _ in range(10):  # a loss is said once; flush again for a verdict on the rest
            try:
                pub.flush(timeout=max(args.timeout, 10.0))
                flushed = True
                break
            except MessagesLost as exc:
                lost += exc.ranges
    except ZepsError as exc:  # said in the one line below, with what it leaves unconfirmed
        failure = str(exc)
    finally:
        pub.close()
        what = "line" if args.body is None else "message"
        parts = ["published %d message(s) to %s" % (count, args.stream)]
        if lost:
            parts.append("%s %s (%d message(s)) may be lost: the broker lost the peering before confirming them"
                         % (what + "s" if sum(b - a + 1 for a, b in lost) > 1 else what, _ranges(lost),
                            sum(b - a + 1 for a, b in lost)))
        confirmed = pub.confirmed
        if flushed:
            parts.append("everything else written by the broker" if lost else "written by the broker")
            if pub.stats["resent"]:
                parts.append("%d sent again after the broker lost the peering (each journaled once)"
                             % pub.stats["resent"])
            if pub.stats["resent_refused"]:
                parts.append("%d sent again after the broker refused them (each journaled once)"
                             % pub.stats["resent_refused"])
        elif pub.journaled is not None and failure:  # the broker refused, and said what it journaled
            parts = _journaled_parts(pub, count, what)   # its reason once, in there
        elif confirmed < count:   # what we sent is not what the broker kept: say "sent", and which are unsure
            parts[0] = "sent %d message(s) to %s" % (count, args.stream)
            parts.append("%ss %d-%d not confirmed written" % (what, confirmed + 1, count) if confirmed + 1 < count
                         else "%s %d not confirmed written" % (what, count))
        if failure and (pub.journaled is None or pub.refusal not in failure):  # (not said in there)
            parts.append(failure)
        print("; ".join(parts), file=sys.stderr)
    if lost or failure:
        return exitstatus.FAILED
    return exitstatus.OK


def _journaled_parts(pub, count, what):
    """An idempotent publish the broker refused: "N of M journaled (lines 1-N); lines N+1-M refused:
    REASON", from the JOURNALED field of its refusals (the lines it holds unwritten said apart)."""
    done = min(pub.confirmed, count)
    held = min(max(pub.held, done), count)
    lines = lambda a, b: "%s %s" % (what + "s" if b > a else what, _ranges([(a, b)]))  # noqa: E731
    parts = ["%d of %d journaled%s" % (done, count, " (%s)" % lines(1, done) if done else "")]
    if held > done:
        parts.append("%s held unwritten by the broker (written if it gets room before it stops)"
                     % lines(done + 1, held))
    if count > held:
        parts.append("%s refused: %s" % (lines(held + 1, count), pub.refusal))
    elif pub.refusal:
        parts[-1] += ": " + pub.refusal
    return parts


def _ranges(ranges):
    return ", ".join("%d" % a if a == b else "%d-%d" % (a, b) for a, b in ranges)


def run_subscribe(args):
    from zactors.patterns.zeps import NoSuchStream, Subscriber

    out = sys.stdout
    seen = 0
    sub = None
    try:
        settings = dict(from_seq=args.from_seq, since=args.since, new=args.new or None, window=args.window,
                        curve=options.client_curve(args), timeout=args.timeout)
        first = None            # --wait SECONDS: the deadline of the first message
        try:
            sub = _answered(Subscriber, args.connect, args.stream, args.pattern.encode(), **settings)
        except NoSuchStream:
            if args.wait is None:   # in this command's words, not the library's (wait=True)
                raise NoMessage("no stream %r on the ZEPS broker at %s (--wait waits for its first message)"
                                % (args.stream, args.connect)) from None
            log.info("no stream %s yet: waiting for its first message (Ctrl-C stops)", args.stream)
            sub = _answered(Subscriber, args.connect, args.stream, args.pattern.encode(), wait=True, **settings)
            first = None if math.isinf(args.wait) else args.wait
        while True:
            message = sub.get(first)   # None: closed, or no first message within --wait
            if message is None:
                if first is not None:
                    raise NoMessage("stream %s got no message within %gs (--wait)" % (args.stream, first))
                break
            first = None
            out.write("%d\t%s\t%s\n" % (message.seq, message.key.decode("utf-8", "backslashreplace"),
                                        message.body.decode("utf-8", "backslashreplace")))
            seen += 1
            if seen == args.count:
                break
            if not sub.pending:  # about to wait: show what we have
                out.flush()
        out.flush()
    except Interrupted:  # also while still connecting: the line is said either way
        last = sub.last_seq if sub is not None else None
        print("zactors zeps subscribe: interrupted after %d message(s)%s" % (
            seen, "" if last is None else "; last sequence %d (--from %d resumes)" % (last, last + 1)),
              file=sys.stderr)
        raise
    finally:
        if sub is not None:
            sub.destroy()
    return exitstatus.OK


def run_streams(args):
    import json

    from zactors.patterns.zeps import query

    info = _answered(query, args.connect, curve=options.client_curve(args), timeout=args.timeout)
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return exitstatus.OK
    journal = info.get("journal", "not shown to this key")   # a broker with permissions hides it
    print("broker %s, journal %s, ack %s, %d peer(s)" % (info["endpoint"], journal, info.get("ack", "?"),
                                                         info["peers"]))
    for one in info.get("cluster", [info]):     # a cluster map: each pair's active
        if "pair" in one:
            print(_pair_line(one["pair"]))
    for name, s in sorted(info["streams"].items()):
        print("stream %-20s seq %d..%d  written %d  synced %d  %.0f msg/s  %s on disk" % (
            name, s["first_seq"], s["last_seq"], s["written_seq"], s["synced_seq"], s["rate"], _human(s["bytes"])))
        for sub in s["subscribers"]:
            print("  subscriber %s  %-6s lag %-8d credit %-10d delivered %-8d patterns %s" % (
                sub["peer"], sub["mode"], sub["lag"], sub["credit"], sub["delivered"],
                " ".join(repr(x) for x in sub["patterns"])))
    print("counters: %s" % (" ".join("%s=%d" % kv for kv in sorted(info["counters"].items())) or "none"))
    return exitstatus.OK


def _pair_line(pair):
    """One line about a broker of a pair: role, state, the peer, replication lag, the last failover."""
    last = pair.get("last_failover")
    when = "never" if not last else "%s -> %s at %s (%s)" % (
        last["from"], last["to"], datetime.datetime.fromtimestamp(last["time"]).strftime("%H:%M:%S"), last["reason"])
    lag = sum(pair.get("replication_lag", {}).values())
    return "pair: %s %s%s, peer %s (%s), replication lag %d message(s)%s, last change %s" % (
        pair["role"], pair["state"], "" if pair.get("ready", True) else " (catching up)",
        pair.get("peer_endpoint") or pair.get("peer"), pair.get("peer_state") or "silent", lag,
        ", DEGRADED" if pair.get("degraded") else "", when)


def _human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return "%.0f %s" % (n, unit) if unit == "B" else "%.1f %s" % (n, unit)
        n /= 1024.0


def run_dump(args):
    from zactors.actors.journal import JournalError, JournalReader
    from zactors.patterns.zeps.names import stream_name

    directory = _dump_directory(args)
    if not any(name.endswith(".seg") for name in os.listdir(directory)):
        streams = sorted((stream_name(d), d) for d in os.listdir(directory)
                         if os.path.isdir(os.path.join(directory, d)) and stream_name(d) is not None)
        if not streams:
            raise options.UsageError("%s holds no journal segments and no stream directories" % directory)
        for name, sub in streams:
            try:
                with JournalReader(os.path.join(directory, sub)) as reader:
                    print("%-30s %-30s seq %d..%d" % (name.decode("ascii", "replace"), sub, reader.first_seq,
                                                      reader.last_seq))
            except JournalError as exc:
                print("%-30s %-30s unreadable: %s" % (name.decode("ascii", "replace"), sub, exc))
        return exitstatus.OK
    out = sys.stdout
    with JournalReader(directory) as reader:
        seq_width = max(3, len(str(reader.last_seq)))
        key_width = None        # set by the first 1000 records, then only grows
        seen = 0
        chunk = []
        for record in reader.records(from_seq=args.from_seq):
            chunk.append(record)
            seen += 1
            if len(chunk) == 1000 or seen == args.count:
                key_width = _write_records(out, chunk, seq_width, key_width)
                chunk = []
            if seen == args.count:
                break
        if chunk or key_width is None:
            _write_records(out, chunk, seq_width, key_width)
    return exitstatus.OK


def _dump_directory(args):
    """The directory ``zeps dump`` reads: ``args.target`` if it is one, else stream ``target`` under the journal."""
    from zactors.patterns.zeps.names import stream_directory, stream_name

    if os.path.isdir(args.target) and args.journal is None:
        return args.target
    journal = args.journal or DEFAULT_JOURNAL
    if not os.path.isdir(journal):
        raise options.UsageError("%s: no such directory, and no journal directory %s to find a stream of that "
                                 "name in (give --journal DIR, the broker's)" % (args.target, journal))
    directory = os.path.join(journal, stream_directory(args.target.encode()))
    if not os.path.isdir(directory):
        names = sorted(stream_name(d).decode("ascii", "replace") for d in os.listdir(journal)
                       if stream_name(d) is not None and os.path.isdir(os.path.join(journal, d)))
        raise options.UsageError("no stream %r in journal directory %s (%s)" % (
            args.target, journal, "streams there: " + ", ".join(names[:20]) if names else "it holds no stream"))
    return directory


def _write_records(out, records, seq_width, key_width):
    """Write ``records`` in aligned columns, after the header on the first call (``key_width`` None);
    returns the key column's width (it only grows, up to 40)."""
    keys = [r.key.decode("utf-8", "backslashreplace") for r in records]
    width = max([3] + [min(40, len(k)) for k in keys] + [key_width or 0])
    if key_width is None:
        out.write("%*s  %-32s  %-*s  %s\n" % (seq_width, "SEQ", "TIME", width, "KEY", "BODY"))
    for record, key in zip(records, keys):
        stamp = datetime.datetime.fromtimestamp(record.timestamp).astimezone().isoformat(timespec="microseconds")
        out.write("%*d  %-32s  %-*s  %s\n" % (seq_width, record.seq, stamp, width, key,
                                              record.body.decode("utf-8", "backslashreplace")))
    return width


def demo(out, node):
    """ZEPS: a journaled stream on the node, a slow subscriber that catches up, a late joiner that replays history"""
    from zactors.apps.options import client_endpoint
    from zactors.patterns.zeps import Publisher, Subscriber

    broker = node.zeps
    endpoint = client_endpoint(broker.endpoint)
    pub = Publisher(endpoint, "ticks")
    fast = Subscriber(endpoint, "ticks")
    slow = Subscriber(endpoint, "ticks", window=4096)   # a small window: it falls behind at once
    late = None
    readers = []
    try:
        n = 20000
        out("the node's ZEPS broker on %s, journal in %s" % (endpoint, broker.journal_dir))
        started = time.perf_counter()
        for i in range(n):
            pub.publish(b"eu.%d" % (i % 7) if i % 2 else b"us.%d" % (i % 5), b"tick %d" % i)
            if i % 1000 == 0:
                gevent.sleep(0)
        pub.flush()
        out("published %d messages and flushed (all written): %.0f msg/s"
            % (n, n / (time.perf_counter() - started)))

        def take(sub, count, delay=0.0):
            seqs = []
            for _ in range(count):
                seqs.append(sub.get(timeout=30).seq)
                if delay and len(seqs) % 2000 == 0:
                    gevent.sleep(delay)
            return seqs

        readers += [gevent.spawn(take, fast, n), gevent.spawn(take, slow, n, 0.05)]
        gevent.joinall(readers, raise_error=True)
        ok = [r.value == list(range(1, n + 1)) for r in readers]
        info = broker.call("INFO")
        out("fast subscriber: %d messages, in order, none missing: %s" % (len(readers[0].value), ok[0]))
        out("slow subscriber (4 KiB credit window, pausing as it reads): switched to replay %d time(s), "
            "caught up with all %d in order: %s" % (info["counters"].get("to_replay", 0), n, ok[1]))
        late = Subscriber(endpoint, "ticks", b"eu.3", from_seq=0)
        history = take(late, sum(1 for i in range(n) if i % 2 and i % 7 == 3))
        pub.publish(b"eu.3", b"live")
        pub.flush()
        live = late.get(timeout=10)
        out("late joiner on 'eu.3' from sequence 1: replayed %d matching messages, then live: %d %s"
            % (len(history), live.seq, live.body.decode()))
        stream = broker.call("INFO")["streams"]["ticks"]
        out("stream 'ticks': sequences %d..%d, %s on disk"
            % (stream["first_seq"], stream["last_seq"], _human(stream["bytes"])))
    finally:
        gevent.killall(readers)  # interrupted: before their subscribers go
        for sub in (fast, slow, late):
            if sub is not None:
                sub.destroy()
        pub.close()
