"""How every ``zactors`` command stops: Ctrl-C, SIGTERM, a closed pipe.

One convention for all commands (see :mod:`zactors.apps.commands`):

* :func:`handle_signals` (``cli.main`` wraps every command in it) turns the
  first SIGINT or SIGTERM into :class:`Interrupted`, raised in the main
  greenlet wherever it waits; a second one ends the process at once.
* A server (broker, worker, web...) parks in :func:`wait_until_stopped`:
  the signal ends that wait normally, the server prints its one-line
  summary and returns 0.
* A command with a finite job lets :class:`Interrupted` propagate; its
  ``finally`` prints the summary of what was done; ``cli.main`` exits with
  ``128 + signal`` (130 after Ctrl-C, 143 after SIGTERM) and no traceback.

:class:`Interrupted` is a ``BaseException``, like ``KeyboardInterrupt``, so
library code that catches ``Exception`` does not swallow it.  Only the main
greenlet of the main thread takes signals.
"""
import contextlib
import os
import signal
import sys
import time

import logging

import gevent
from gevent.event import Event

from . import exitstatus

__all__ = ["Interrupted", "handle_signals", "wait_until_stopped", "serve", "quiet_broken_pipe", "SIGNALS"]

log = logging.getLogger("zactors")

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_KEEPALIVE = 3600.0


class Interrupted(BaseException):
    """The user (or a supervisor) asked the command to stop: ``signum`` says how."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self):
        return 128 + self.signum


class _State:
    target = None       # the greenlet signals interrupt
    parked = []         # the Events of the wait_until_stopped calls waiting now
    signum = None       # the first signal received


_state = _State()


def _on_signal(signum):
    if _state.signum is not None:  # a second signal: stop now, whatever is being cleaned up
        os.write(2, b"zactors: stopped at once\n")
        os._exit(128 + signum)
    _state.signum = signum
    if _state.parked:
        for event in _state.parked:
            event.set()
    elif _state.target is not None and not _state.target.dead:
        # thrown from the hub, as gevent.Timeout does: the main greenlet is parked in it
        gevent.get_hub().loop.run_callback(_state.target.throw, Interrupted(signum))


@contextlib.contextmanager
def handle_signals():
    """Route SIGINT and SIGTERM to the calling (main) greenlet for the ``with`` block."""
    _state.target, _state.signum = gevent.getcurrent(), None
    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    handlers = [gevent.signal_handler(sig, _on_signal, sig) for sig in SIGNALS]
    try:
        # a signal the console script deferred while zactors loaded (apps/entry.py): stop before starting
        pending = next((h.pending for h in saved.values() if getattr(h, "pending", None)), None)
        if pending:
            raise Interrupted(pending)
        yield
    finally:
        for handler in handlers:
            handler.cancel()
        # libev leaves SIG_DFL behind: give Python its handlers back (Ctrl-C raises KeyboardInterrupt again)
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)
        _state.target = None


def wait_until_stopped(event=None, timeout=None):
    """Park until SIGINT or SIGTERM, ``event`` (a gevent Event) is set, or ``timeout`` s pass.

    Any greenlet may wait here (e.g. one that closes a subscription when
    asked to stop); while one does, a signal interrupts no one.

    Returns the signal number, or None when the event or the timeout ended
    the wait.  For servers: the signal is how they are asked to stop, so it
    ends this wait normally instead of raising :class:`Interrupted`.
    """
    if _state.signum is not None:
        return _state.signum
    event = event if event is not None else Event()
    _state.parked.append(event)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        # Always with a timeout: signal watchers do not keep gevent's loop alive, so a bare
        # wait in a process with nothing else to watch would end in LoopExit.
        while not event.is_set():
            remaining = _KEEPALIVE if deadline is None else min(_KEEPALIVE, deadline - time.monotonic())
            if remaining <= 0:
                break
            event.wait(remaining)
    finally:
        _state.parked.remove(event)
    return _state.signum


def serve(server, summary, *, describe=None, every=0, cleanup=()):
    """Run a server actor until asked to stop, then destroy it and print its summary.

    ``describe(info) -> str`` logs the server's ``INFO`` every ``every`` seconds
    (0: never); ``summary(info) -> str`` is the one line printed to stderr at the
    end (``info`` is empty if the server could not answer).  Actors in
    ``cleanup`` (an authenticator, say) are destroyed after the server.
    Returns exit status 0: a server asked to stop has done its job.
    """
    def tick():
        while True:
            gevent.sleep(every)
            log.info("%s", describe(server.call("INFO", timeout=5)))

    ticker = gevent.spawn(tick) if describe is not None and every > 0 else None
    info = {}
    try:
        wait_until_stopped()
        info = server.call("INFO", timeout=5)
    finally:
        if ticker is not None:
            ticker.kill()
        server.destroy()
        for actor in cleanup:
            if actor is not None:
                actor.destroy()
        print(summary(info), file=sys.stderr)
    return exitstatus.OK


def quiet_broken_pipe():
    """After ``BrokenPipeError`` on stdout (``zactors demo | head -3``): exit status for a quiet stop.

    Points stdout at /dev/null so that the interpreter's final flush does
    not complain, and returns 128 + SIGPIPE, what a killed pipeline member gives.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return 128 + signal.SIGPIPE
