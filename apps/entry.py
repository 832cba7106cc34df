"""The ``zactors`` console script.

Ctrl-C while Python is still loading zactors (about a tenth of a second)
must end the command quietly with status 130, as it does once a command
runs. A ``KeyboardInterrupt`` cannot carry that: raised inside an import's
clean-up callback, Python prints it as "Exception ignored" and loads on. So
until the command's own signal handling takes over, SIGINT is only
remembered (:class:`Deferred`), and :func:`zactors.apps.stopping.handle_signals`
stops the command at once if one came.
"""
import signal
import sys

__all__ = ["main", "Deferred"]


class Deferred:
    """A SIGINT handler that records the signal in ``pending`` instead of raising."""

    def __init__(self):
        self.pending = None

    def __call__(self, signum, frame):
        self.pending = signum


def main() -> int:
    deferred = Deferred()
    signal.signal(signal.SIGINT, deferred)  # from here on no SIGINT raises KeyboardInterrupt
    from .cli import main as run
    status = run()
    return 128 + deferred.pending if deferred.pending and status == 0 else status


if __name__ == "__main__":
    sys.exit(main())
