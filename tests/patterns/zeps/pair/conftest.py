"""Helpers for the ZEPS pair tests: two brokers in this process, connected to each other."""
import os
import time

import gevent
import pytest

from zactors.actors.journal import JournalReader
from zactors.actors.journal.replica import epochs_of
from zactors.patterns.zeps.broker import Broker
from zactors.patterns.zeps.names import stream_directory


def wait_for(condition, timeout=20.0, what="condition"):
    """Poll ``condition()`` every 20 ms until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        gevent.sleep(0.02)


def pair_info(broker):
    return broker.call("INFO")["pair"]


def records(journal_dir, stream):
    """Every record of ``stream`` under ``journal_dir``, with its producer, and the epoch history."""
    directory = os.path.join(journal_dir, stream_directory(stream))
    with JournalReader(directory) as reader:
        return list(reader.records(producers=True)), epochs_of(directory)


class Pair:
    """A primary and a backup broker on tmp_path, peered; ``stop(which)`` destroys one."""

    def __init__(self, tmp_path, **options):
        self.dirs = {"primary": str(tmp_path / "primary"), "backup": str(tmp_path / "backup")}
        options.setdefault("heartbeat", 0.25)
        options.setdefault("expiry", 3.0)
        self.options = options
        self.brokers = {}
        self.pair_endpoints = {}

    def start(self, role, connect=True):
        """Start ``role``'s broker; a restart binds the pair endpoint it had (its peer stays connected)."""
        restart = role in self.pair_endpoints
        options = dict(self.options, pair_endpoint=self.pair_endpoints[role]) if restart else self.options
        broker = Broker(self.dirs[role], role=role, name=role, **options)
        self.brokers[role] = broker
        self.pair_endpoints[role] = broker.pair_endpoint
        other = "backup" if role == "primary" else "primary"
        if connect and other in self.pair_endpoints:
            broker.call("PEER", self.pair_endpoints[other])
            if other in self.brokers and not restart:
                self.brokers[other].call("PEER", broker.pair_endpoint)
        return broker

    def up(self):
        self.start("primary")
        self.start("backup")
        self.wait_state("primary", "active")
        self.wait_ready("backup")
        return self.brokers["primary"], self.brokers["backup"]

    def wait_state(self, role, state, timeout=20.0):
        wait_for(lambda: pair_info(self.brokers[role])["state"] == state, timeout, "%s %s" % (role, state))

    def wait_ready(self, role, timeout=30.0):
        wait_for(lambda: (lambda i: i["state"] == "passive" and i["ready"])(pair_info(self.brokers[role])),
                 timeout, "%s passive and ready" % role)

    def stop(self, role):
        broker = self.brokers.pop(role, None)
        if broker is not None:
            broker.destroy()

    def close(self):
        for role in list(self.brokers):
            self.stop(role)


@pytest.fixture
def make_pair(tmp_path):
    made = []

    def make(**options):
        pair = Pair(tmp_path, **options)
        made.append(pair)
        return pair

    yield make
    for pair in made:
        pair.close()
