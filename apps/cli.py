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

__all__ = ["main", "build_parser", "Parser", "Diagnostics", "short_name"]

#: logger name prefixes as a user knows the parts (the CLI's words), most specific first
_SHORT_NAMES = (("zactors.patterns.zeps.spark", "zactors.spark"), ("zactors.patterns.majordomo", "zactors.mdp"),
                ("zactors.patterns.scatter", "zactors.pipeline"), ("zactors.patterns.", "zactors."),
                ("zactors.apps.dashboard", "zactors.dashboard"), ("zactors.apps.pipeline", "zactors.pipeline"),
                ("zactors.apps.spark_pipeline", "zactors.spark"), ("zactors.apps.up", "zactors.up"),
                ("zactors.apps.web", "zactors.web"),
                ("zactors.apps", "zactors"), ("zactors.actors", "zactors.actors"))


def short_name(name):
    """``zactors.patterns.clone.client`` -> ``zactors.clone``: a logger's name as user output shows it."""
    for prefix, short in _SHORT_NAMES:
        if name.startswith(prefix):
            if prefix.endswith("."):  # zactors.patterns.PATTERN.module -> zactors.PATTERN
                return short + name[len(prefix):].split(".", 1)[0]
            return short
    return name


class Diagnostics(logging.Formatter):
    """How a command's logs read on stderr.

    Warnings and errors in the one shape of every diagnostic, ``zactors CMD:
    error: ...`` (``warning:``); progress (INFO, DEBUG) time-stamped with the
    part's short name: ``12:00:01 INFO zactors.mdp: ...``.
    """

    def __init__(self, prog):
        super().__init__("%(asctime)s %(levelname)s %(short)s: %(message)s")
        self.prog = prog

    def format(self, record):
        if record.levelno >= logging.WARNING:
            text = "%s: %s: %s" % (self.prog, "warning" if record.levelno == logging.WARNING else "error",
                                   record.getMessage())
            if record.exc_info:
                text += "\n" + self.formatException(record.exc_info)
            return text
        record.short = short_name(record.name)
        return super().format(record)

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
                    "through the node, the scatter-gather pipeline, and a part of the node killed and brought "
                    "back by its supervisor.  Takes a few seconds, then stops the "
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
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Diagnostics(getattr(args, "command_prog", parser.prog)))
    logging.basicConfig(level=level, handlers=[handler])
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
        print("%s: error: %s" % (args.command_prog, exc), file=sys.stderr)
        return exitstatus.REFUSED
    except UsageError as exc:
        print("%s: error: %s" % (args.command_prog, exc), file=sys.stderr)
        return exitstatus.USAGE
    except Exception as exc:  # a person reads this: one clear line, details with -v
        logging.getLogger("zactors").debug("failed", exc_info=True)
        print("%s: error: %s" % (args.command_prog, exc), file=sys.stderr)
        return getattr(exc, "exit_status", exitstatus.FAILED)


if __name__ == "__main__":
    sys.exit(main())
