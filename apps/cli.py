"""The ``zactors`` command line.

Every command runs inside :func:`main`'s conventions (see
:mod:`zactors.apps.commands`): one-line errors, the exit statuses of
:mod:`zactors.apps.exitstatus`, and :mod:`zactors.apps.stopping` for Ctrl-C,
SIGTERM and a closed stdout.
"""
import argparse
import logging
import signal
import sys

import zmq

from zactors.actors.monitor import HandshakeFailed

from . import commands, contexts, exitstatus
from .options import UsageError
from .stopping import Interrupted, handle_signals, quiet_broken_pipe

__all__ = ["main", "build_parser", "Parser"]

class Parser(argparse.ArgumentParser):
    """argparse, with errors on one line (``zactors mdp broker: error: ...``) and a bare group printing help."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.set_defaults(command_prog=self.prog)  # the deepest parser's wins: errors name the full command

    def error(self, message):
        self.exit(exitstatus.USAGE, "%s: error: %s (see '%s --help')\n" % (self.prog, message, self.prog))


def build_parser():
    parser = Parser(
        prog="zactors",
        description="Composable gevent actors for the classic ZeroMQ patterns.",
        epilog="Run 'zactors demo' to see actors at work, 'zactors COMMAND --help' for a command. "
               "Exit status: 0 done, 1 failed, 2 wrong option, 3 nobody answered, 4 key refused, "
               "130 after Ctrl-C.")
    from zactors import __version__
    from zactors.actors.speedups import SPEEDUPS
    parser.add_argument("--version", action="version", version="zactors %s (pyzmq %s, libzmq %s; C speedups %s)"
                        % (__version__, zmq.__version__, zmq.zmq_version(), "on" if SPEEDUPS else "off"))
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.set_defaults(func=lambda args: parser.print_help() or exitstatus.USAGE)
    demo = sub.add_parser(
        "demo", help="show every pattern at work on this machine, through a node in this process",
        description="Start a zactors node in this process (Majordomo, ZEPS, Clone, Harmony and the web "
                    "dashboard, on ephemeral loopback ports; no broadcast leaves this machine), print where "
                    "it listens, and show each pattern at work: actors, Majordomo, Harmony peers, Clone, ZEPS "
                    "through the node, and the scatter-gather pipeline.  Takes a few seconds, then stops the "
                    "node (its data was in a temporary directory).  With --stay the node and its dashboard "
                    "stay up, demo traffic flowing, until Ctrl-C or SIGTERM (exit status 0).")
    demo.add_argument("--stay", action="store_true",
                      help="after the demo, keep the node and its dashboard up with demo traffic until Ctrl-C")
    demo.add_argument("--web", metavar="HOST:PORT", default="127.0.0.1:0",
                      help="dashboard address (default: 127.0.0.1 on any free port)")
    demo.set_defaults(func=run_demo)
    for module in commands.modules():
        module.register(sub)
    return parser


def run_demo(args):
    """``zactors demo``: see :mod:`zactors.apps.demo`."""
    from . import demo
    return demo.run(stay=args.stay, web=args.web, verbose=args.verbose)


def main(argv=None):
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra:  # name the command they were given to, not the top level
            prog = getattr(args, "command_prog", parser.prog)
            print("%s: error: unrecognized arguments: %s (see '%s --help')" % (prog, " ".join(extra), prog),
                  file=sys.stderr)
            return exitstatus.USAGE
    except KeyboardInterrupt:  # Ctrl-C while the commands load
        return 128 + signal.SIGINT
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        contexts.resolve(args)
        with handle_signals():
            return args.func(args) or exitstatus.OK
    except Interrupted as stop:
        return stop.exit_status
    except KeyboardInterrupt:  # Ctrl-C before the command's signal handling was in place
        return 128 + signal.SIGINT
    except BrokenPipeError:
        return quiet_broken_pipe()
    except HandshakeFailed as exc:
        print("zactors: error: %s" % exc, file=sys.stderr)
        return exitstatus.REFUSED
    except UsageError as exc:
        print("%s: error: %s" % (args.command_prog, exc), file=sys.stderr)
        return exitstatus.USAGE
    except Exception as exc:  # a person reads this: one clear line, details with -v
        logging.getLogger("zactors").debug("failed", exc_info=True)
        print("zactors: error: %s" % exc, file=sys.stderr)
        return getattr(exc, "exit_status", exitstatus.FAILED)


if __name__ == "__main__":
    sys.exit(main())
