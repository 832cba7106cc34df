"""``zactors up`` with a ZEPS pair in its config; the dashboard's sample, health and /metrics show the pair."""
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from zactors.apps.up import ConfigError, Up
from zactors.patterns.zeps import Publisher

from tests.apps.dashboard.helpers import EventStream, config, get_json, request

from .conftest import wait_for

pytestmark = pytest.mark.timeout(90)


def _metrics(node):
    status, _, body = request(node.url + "metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(body.decode()) for s in f.samples}


def test_two_nodes_run_a_pair_and_the_dashboard_shows_role_lag_and_last_failover(tmp_path):
    links = {role: "ipc://%s/%s.pair" % (tmp_path, role) for role in ("primary", "backup")}
    nodes = {}
    try:
        for role, other in (("primary", "backup"), ("backup", "primary")):
            nodes[role] = Up(config(tmp_path / role, harmony={"enabled": False}, zeps={
                "role": role, "peer": links[other], "pair_bind": links[role], "ack": "replicated"})).start()
        primary, backup = nodes["primary"], nodes["backup"]
        wait_for(lambda: backup.zeps.call("INFO")["pair"]["ready"] and
                 backup.zeps.call("INFO")["pair"]["state"] == "passive", 20, "the pair")
        with Publisher("%s,%s" % (primary.zeps.endpoint, backup.zeps.endpoint), "orders", idempotent=True) as pub:
            for i in range(100):
                pub.publish("k", b"%d" % i)
            pub.flush()
        wait_for(lambda: _metrics(primary).get(("zactors_zeps_pair_replication_lag", (("stream", "orders"),))) == 0,
                 10, "the primary's pair gauges after the publish (not a sample from before it)")
        metrics = _metrics(primary)
        assert metrics[("zactors_zeps_pair_replication_lag", (("stream", "orders"),))] == 0
        assert metrics[("zactors_zeps_pair_degraded", (("role", "primary"),))] == 0
        assert metrics[("zactors_zeps_pair_last_change_time", (("role", "primary"),))] > 0
        assert _metrics(backup)[("zactors_zeps_pair_active", (("role", "backup"),))] == 0
        wait_for(lambda: get_json(primary.url + "api/status")["sources"]["zeps"]["status"] == "ok", 10, "ok")
        zeps = get_json(primary.url + "api/status")["sources"]["zeps"]
        assert "primary active" in zeps["summary"]
        pair = zeps["data"]["pair"]              # what the page draws its pair line from
        assert (pair["role"], pair["state"], pair["peer_state"]) == ("primary", "active", "passive")
        assert pair["replication_lag"] == {"orders": 0} and pair["last_failover"]["to"] == "active"
        # the passive's dashboard tails the stream through the active (the broker's pair peer)
        host, port = backup.server.address[:2]
        tail = EventStream(host, port, "/api/zeps/tail?stream=orders")
        try:
            assert tail.status == 200
            with Publisher("%s,%s" % (primary.zeps.endpoint, backup.zeps.endpoint), "orders") as pub:
                pub.publish("k", b"live")
                pub.flush()
                name, data = tail.next_event()
            assert name == "messages" and json.loads(data)["messages"][0]["body"]["text"] == "live"
        finally:
            tail.close()
        nodes.pop("backup").stop()
        wait_for(lambda: get_json(primary.url + "api/status")["sources"]["zeps"]["status"] == "warn", 20,
                 "a warning: no passive")
    finally:
        for node in nodes.values():
            node.stop()


@pytest.mark.parametrize("zeps, says", [
    ({"ack": "replicated"}, "need role"),
    ({"role": "primary"}, "role needs peer"),
    ({"role": "leader", "peer": "tcp://127.0.0.1:1", "pair_bind": "tcp://127.0.0.1:2"}, "is 'primary' or 'backup'"),
])
def test_pair_config_errors_are_one_line(tmp_path, zeps, says):
    with pytest.raises(ConfigError) as refused:
        Up(config(tmp_path, harmony={"enabled": False}, zeps=zeps)).start()
    assert says in str(refused.value) and "\n" not in str(refused.value)
