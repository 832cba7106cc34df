"""The dashboard and /metrics name the ZEPS broker's acknowledgement level, and each stream's journal lag
(appended not yet written, written not yet fsynced), as issue #19 asks (the level named as everywhere)."""
import pytest
from prometheus_client.parser import text_string_to_metric_families

from zactors.patterns.zeps import Publisher

from ...conftest import wait_for
from .helpers import get_json, request, start

pytestmark = pytest.mark.timeout(60)


def _metrics(node):
    body = request(node.url + "metrics")[2].decode()
    return {s.name + repr(sorted(s.labels.items())): s.value
            for f in text_string_to_metric_families(body) for s in f.samples}


@pytest.mark.parametrize("ack", ["written", "synced"])
def test_the_ack_level_and_the_journal_lag_are_shown(tmp_path, ack):
    node = start(tmp_path, zeps={"ack": ack})
    try:
        with Publisher(node.zeps.endpoint, "orders") as pub:
            for i in range(10):
                pub.publish(b"k", b"%d" % i)
            pub.flush()
        seen = {}

        def sampled():
            seen["zeps"] = get_json(node.url + "api/zeps")
            seen["metrics"] = _metrics(node)
            return ("orders" in seen["zeps"]["data"]["streams"]
                    and "zactors_zeps_stream_unwritten[('stream', 'orders')]" in seen["metrics"])
        wait_for(sampled, 10, "the stream in a snapshot and in /metrics")
        zeps, metrics = seen["zeps"], seen["metrics"]
        assert zeps["data"]["ack"] == ack
        assert zeps["summary"].endswith("ack %s" % ack), zeps["summary"]
        assert metrics["zactors_zeps_ack_level[('level', '%s')]" % ack] == 1
        assert metrics["zactors_zeps_stream_unwritten[('stream', 'orders')]"] == 0  # flushed: all written
        assert "zactors_zeps_stream_unsynced[('stream', 'orders')]" in metrics
        if ack == "synced":  # flush() returned: an fsync covered every message
            assert metrics["zactors_zeps_stream_unsynced[('stream', 'orders')]"] == 0
    finally:
        node.stop()
