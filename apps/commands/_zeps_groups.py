"""``zactors zeps consume STREAM GROUP`` and ``zactors zeps groups``: ZEPS consumer groups from the shell."""
import argparse
import json
import sys

from zactors.apps import exitstatus, options
from zactors.apps.stopping import Interrupted


def register(cmds):
    from .zeps import _connect, _size

    consume = cmds.add_parser("consume", help="print and acknowledge messages of STREAM as a member of GROUP",
                              description="Join GROUP of STREAM (created if it does not exist) and print "
                                          "'SEQ<TAB>KEY<TAB>BODY' for each message the group hands this member; "
                                          "each is acknowledged once its line is written out.  Until Ctrl-C "
                                          "(exit status 130) or --count messages.")
    consume.add_argument("stream", help="stream name")
    consume.add_argument("group", help="group name")
    consume.add_argument("pattern", nargs="?", default="", help="a new group's pattern (default: everything)")
    consume.add_argument("--start", default="earliest", type=_start, metavar="WHERE",
                         help="where a new group starts: earliest, latest or a sequence (default: earliest)")
    consume.add_argument("--ack-wait", type=options.positive_float, default=None, metavar="SECONDS",
                         help="a new group's ack wait (default: the broker's)")
    consume.add_argument("--max-deliver", type=options.positive_int, default=None, metavar="N",
                         help="a new group's delivery limit before the dead-letter stream (default: the broker's)")
    consume.add_argument("--count", type=options.count, default=0, help="stop after N messages (default: never)")
    consume.add_argument("--window", type=_size, default=1 << 20, metavar="SIZE",
                         help="bytes of unacknowledged messages this member holds at most (default: 1M)")
    _connect(consume)
    consume.set_defaults(func=run_consume)

    groups = cmds.add_parser("groups", help="show a broker's consumer groups",
                             description="Ask a running broker for its consumer groups: cursor, lag, pending, "
                                         "oldest pending age, members, redeliveries, dead letters; exit status 3 "
                                         "if no broker answers.")
    _connect(groups)
    groups.add_argument("--json", action="store_true", help="print the raw JSON")
    groups.set_defaults(func=run_groups)


def _start(text):
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        raise argparse.ArgumentTypeError("expected earliest, latest or a sequence >= 1, got %r" % text)
    return value


def run_consume(args):
    from zactors.patterns.zeps.consumer import Consumer

    from .zeps import _answered

    out = sys.stdout
    seen = 0
    consumer = None
    printed = []
    try:
        consumer = _answered(Consumer, args.connect, args.stream, args.group, pattern=args.pattern.encode(),
                             start=args.start, ack_wait=args.ack_wait, max_deliver=args.max_deliver,
                             window=args.window, curve=options.client_curve(args), timeout=args.timeout)
        while True:
            message = consumer.get(None)
            if message is None:
                break
            out.write("%d\t%s\t%s\n" % (message.seq, message.key.decode("utf-8", "backslashreplace"),
                                        message.body.decode("utf-8", "backslashreplace")))
            printed.append(message)
            seen += 1
            if seen == args.count or not consumer.pending or len(printed) >= 256:
                out.flush()          # written out: now acknowledged
                for done in printed:
                    done.ack()
                printed = []
            if seen == args.count:
                break
    except Interrupted:
        print("zactors zeps consume: interrupted after %d message(s)" % seen, file=sys.stderr)
        raise
    finally:
        try:
            out.flush()
            for done in printed:
                done.ack()
        finally:
            if consumer is not None:
                consumer.destroy()  # sends the acks noted, then leaves the group
    return exitstatus.OK


def run_groups(args):
    from zactors.patterns.zeps import query

    from .zeps import _answered

    info = _answered(query, args.connect, curve=options.client_curve(args), timeout=args.timeout)
    groups = info.get("groups", [])
    if args.json:
        print(json.dumps(groups, indent=2, sort_keys=True))
        return exitstatus.OK
    if not groups:
        print("no consumer groups at %s" % info["endpoint"])
    for x in sorted(groups, key=lambda x: (x["stream"], x["group"])):
        print("%s/%s  cursor %d  lag %d  pending %d (oldest %.1fs)  members %d  delivered %d  redelivered %d  "
              "dead letters %d" % (x["stream"], x["group"], x["cursor"], x["lag"], x["pending"],
                                   x["oldest_pending_age"], x["members"], x["delivered"], x["redelivered"],
                                   x["dead_letters"]))
    return exitstatus.OK
