"""One broker of a pair in its own process (``_pair_broker.py``), on ipc endpoints under a test's tmp_path."""
import os
import signal
import sys

import gevent.subprocess

from zactors.patterns.zeps.client import query

HERE = os.path.dirname(os.path.abspath(__file__))


class PairBrokerProcess:
    def __init__(self, processes, tmp_path, role):
        self.processes = processes
        self.role = role
        self.dir = str(tmp_path / role)
        self.endpoint = "ipc://%s/%s.zeps" % (tmp_path, role)
        self.pair_endpoint = "ipc://%s/%s.pair" % (tmp_path, role)
        self.proc = None

    def start(self, peer):
        """Start it, peered with ``peer``; returns once it listens."""
        self.proc = self.processes(
            [sys.executable, os.path.join(HERE, "_pair_broker.py"), self.dir, self.endpoint, self.pair_endpoint,
             peer.pair_endpoint, self.role], stdout=gevent.subprocess.PIPE)
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
