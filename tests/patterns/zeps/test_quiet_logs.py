"""Issue 20: what a swarm of peers does is counted, not logged line by line (a flood of lines is a flood)."""
import logging

import pytest

from zactors.patterns.zeps import protocol as p

from .conftest import Raw
from .test_budgets import junk_streams, poll

pytestmark = pytest.mark.timeout(60)
pytest.importorskip("zactors.actors.journal")


def test_junk_streams_and_silent_peers_are_counted_not_logged_each(journal_dir, caplog):
    from zactors.patterns.zeps.broker import Broker
    broker = Broker(journal_dir, heartbeat=0.2, expiry=0.6, max_streams_per_peer=64)
    silent = []
    try:
        with caplog.at_level(logging.INFO, logger="zactors.patterns.zeps.broker"):
            assert junk_streams(broker.endpoint, [b"junk-%d" % i for i in range(30)], publish=True) == []
            for _ in range(30):             # peers that attach, then never answer a PING
                peer = Raw(broker.endpoint)
                peer.send(p.attach(b"junk-0"))
                silent.append(peer)
            assert poll(lambda: broker.call("$STATS").get("peers_expired", 0) >= 30, timeout=30)
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
        assert sum(" open (sequences " in line for line in lines) == 0, lines       # was 30
        assert sum(" silent for " in line for line in lines) == 1, lines            # was 30
    finally:
        for peer in silent:
            peer.close()
        broker.destroy()
