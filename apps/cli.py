"""The ``zactors`` command line."""
import argparse
import logging
import sys

import zmq

from . import commands

__all__ = ["main", "build_parser"]

try:
    from importlib.metadata import PackageNotFoundError, version as _version
    __version__ = _version("zactors")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.1.0+src"


def build_parser():
    parser = argparse.ArgumentParser(
        prog="zactors",
        description="Composable gevent actors for the classic ZeroMQ patterns.",
        epilog="Run 'zactors demo' to see actors at work, 'zactors COMMAND --help' for a command.",
    )
    from zactors.actors.speedups import SPEEDUPS
    parser.add_argument("--version", action="version", version="zactors %s (pyzmq %s, libzmq %s; C speedups %s)"
                        % (__version__, zmq.__version__, zmq.zmq_version(), "on" if SPEEDUPS else "off"))
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="show every pattern at work on this machine, in one process")
    demo.set_defaults(func=run_demo)
    for module in commands.modules():
        module.register(sub)
    return parser


def run_demo(args):
    """``zactors demo``: every command module's demo part, in order."""
    out = print
    parts = [m for m in commands.modules() if hasattr(m, "demo")]
    for number, module in enumerate(parts, 1):
        title = (module.demo.__doc__ or module.__name__).strip().splitlines()[0]
        out("\n== %d/%d  %s" % (number, len(parts), title))
        module.demo(out)
    out("\nDemo finished: %d part(s) ran." % len(parts))
    return 0


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a person reads this: one clear line, details with -v
        logging.getLogger("zactors").debug("failed", exc_info=True)
        print("zactors: error: %s" % exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
