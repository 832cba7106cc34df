"""One module per command group; the CLI finds them here by itself.

Adding a pattern's commands (``zactors zeps ...``, ``zactors clone ...``)
touches no other file: write ``apps/commands/NAME.py`` with

* ``register(subparsers)``: add the group and its sub-commands; set
  ``func`` on each (``func(args) -> exit status``);
* ``demo(out, node)`` (optional): its part of ``zactors demo``; the first
  line of its docstring is the part's title; ``out(line)`` prints; ``node``
  is the demo's running :class:`~zactors.apps.up.Up` node (every part on):
  a pattern the node runs is shown through the node's broker or server
  (``node.broker``, ``node.zeps``, ``node.clone``, ``node.harmony``), so
  that its dashboard shows the demo's traffic (see :mod:`zactors.apps.demo`);
* ``ORDER`` (optional int; lower runs first in the demo).

Conventions every command follows (tests/apps/test_cli.py checks them for
all commands, so add yours there):

1. **A bare group prints its help**, exit status 2::

       group = subparsers.add_parser("zeps", help="...", description="...")
       sub = group.add_subparsers(dest="zeps_command", metavar="COMMAND")
       group.set_defaults(func=lambda args: group.print_help() or exitstatus.USAGE)

   Every sub-command gets a ``description=`` (what it does, how it stops,
   its exit statuses) besides its one-line ``help=``.
2. **Options from** :mod:`zactors.apps.options`, so that they mean the same
   everywhere and fail the same way (one line naming the fix, status 2):
   ``type=options.bind_endpoint`` for ``--bind``,
   ``options.connect_endpoint`` for ``--connect``, ``options.positive_int``
   / ``count`` / ``positive_float`` / ``non_negative_float`` / ``port`` for
   numbers, ``options.curve_options(parser, "server" | "client")`` for
   CURVE (``--curve`` own secret key file, ``--curve-server`` server public
   key file, ``--curve-clients`` directory of accepted public keys; then
   ``options.check_curve`` / ``options.client_curve(args)``).  A wrong
   combination found after parsing: ``raise options.UsageError("...")``.
   A failed bind: ``raise options.bind_error(endpoint, exc)``.  Counts are
   never endpoints: an option named like a count takes a number.
3. **Stopping** (:mod:`zactors.apps.stopping`): a server parks in
   ``wait_until_stopped()`` and, when it returns, prints a one-line summary
   (to stderr) and returns 0.  A finite job lets ``Interrupted`` propagate
   after printing its summary (``except Interrupted: print(...); raise``);
   ``cli.main`` exits with 128 + the signal, no traceback.  Never catch
   ``BaseException`` around a wait without re-raising ``Interrupted``.
4. **Exit statuses** from :mod:`zactors.apps.exitstatus`: OK, FAILED,
   USAGE, NO_ANSWER (nobody at the endpoint), REFUSED (raise
   ``actors.monitor.HandshakeFailed``: ``cli.main`` prints it and exits 4).
5. **Output**: results on stdout as plain lines (``flush=True`` for lines a
   script waits for), logs and summaries on stderr; errors as exceptions
   with one clear line (``cli.main`` prints ``zactors CMD: error: ...``),
   never a traceback.  ``log.warning``/``log.error`` print in that same
   shape; a logger is named ``zactors.PART`` (``cli.short_name`` shortens
   module paths).
"""
import importlib
import pkgutil

__all__ = ["modules"]


def modules():
    """The command modules, in demo order."""
    found = [importlib.import_module("%s.%s" % (__name__, info.name))
             for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")]
    return sorted(found, key=lambda m: (getattr(m, "ORDER", 100), m.__name__))
