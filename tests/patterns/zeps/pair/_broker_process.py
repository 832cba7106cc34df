"""One broker of a pair in its own process (``_pair_broker.py``), on ipc endpoints under a test's tmp_path."""
import os
import signal
import sys

import gevent.subprocess

from zactors.patterns.zeps.client import query
from tests.patterns.clone.conftest import free_base_port

HERE = os.path.dirname(os.path.abspath(__file__))


class PairBrokerProcess:
    def __init__(self, processes, tmp_path, role, tcp=False):
        self.processes = processes
        self.role = role
        self.dir = str(tmp_path / role)
        if tcp:     # (loopback ports free a moment ago: the connection budget counts TCP connections only)
            base = free_base_port()
            self.endpoint, self.pair_endpoint = "tcp://127.0.0.1:%d" % base, "tcp://127.0.0.1:%d" % (base + 1)
        else:
            self.endpoint = "ipc://%s/%s.zeps" % (tmp_path, role)
            self.pair_endpoint = "ipc://%s/%s.pair" % (tmp_path, role)
        self.proc = None

    def start(self, peer, preexec_fn=None):
        """Start it, peered with ``peer``; returns once it listens (``preexec_fn``: e.g. a ulimit)."""
        self.proc = self.processes(
            [sys.executable, os.path.join(HERE, "_pair_broker.py"), self.dir, self.endpoint, self.pair_endpoint,
             peer.pair_endpoint, self.role], stdout=gevent.subprocess.PIPE, preexec_fn=preexec_fn)
        line = self.proc.stdout.readline().decode().split()
        assert line and line[0] == self.endpoint, line

    def info(self):
        return query(self.endpoint, timeout=5)

    def pair(self):
        return self.info()["pair"]

    def group(self):
        """Its first consumer group's INFO, or None."""
        groups = self.info()["groups"]
        return groups[0] if groups else None

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
