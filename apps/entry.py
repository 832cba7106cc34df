"""The ``zactors`` console script.

Imports the command line inside a guard, so that Ctrl-C while Python is
still loading zactors (about a tenth of a second) ends the command quietly
with status 130, as it does once a command runs, instead of a traceback.
"""
import signal
import sys

__all__ = ["main"]


def main() -> int:
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    return run()


if __name__ == "__main__":
    sys.exit(main())
