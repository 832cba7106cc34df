"""``zactors demo``: a node in this process, every pattern's demo part driven through it.

:func:`run` starts an :class:`~zactors.apps.up.Up` node on ephemeral
loopback ports (its data directory a temporary one, removed at the end;
beacons off, so nothing leaves this machine), prints where its parts and
its dashboard listen, then runs each command module's ``demo(out, node)``
part in order (see :mod:`zactors.apps.commands`).  The parts of a node
(Majordomo, ZEPS, Clone, Harmony) go through the node's brokers; the others
(actors, the pipeline) run on their own; the last (``up``'s) kills the
node's Clone server and shows its supervisor bringing it back.  It ends by itself in seconds,
unless ``stay``: then the node and its dashboard stay up, with the
dashboard's demo traffic (:class:`~zactors.apps.dashboard.demo.DemoTraffic`)
flowing, until Ctrl-C or SIGTERM (exit status 0).

Runs in the calling (main) greenlet; blocks until done.
"""
import contextlib
import logging
import shutil
import sys
import tempfile
import time

from . import commands, exitstatus
from .stopping import Interrupted, wait_until_stopped

__all__ = ["run", "demo_node", "node_config"]


@contextlib.contextmanager
def demo_node(web="127.0.0.1:0"):
    """A started demo :class:`~zactors.apps.up.Up` node, its data in a temporary directory; stopped and removed after."""
    from .up import Up
    data = tempfile.mkdtemp(prefix="zactors-demo-")
    node = None
    try:
        node = Up(node_config(data, web)).start()
        yield node
    finally:
        if node is not None:
            node.stop()
        shutil.rmtree(data, ignore_errors=True)


def node_config(data, web="127.0.0.1:0"):
    """The demo node's config: every part on an ephemeral loopback port, beacons off, the journal under ``data``."""
    from .up import DEFAULTS, merge
    return merge(DEFAULTS, {"data": data, "majordomo": {"bind": "tcp://127.0.0.1:*"},
                            "zeps": {"bind": "tcp://127.0.0.1:*"}, "clone": {"port": 0},
                            "harmony": {"name": "node", "beacon": False},
                            "dashboard": {"bind": web}})


@contextlib.contextmanager
def _quiet_library(verbose):
    """The demo prints one line per thing it shows: the patterns' INFO logs only with ``-v``."""
    logger = logging.getLogger("zactors")
    saved = logger.level
    if not verbose:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(saved)


def run(out=print, *, stay=False, web="127.0.0.1:0", verbose=False):
    """Run the demo; returns the exit status (Interrupted propagates after its one-line summary)."""
    parts = [m for m in commands.modules() if hasattr(m, "demo")]
    ran = 0
    try:
        with _quiet_library(verbose), demo_node(web) as node:
            out("A zactors node in this process, as `zactors up` runs it (%s):"
                % ("it stays up after the demo" if stay else "--stay keeps it up after the demo"))
            for part, address in node.listening():
                out("  %-10s %s" % (part, address))
            for number, module in enumerate(parts, 1):
                title = (module.demo.__doc__ or module.__name__).strip().splitlines()[0]
                out("\n== %d/%d  %s" % (number, len(parts), title))
                module.demo(out, node)
                ran += 1
            out("\nDemo finished: %d part(s) ran." % len(parts))
            if stay:
                _stay(out, node)
            return exitstatus.OK
    except Interrupted:
        print("zactors demo: interrupted after %d of %d part(s)" % (ran, len(parts)), file=sys.stderr)
        raise


def _stay(out, node):
    """Keep ``node`` up with the dashboard's demo traffic until Ctrl-C or SIGTERM."""
    from .dashboard.demo import DemoTraffic
    traffic = DemoTraffic(node)
    try:
        out("The node stays up, demo traffic flowing through it; its dashboard: %s"
            % dict(node.listening()).get("dashboard", "off"))
        out("demo: Ctrl-C stops")
        sys.stdout.flush()
        started = time.monotonic()
        wait_until_stopped()
        print("demo: node stopped after %.0f s" % (time.monotonic() - started), file=sys.stderr)
    finally:
        traffic.stop()
