"""``zactors up``: one node per data directory (a lock naming the running node), and a summary at the end."""
import os
import signal

import pytest

from zactors.apps.up import ConfigError, Up
from zactors.patterns.majordomo import Client, Worker
from zactors.patterns.zeps import Publisher

from tests.apps.cli_helpers import assert_clean, read_until, start, zactors
from tests.apps.dashboard.helpers import config

pytestmark = pytest.mark.timeout(90)

EPHEMERAL = ("--mdp", "tcp://127.0.0.1:*", "--zeps", "tcp://127.0.0.1:*", "--clone-port", "0", "--web", "127.0.0.1:0",
             "--no-harmony")


def test_a_second_node_on_the_same_data_is_refused_naming_the_first(tmp_path):
    first = Up(config(tmp_path)).start()
    try:
        with pytest.raises(ConfigError) as refused:
            Up(config(tmp_path)).start()
        text = str(refused.value)
        assert "is in use by the zactors node with pid %d" % os.getpid() in text and first.url in text
        assert "\n" not in text
        assert first.zeps.alive and first.broker.alive          # the refusal touched nothing of the first
    finally:
        first.stop()
    again = Up(config(tmp_path)).start()                           # stopped: the directory is free
    again.stop()


def test_the_summary_says_what_was_served(tmp_path):
    class Echo(Worker):
        def handle(self, request):
            return request

    node = Up(config(tmp_path, harmony={"enabled": False})).start()
    try:
        with Echo(node.broker.endpoint, "echo"), Client(node.broker.endpoint, timeout=10) as client:
            assert client.request("echo", b"hi")
        with Publisher(node.zeps.endpoint, "results") as pub:   # the broker has no "published" counter:
            pub.publish("k", "1")                               # the summary said 0 whatever was published
            pub.publish("k", "2")
            pub.flush()
        line = node.summary()
    finally:
        node.stop()
    assert line.startswith("majordomo 1 request, 1 reply, 1 worker; zeps 1 stream, 2 messages published"), line
    assert "clone 0 keys" in line and "dashboard http://127.0.0.1:" in line


def _up(processes, data):
    proc = start(processes, "up", "--data", str(data), *EPHEMERAL)
    read_until(proc.stdout, "up: Ctrl-C stops")
    return proc


def test_the_command_refuses_in_one_line_and_ends_with_a_summary(processes, tmp_path):
    first = _up(processes, tmp_path)
    second = zactors("up", "--data", str(tmp_path), *EPHEMERAL)
    assert second.returncode == 2, second.stderr
    assert second.stderr.startswith("zactors up: error: the data directory %s is in use by the zactors node "
                                    "with pid %d" % (tmp_path, first.pid)), second.stderr
    assert len(second.stderr.strip().splitlines()) == 1 and second.stdout == ""
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=30)
    assert first.returncode == 0
    assert_clean(err)
    assert "; served: majordomo 0 requests, 0 replies, 0 workers; zeps 0 streams" in err.splitlines()[-1], err


def test_a_killed_node_leaves_no_stale_lock(processes, tmp_path):
    first = _up(processes, tmp_path)
    first.kill()
    first.wait(timeout=30)
    again = _up(processes, tmp_path)
    again.send_signal(signal.SIGTERM)
    again.communicate(timeout=30)
    assert again.returncode == 0


def test_the_clone_map_outlives_a_restart_of_the_node(tmp_path):
    from zactors.patterns.clone import Clone
    node = Up(config(tmp_path, harmony={"enabled": False})).start()
    try:
        with Clone(node.clone.endpoint) as clone:
            assert clone.wait_synced(10)
            assert clone.set("/jobs/1", "done", wait=10)
    finally:
        node.stop()
    node = Up(config(tmp_path, harmony={"enabled": False})).start()      # same --data, new free ports
    try:
        with Clone(node.clone.endpoint) as clone:
            assert clone.wait_synced(10)
            assert clone.get("/jobs/1") == b"done"
    finally:
        node.stop()
