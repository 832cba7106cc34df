"""The dashboard and /metrics show ZEPS published/delivered totals as well as rates (issue 21); delivered
counts subscribers that have left too."""
import pytest
from prometheus_client.parser import text_string_to_metric_families

from zactors.patterns.zeps import Publisher, Subscriber

from ...conftest import wait_for
from .helpers import get_json, request

pytestmark = pytest.mark.timeout(60)


def _metrics(node):
    status, _, body = request(node.url + "metrics")
    assert status == 200
    return {s.name: s.value for f in text_string_to_metric_families(body.decode()) for s in f.samples}


def test_totals_on_the_dashboard_and_in_metrics(node):
    with Publisher(node.zeps.endpoint, "orders") as pub:
        for i in range(30):
            pub.publish("k", "%d" % i)
        pub.flush()
    sub = Subscriber(node.zeps.endpoint, "orders", timeout=10)
    try:
        assert [sub.get(10).seq for _ in range(30)] == list(range(1, 31))
    finally:
        sub.destroy()                   # gone: what it was delivered still counts
    sub = Subscriber(node.zeps.endpoint, "orders", from_seq=21, timeout=10)
    try:
        assert [sub.get(10).seq for _ in range(10)] == list(range(21, 31))

        def totals():
            return get_json(node.url + "api/status")["sources"]["zeps"].get("totals")
        wait_for(lambda: totals() == {"published": 30, "delivered": 40}, 10, "the totals in the snapshot")
        wait_for(lambda: (_metrics(node).get("zactors_zeps_published_total"),
                          _metrics(node).get("zactors_zeps_delivered_total")) == (30, 40), 10, "the totals in /metrics")
        assert "zactors_clone_updates_total" in _metrics(node)
    finally:
        sub.destroy()
