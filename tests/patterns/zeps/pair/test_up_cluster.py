"""``zactors up`` with a cluster map in its TOML: the dashboard's ZEPS page shows every pair's streams and
tails a stream that lives on another pair."""
import json

import pytest

from zactors.apps.up import ConfigError, Up, load_config
from zactors.patterns.zeps import Publisher
from zactors.patterns.zeps.cluster import ClusterMap

from tests.apps.dashboard.helpers import EventStream, config, get_json

from .conftest import Pair, wait_for

pytestmark = pytest.mark.timeout(90)


def test_up_with_a_cluster_map_shows_and_tails_the_streams_of_every_pair(tmp_path):
    pair = Pair(tmp_path / "pair", ack="replicated")
    node = None
    try:
        primary, backup = pair.up()
        own = "ipc://%s/node.zeps" % tmp_path
        pairs = [own, "%s,%s" % (primary.endpoint, backup.endpoint)]   # this node's broker, then a pair
        toml = tmp_path / "node.toml"
        toml.write_text('data = "%s"\n[zeps]\nbind = "%s"\ncluster = %s\n[harmony]\nenabled = false\n'
                        '[dashboard]\nbind = "127.0.0.1:0"\ninterval = 0.2\n[majordomo]\nenabled = false\n'
                        '[clone]\nenabled = false\n' % (tmp_path / "data", own, json.dumps(pairs)))
        node = Up(load_config(str(toml))).start()
        cluster = ";".join(pairs)
        placed = ClusterMap.parse(cluster)
        names = {index: next("s%d" % i for i in range(100) if placed.index_for(b"s%d" % i) == index)
                 for index in (0, 1)}
        for name in names.values():
            with Publisher(cluster, name, idempotent=True) as pub:
                for i in range(10):
                    pub.publish("k", "%s %d" % (name, i))
                pub.flush()

        def page():
            return get_json(node.url + "api/status")["sources"]["zeps"]["data"]
        wait_for(lambda: set(names.values()) <= set(page()["streams"]), 20, "both pairs' streams on the page")
        data = page()
        local, remote = data["streams"][names[0]], data["streams"][names[1]]
        assert "remote" not in local and remote["remote"] == 1 and remote["last_seq"] == 10
        assert [(c["pair"], c.get("state")) for c in data["cluster"]] == [(pairs[0], "single"), (pairs[1], "active")]
        host, port = node.server.address[:2]    # the tail of a stream on the other pair: through the map
        tail = EventStream(host, port, "/api/zeps/tail?stream=%s" % names[1])
        try:
            assert tail.status == 200
            with Publisher(cluster, names[1]) as pub:
                pub.publish("k", b"live")
                pub.flush()
                name, event = tail.next_event()
            assert name == "messages" and json.loads(event)["messages"][0]["body"]["text"] == "live"
        finally:
            tail.close()
    finally:
        if node is not None:
            node.stop()
        pair.close()


@pytest.mark.parametrize("value", ["tcp://a:1;tcp://b:2", [], ["tcp://a:1", 5], ["a;b"]])
def test_a_bad_cluster_map_is_one_line(tmp_path, value):
    with pytest.raises(ConfigError) as refused:
        Up(config(tmp_path, harmony={"enabled": False}, zeps={"cluster": value})).start()
    assert "[zeps] cluster is a list of pairs" in str(refused.value) and "\n" not in str(refused.value)
