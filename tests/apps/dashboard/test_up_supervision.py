"""``zactors up`` as a supervision tree: a killed part is back within a second, the rest never notice;
parts dying too often stop the node with a one-line reason and a non-zero status."""
import json
import time

import gevent
import gevent.event
import pytest
from prometheus_client.parser import text_string_to_metric_families

from zactors.apps.options import client_endpoint
from zactors.patterns.clone.client import Clone
from zactors.patterns.majordomo.client import Client as MdpClient
from zactors.patterns.majordomo.worker import Worker

from ...conftest import wait_for
from ..cli_helpers import read_until, start as start_cli
from .helpers import request, start

pytestmark = pytest.mark.timeout(90)


class Echo(Worker):
    service = b"echo"

    def handle(self, request):
        return request


def metrics(node):
    status, _, body = request(node.url + "metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def kill(url, part):
    return request(url + "api/supervisor/kill", "POST", {"part": part})


def test_a_killed_part_is_back_within_a_second_while_another_keeps_serving(tmp_path):
    node = start(tmp_path, harmony={"enabled": False})
    worker = Echo(node.broker.endpoint)
    mdp = MdpClient(node.broker.endpoint)
    clone = Clone([tuple(client_endpoint(e) for e in node.clone.endpoints[:3])])
    served, failures = [], []
    stop = gevent.event.Event()

    def requests():  # MDP traffic all along: the broker must not notice the Clone server's death
        i = 0
        while not stop.is_set():
            try:
                assert mdp.request("echo", b"%d" % i, timeout=10) == [[b"%d" % i]]
                served.append(time.monotonic())
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                failures.append(exc)
            i += 1

    traffic = gevent.spawn(requests)
    try:
        assert clone.wait_synced(10)
        clone.set("/before", b"kept", wait=5)
        wait_for(lambda: len(served) > 10, 10, "MDP requests flowing")
        old = node.clone
        killed = time.monotonic()
        status, _, body = kill(node.url, "clone")
        assert status == 200, body
        wait_for(lambda: node.clone not in (None, old), 5, "the Clone server restarted")
        assert node.clone.call("GET", b"/before", timeout=5) == b"kept", "the map came back from its journal"
        back = time.monotonic() - killed
        print("\nthe Clone server answered (its map recovered) %.3fs after it was killed" % back)
        assert back < 1.0, "the Clone server answered %.3fs after its death" % back
        assert clone.set("/after", b"new", wait=5), "the client reconnected to the restarted server"
        assert clone.get("/before") == b"kept"
        during = len(served)
        wait_for(lambda: len(served) > during + 10, 10, "MDP requests still flowing")
        assert failures == [], failures
        assert node.tree.call("CHILDREN")[2]["last_reason"] == "Crash: killed from the dashboard"
        wait_for(lambda: metrics(node).get(("zactors_supervisor_restarts_total", ())) == 1, 10,
                 "/metrics to count the restart")
        m = metrics(node)
        assert m[("zactors_supervisor_part_restarts", (("part", "clone"),))] == 1
        assert m[("zactors_supervisor_part_restarts", (("part", "majordomo"),))] == 0
        assert node.failure is None and not node.failed.is_set()
        status, _, body = kill(node.url, "nothing")
        assert status == 404 and b"no part 'nothing'" in body
    finally:
        stop.set()
        traffic.join(timeout=15)
        clone.destroy()
        mdp.close()
        worker.destroy()
        node.stop()


def test_parts_dying_too_often_stop_the_node_with_one_line(processes, tmp_path):
    proc = start_cli(processes, "up", "--data", str(tmp_path / "data"), "--mdp", "tcp://127.0.0.1:*",
                     "--zeps", "tcp://127.0.0.1:*", "--clone-port", "0", "--web", "127.0.0.1:0", "--no-harmony")
    lines = read_until(proc.stdout, "up: Ctrl-C stops")
    url = [line.split()[1] for line in lines if line.startswith("dashboard")][0]
    kills = 0
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        status, _, _ = kill(url, "zeps") if kills < 6 else (None, None, None)
        if status == 200:
            kills += 1
        elif kills >= 6:
            break
        gevent.sleep(0.05)  # pacing: the part must be back before the next kill counts
    out, err = proc.communicate(timeout=30)
    assert kills == 6 and proc.returncode == 1, (kills, proc.returncode, err[-2000:])
    last = err.strip().splitlines()[-1]
    assert last.startswith("zactors: error: the node stopped: RestartIntensityExceeded: up gave up: "
                           "more than 5 restarts in 10s; the last, of 'zeps', after: Crash: killed from the dashboard"), last


def test_a_killed_harmony_node_comes_back_and_the_dashboard_follows(tmp_path):
    node = start(tmp_path, harmony={"groups": ["ops"]})
    try:
        old = node.harmony
        status, _, body = kill(node.url, "harmony")
        assert status == 200, body
        wait_for(lambda: node.harmony is not old and node.tree.child("harmony") is node.harmony.actor, 5,
                 "a new Harmony node")
        assert node.harmony.actor.call("OWN_GROUPS", timeout=5) == ["ops"], "it joined its groups again"

        def sampled_new_node():
            part = request(node.url + "api/harmony")
            data = json.loads(part[2]).get("data") or {}
            return data.get("uuid") == node.harmony.id
        wait_for(sampled_new_node, 10, "the dashboard sampling the new node")
    finally:
        node.stop()


def test_the_dashboard_is_a_part_restarted_on_its_url_and_shows_its_own_restart(tmp_path):
    node = start(tmp_path, harmony={"enabled": False})
    try:
        first = node.dashboard
        names = [c["name"] for c in json.loads(request(node.url + "api/supervisor")[2])["data"]["children"]]
        assert names == ["majordomo", "zeps", "clone", "dashboard"], "the dashboard shows itself in the tree"
        status, _, body = kill(node.url, "dashboard")  # from its own page
        assert status == 200, body
        wait_for(lambda: node.dashboard not in (None, first), 10, "a new dashboard")

        def shows_its_restart():
            status, _, body = request(node.url + "api/supervisor")  # the same URL
            children = {c["name"]: c for c in json.loads(body)["data"]["children"]} if status == 200 else {}
            return children.get("dashboard", {}).get("restarts") == 1 and children["dashboard"]["running"]
        wait_for(shows_its_restart, 10, "the restarted dashboard showing its own restart")
        dashboard = {c["name"]: c for c in json.loads(request(node.url + "api/supervisor")[2])["data"]["children"]}
        assert dashboard["dashboard"]["last_reason"] == "Crash: killed from the dashboard"
        assert metrics(node)[("zactors_supervisor_part_restarts", (("part", "dashboard"),))] == 1

        second = node.dashboard  # its sampler dying is the dashboard dying
        second.sampler.post(lambda: 1 / 0)
        wait_for(lambda: node.dashboard not in (None, second), 10, "a dashboard after the sampler's death")
        reason = node.tree.report()["children"][-1]["last_reason"]
        assert reason.startswith("RuntimeError: the dashboard's sampler ended: ZeroDivisionError"), reason
        assert request(node.url + "api/status")[0] == 200
        assert node.failure is None and not node.failed.is_set()
    finally:
        node.stop()
    assert node.dashboard is None and node.server is None


def test_a_restarted_harmony_part_keeps_its_identity_and_its_peers_see_it_come_back(tmp_path):
    from zactors.patterns.harmony.node import Node
    node = start(tmp_path, harmony={"name": "up-node"}, majordomo={"enabled": False}, zeps={"enabled": False},
                 clone={"enabled": False})
    # Zyre's timeouts (evasive 5 s, expired 30 s): the visitor keeps the endpoint it knows and greets the new
    # incarnation when the old one's connection drops; it never waits for an expiry (#22)
    visitor = Node("visitor", beacon=False, host="127.0.0.1", endpoints=[node.harmony.endpoint]).start()
    try:
        first = node.harmony
        seen = []

        def entered(count):
            for event in visitor.events(timeout=0.2):
                seen.append((event.type, event.peer))
            return [p for t, p in seen if t == "ENTER"].count(first.id) >= count
        wait_for(lambda: entered(1), 10, "the visitor meeting the node")
        status, _, body = kill(node.url, "harmony")
        assert status == 200, body
        wait_for(lambda: node.harmony is not first and node.tree.child("harmony") is node.harmony.actor, 5,
                 "a new Harmony node")
        assert node.harmony.id == first.id and node.harmony.endpoint == first.endpoint
        # the same peer (same id) serves again: the visitor saw it go (EXIT) and come back (ENTER), and what
        # it says reaches the visitor as from that id, well before the visitor's 30 s expiry
        def heard_back():
            node.harmony.whisper(visitor.id, "back")
            for event in visitor.events(timeout=0.2):
                seen.append((event.type, event.peer))
            return ("WHISPER", first.id) in seen
        wait_for(heard_back, 15, "the visitor hearing the same peer again")
        assert ("EXIT", first.id) in seen[seen.index(("ENTER", first.id)):], seen
        assert visitor.peers() == [first.id], "one peer, the same one"
        wait_for(lambda: visitor.id in node.harmony.peers(), 10, "the new incarnation knowing the visitor")
        node.harmony.whisper(visitor.id, b"back")
        event = visitor.recv(timeout=10)
        while event is not None and event.type != "WHISPER":
            event = visitor.recv(timeout=10)
        assert event is not None and event.frames == [b"back"] and event.peer == first.id
    finally:
        visitor.stop()
        node.stop()


def test_a_killed_zeps_broker_comes_back_with_its_journal_and_its_clients(tmp_path):
    from zactors.patterns.zeps import Publisher
    from zactors.patterns.zeps.client import Subscriber
    node = start(tmp_path, harmony={"enabled": False}, clone={"enabled": False})
    endpoint = client_endpoint(node.zeps.endpoint)
    publisher = Publisher(endpoint, "orders", idempotent=True)
    subscriber = None
    try:
        for i in range(100):
            publisher.publish("k", b"%d" % i)
        publisher.flush(timeout=10)
        old = node.zeps
        status, _, body = kill(node.url, "zeps")
        assert status == 200, body
        wait_for(lambda: node.zeps not in (None, old), 5, "the ZEPS broker restarted")
        assert node.zeps.call("INFO", timeout=5)["streams"]["orders"]["last_seq"] == 100, "its journal recovered"
        assert node.zeps.endpoint == old.endpoint
        publisher.publish("k", b"100")  # the same publisher: it reattaches by itself
        publisher.flush(timeout=10)
        subscriber = Subscriber(endpoint, "orders", from_seq=1)
        got = []
        while len(got) < 101:
            message = subscriber.get(timeout=10)
            assert message is not None, "only %d messages came back" % len(got)
            got.append(message)
        assert [m.body for m in got] == [b"%d" % i for i in range(101)] and got[-1].seq == 101
    finally:
        if subscriber is not None:
            subscriber.destroy()
        publisher.close()
        node.stop()


def test_a_killed_majordomo_broker_comes_back_and_its_worker_and_client_reconnect(tmp_path):
    node = start(tmp_path, harmony={"enabled": False}, clone={"enabled": False}, zeps={"enabled": False})
    worker = Echo(node.broker.endpoint)
    mdp = MdpClient(node.broker.endpoint)
    try:
        assert mdp.request("echo", b"before", timeout=10) == [[b"before"]]
        old = node.broker
        status, _, body = kill(node.url, "majordomo")
        assert status == 200, body
        wait_for(lambda: node.broker not in (None, old), 5, "the Majordomo broker restarted")
        assert node.broker.endpoint == old.endpoint
        started = time.monotonic()

        def served():
            try:
                return mdp.request("echo", b"after", timeout=2) == [[b"after"]]
            except Exception:  # noqa: BLE001 - the worker has not said READY to the new broker yet
                return False
        wait_for(served, 30, "the worker and the client back on the restarted broker")
        print("\nserved again %.1fs after the broker's restart" % (time.monotonic() - started))
    finally:
        mdp.close()
        worker.destroy()
        node.stop()
