"""What every benchmark shares: deadlines, saying what it waits for, figures printed as they are measured.

    from _harness import Steps, wait_until

    steps = Steps(deadline=args.deadline)         # seconds per step; a step past it ends the run
    result = steps.run("snapshot", "a new client to receive 100000 keys", bench_snapshot, 100000)

``Steps.run`` prints ``NAME: waiting for WHAT (deadline Ns)`` on stderr, runs
the step and prints its result on stdout at once (``NAME: {json}``), so a
figure measured is never lost to a later step.  A step that raises is
reported (``NAME: failed: ...``) and the run goes on.  A step that outlives
its deadline (a hang in C, in a child, anywhere) is ended by a watchdog
thread: it prints where each thread was, kills this process's children
(servers, peers: whatever the step started), and exits with status 3.

:func:`wait_until` is the loop every readiness wait uses: a deadline and the
words for what it waits on.  Nothing here imports gevent.
"""
import contextlib
import faulthandler
import json
import os
import statistics
import sys
import threading
import time

__all__ = ["Steps", "wait_until", "StepTimeout", "add_deadline_option", "load_average", "median_rows"]

#: default deadline per step, seconds (a loaded 2-core machine; the big default runs take minutes)
DEADLINE = 900.0


def load_average(when):
    """Print the machine's load average (1, 5, 15 min) ``when`` ("start", "end"): a figure
    measured on a loaded machine says so itself."""
    print("load average at %s: %.2f %.2f %.2f (%d cores)" % ((when,) + os.getloadavg() + (os.cpu_count(),)),
          flush=True)


def median_rows(rounds):
    """One ``{run: {figure: value}}`` from several rounds' (interleaved with the other stacks'):
    each number the median over the rounds that measured it (``lost``: the most any round lost);
    a round that failed (a string) counts only when every round did."""
    measured = [r for r in rounds if isinstance(r, dict)]
    if not measured:
        return rounds[-1] if rounds else {}
    out = {}
    for run in dict.fromkeys(run for r in measured for run in r):
        rows = [r[run] for r in measured if run in r]
        row = {}
        for key in dict.fromkeys(k for one in rows for k in one):
            values = [one[key] for one in rows if isinstance(one.get(key), (int, float))]
            if values:
                row[key] = max(values) if key == "lost" else statistics.median(values)
        out[run] = row
    return out


class StepTimeout(TimeoutError):
    """A readiness wait passed its deadline."""


def wait_until(predicate, timeout, what, sleep=None, interval=0.01):
    """Call ``predicate()`` until it is true; StepTimeout naming ``what`` after ``timeout`` seconds.

    ``sleep`` is the pause between tries (``gevent.sleep`` inside gevent code; ``time.sleep`` by default).
    """
    sleep = sleep or time.sleep
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise StepTimeout("no %s within %gs" % (what, timeout))
        sleep(interval)


def subset(parser, option, value, choices):
    """The comma-separated ``value`` of ``option`` as a list; a usage error (exit 2) names any not in ``choices``."""
    chosen = value.split(",")
    unknown = [name for name in chosen if name not in choices]
    if unknown:
        parser.error("%s: unknown %s (choose from %s)" % (option, ", ".join(map(repr, unknown)), ", ".join(choices)))
    return chosen


def add_deadline_option(parser, default=DEADLINE):
    parser.add_argument("--deadline", type=float, default=default, metavar="SECONDS",
                        help="end the run if one step takes longer (default: %(default)g)")


class Steps:
    """Runs the steps of one benchmark, each under a deadline; keeps and prints every result."""

    def __init__(self, deadline=DEADLINE, out=None):
        self.deadline = deadline
        self.results = {}
        self._out = out or sys.stdout

    @contextlib.contextmanager
    def guard(self, name, what, deadline=None):
        """Say what the block waits for; end the run (see the module docstring) if it outlives ``deadline``.

        Makes stdout line-buffered, so that lines printed inside reach a pipe as they are printed.
        """
        deadline = self.deadline if deadline is None else deadline
        sys.stdout.reconfigure(line_buffering=True)
        print("%s: waiting for %s (deadline %gs)" % (name, what, deadline), file=sys.stderr, flush=True)
        done = threading.Event()
        threading.Thread(target=self._watch, args=(name, what, deadline, done), daemon=True).start()
        try:
            yield
        finally:
            done.set()

    def run(self, name, what, func, *args, deadline=None, **kwargs):
        """``func(*args, **kwargs)`` under the deadline; its result printed and kept (None if it failed)."""
        started = time.perf_counter()
        try:
            with self.guard(name, what, deadline):
                result = func(*args, **kwargs)
        except Exception as exc:  # one failed step must not lose the others' figures
            print("%s: failed after %.1fs: %s: %s" % (name, time.perf_counter() - started, type(exc).__name__, exc),
                  file=self._out, flush=True)
            self.results[name] = {"error": "%s: %s" % (type(exc).__name__, exc)}
            return None
        self.results[name] = result
        print("%s: %s" % (name, json.dumps(result, default=str)), file=self._out, flush=True)
        return result

    def _watch(self, name, what, deadline, done):
        if done.wait(deadline):
            return
        print("\n%s: no result within %gs (it was waiting for %s); where each thread was:" % (name, deadline, what),
              file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        import psutil
        for proc in psutil.Process().children(recursive=True):
            try:
                proc.kill()
            except psutil.Error:
                pass
        print("%s: stopped; the figures above were measured before it" % name, file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(3)
