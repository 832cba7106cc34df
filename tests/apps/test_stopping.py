"""apps/stopping.py: the shared Ctrl-C/SIGTERM convention, in a real process receiving real signals."""
import signal
import sys
import textwrap

import gevent
import gevent.subprocess
import pytest

from tests.apps.cli_helpers import ENV, read_until

pytestmark = pytest.mark.timeout(60)

# A command whose cleanup hangs: the first signal interrupts it, a second one must end it at once.
STUCK = textwrap.dedent("""
    import sys, gevent
    from zactors.apps.stopping import Interrupted, handle_signals, wait_until_stopped
    def stuck():
        try:
            print("working", flush=True)
            gevent.sleep(60)
        finally:
            print("cleaning up", flush=True)
            gevent.sleep(60)
    def server():
        print("serving", flush=True)
        signum = wait_until_stopped()
        print("stopped by", signum, flush=True)
        return 0
    try:
        with handle_signals():
            sys.exit({"stuck": stuck, "server": server}[sys.argv[1]]())
    except Interrupted as stop:
        sys.exit(stop.exit_status)
""")


def _python(processes, role):
    return processes([sys.executable, "-c", STUCK, role], stdout=gevent.subprocess.PIPE,
                     stderr=gevent.subprocess.PIPE, text=True, env=ENV)


def test_a_second_signal_stops_a_stuck_cleanup_at_once(processes):
    proc = _python(processes, "stuck")
    read_until(proc.stdout, "working")
    proc.send_signal(signal.SIGINT)
    read_until(proc.stdout, "cleaning up")
    proc.send_signal(signal.SIGINT)
    with gevent.Timeout(10):
        err = proc.stderr.read()
        assert proc.wait() == 130
    assert err == "zactors: stopped at once\n"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_server_waiting_for_a_signal_returns_normally(processes, sig):
    proc = _python(processes, "server")
    read_until(proc.stdout, "serving")
    proc.send_signal(sig)
    with gevent.Timeout(10):
        out, err = proc.stdout.read(), proc.stderr.read()
        assert proc.wait() == 0
    assert out == "stopped by %d\n" % sig and err == ""
