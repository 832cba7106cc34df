"""The dashboard's ZEPS page of a `zactors up` node with a cluster map (issue #23), in a headless Chromium:
another pair's stream is listed with its pair, and the cluster's pairs are shown."""
import json

import pytest

from zactors.patterns.zeps import Publisher
from zactors.patterns.zeps.broker import Broker
from zactors.patterns.zeps.cluster import ClusterMap

from .test_browser import page, up  # noqa: F401 - the page fixture (skips without Chromium / Selenium)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def test_the_zeps_page_lists_every_pair_of_the_cluster_map(processes, tmp_path, page):  # noqa: F811
    other = Broker(str(tmp_path / "other"), "ipc://%s/other.zeps" % tmp_path)   # the map's second "pair"
    try:
        own = "ipc://%s/node.zeps" % tmp_path
        pairs = [own, other.endpoint]
        config = tmp_path / "node.toml"
        config.write_text("[zeps]\ncluster = %s\n" % json.dumps(pairs))
        proc, where = up(processes, tmp_path, "--config", str(config), "--zeps", own, "--no-harmony")
        try:
            cluster = ";".join(pairs)
            name = next("s%d" % i for i in range(100) if ClusterMap.parse(cluster).index_for(b"s%d" % i) == 1)
            with Publisher(cluster, name) as pub:      # lands on the other broker, by the map
                pub.publish("k", "v")
                pub.flush()
            page.open(where["dashboard"] + "#/zeps")
            page.wait(lambda: any(r and r[0] == "%s (pair 2)" % name for r in page.rows("tr")),
                      what="the other pair's stream, marked")
            rows = page.rows("tr")
            assert any(r[:2] == ["1. " + own, "single"] for r in rows), rows
            assert any(r[:2] == ["2. " + other.endpoint, "single"] for r in rows), rows
            page.shot("zeps-cluster")
        finally:
            proc.terminate()
            assert proc.wait(timeout=20) == 0
    finally:
        other.destroy()
