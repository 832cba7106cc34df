"""A node with more streams with consumer groups on disk than its descriptors allow open starts and serves
them all (leftovers item 6, #20's descriptor budget).

Every stream's groups' journal was opened at start and kept open for good, outside the open-streams
budget: 60 streams with groups under ``ulimit -n 128`` left the group stores failing to open (counted in
group_store_errors) and the node short of descriptors.  Now a store's journal is closed once loaded and
opens only while it logs, closing again with its stream."""
import os
import shutil

import gevent
import pytest

from tests.patterns.zeps.test_budgets import BrokerProcess, nofile, open_fds
from tests.patterns.zeps.test_start_budget import read_first
from tests.patterns.zeps.conftest import Raw
from zactors.patterns.zeps.consumer import Consumer
from zactors.patterns.zeps.names import stream_directory

from .conftest import make_broker, publish

pytestmark = pytest.mark.timeout(180)

STREAMS = 60
LIMIT = 128


def make_streams_with_groups(journal_dir, count):
    """``count`` streams ``s-<i>``, each holding ``v`` and a group ``work`` that consumed it (copies)."""
    broker = make_broker(journal_dir)
    try:
        publish(broker.endpoint, "s-0", [(b"k", b"v")])
        consumer = Consumer(broker.endpoint, "s-0", "work", timeout=10)
        try:
            message = consumer.get(timeout=10)
            assert message.body == b"v"
            message.ack()
        finally:
            consumer.destroy()
    finally:
        broker.destroy()
    first = os.path.join(journal_dir, stream_directory(b"s-0"))
    for i in range(1, count):
        shutil.copytree(first, os.path.join(journal_dir, stream_directory(b"s-%d" % i)))
        shutil.copytree(first + ".groups", os.path.join(journal_dir, stream_directory(b"s-%d" % i) + ".groups"))


def consume(endpoint, stream, body):
    """Join group ``work`` of ``stream`` and take (and ack) messages until ``body``."""
    consumer = Consumer(endpoint, stream, "work", timeout=20)
    try:
        bodies = []
        while body not in bodies:       # (earlier ones again first if their acks had not been logged)
            message = consumer.get(timeout=20)
            assert message is not None, bodies
            bodies.append(message.body)
            message.ack()
    finally:
        consumer.destroy()


def test_a_node_with_more_group_stores_than_descriptors_starts_and_serves_them(journal_dir, processes):
    make_streams_with_groups(journal_dir, STREAMS)
    broker = BrokerProcess(processes, journal_dir, preexec_fn=nofile(LIMIT))
    info = broker.info()
    assert info["counters"].get("group_store_errors", 0) == 0, info["counters"]
    assert len(info["groups"]) == STREAMS                   # every stream's groups, loaded
    print("\n%d streams with groups under ulimit -n %d: %d descriptors open after start"
          % (STREAMS, LIMIT, open_fds(broker.pid)))
    assert open_fds(broker.pid) < LIMIT - 16
    peer = Raw(broker.endpoint)
    try:
        for i in range(0, STREAMS, 7):                      # streams open (and close) in turn
            assert read_first(peer, b"s-%d" % i) == b"v"
            assert open_fds(broker.pid) < LIMIT - 16
    finally:
        peer.close()
    for round in range(2):  # a group whose store opens again to log; then (its stream closed for others) again
        publish(broker.endpoint, "s-59", [(b"k", b"new-%d" % round)])
        consume(broker.endpoint, "s-59", b"new-%d" % round)
        peer = Raw(broker.endpoint)
        try:
            for i in range(1, 40, 2):
                assert read_first(peer, b"s-%d" % i) == b"v"
            assert open_fds(broker.pid) < LIMIT - 16
        finally:
            peer.close()
    assert broker.info()["counters"].get("group_store_errors", 0) == 0
    assert open_fds(broker.pid) < LIMIT - 16
    assert broker.proc.poll() is None
