"""Issue 20: ``zactors up`` under ``ulimit -n 1024`` (a process of its own): live tails and live pages past
their budgets are refused (503) and counted, idle connections cannot take every descriptor, and the node
goes on serving the API, its brokers and a good client."""
import os
import resource
import socket

import gevent.subprocess
import pytest

from zactors.patterns.zeps import Publisher

from ..cli_helpers import ENV, ZACTORS, read_until
from .helpers import EventStream, request

pytestmark = pytest.mark.timeout(180)


def _nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


@pytest.fixture
def node(processes, tmp_path):
    proc = processes(ZACTORS + ["up", "--data", str(tmp_path / "data"), "--mdp", "tcp://127.0.0.1:*",
                                "--zeps", "tcp://127.0.0.1:*", "--clone-port", "0", "--web", "127.0.0.1:0"],
                     stdout=gevent.subprocess.PIPE, stderr=gevent.subprocess.PIPE, text=True, env=ENV,
                     preexec_fn=_nofile)
    lines = read_until(proc.stdout, "up: Ctrl-C stops")
    where = dict(line.split(None, 1) for line in lines if line.strip() and not line.startswith("up:"))
    yield proc, {k: v.strip() for k, v in where.items()}
    proc.terminate()
    proc.wait(timeout=20)


def _metric(url, name):
    for line in request(url + "metrics", timeout=30)[2].decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric " + name)


def _open(host, port):
    """A TCP connection started without waiting (past the server's places it waits in the backlog)."""
    conn = socket.socket()
    conn.setblocking(False)
    conn.connect_ex((host, port))
    return conn


def test_tails_pages_and_idle_connections_under_ulimit_1024(node):
    """Before: 1,500 connections (live pages and idle ones) took every descriptor of the node, and the
    API answered with a reset.  Now the dashboard holds a quarter of the fds in connections at most, each
    closed after 10 s without a request, and refuses (503, counted) live pages and tails past their budgets."""
    proc, where = node
    url = where["dashboard"]
    host, port = url.split("//")[1].rstrip("/").split(":")
    port = int(port)
    zeps = where["zeps"].split()[0]
    with Publisher(zeps, "orders") as pub:
        pub.publish(b"k", b"v")
        pub.flush(timeout=10)
    opened = []
    try:
        tails = [EventStream(host, port, "/api/zeps/tail?stream=orders") for _ in range(9)]
        opened += tails
        assert [t.status for t in tails] == [200] * 8 + [503]
        max_clients = (1024 // 4 - 32) // 2
        pages = [EventStream(host, port, "/api/events") for _ in range(max_clients + 5)]
        opened += pages
        statuses = [t.status for t in pages]
        assert statuses.count(200) == max_clients and statuses.count(503) == 5
        opened += [_open(host, port) for _ in range(1500)]          # idle, past the descriptors
        for i in range(3):                                          # the brokers serve all along
            with Publisher(zeps, "orders") as pub:
                pub.publish(b"k", b"%d" % i)
                pub.flush(timeout=20)
        assert proc.poll() is None
        assert len(os.listdir("/proc/%d/fd" % proc.pid)) < 1000
        for thing in pages + tails:                                 # the pages leave; the idle ones time out
            thing.close()
        assert request(url + "api/status", timeout=60)[0] == 200
        assert _metric(url, "zactors_dashboard_tails_refused_total") == 1
        assert _metric(url, "zactors_dashboard_pages_refused_total") == 5
    finally:
        for thing in opened:
            thing.close()
