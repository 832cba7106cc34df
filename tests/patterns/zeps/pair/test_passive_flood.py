"""An idempotent publisher that fails over does not flood the passive (issue #23, leftovers item 7).

When the active goes, the publisher attaches to the other broker, which may still be passive (the
vote needs the active silent for two heartbeats): it refuses the ATTACH, and every PUBLISH-ID pipelined
behind it ("PUBLISH before ATTACH", each answered INVALID and DETACH).  The publisher used to resend all
its unconfirmed messages behind every such ATTACH, to each broker in turn, until one took over: thousands
of refusals (and warning lines) in the pair benchmark.  Now it sends them only once an ATTACH-OK came.
"""
import gevent
import gevent.event
import pytest

from zactors.patterns.zeps.client import Publisher

from .conftest import records, wait_for

pytestmark = pytest.mark.timeout(120)


def test_failover_under_load_sends_the_passive_no_flood_of_refused_publishes(make_pair):
    pair = make_pair(ack="replicated", on_passive_lost="degrade", passive_timeout=0.5)
    primary, backup = pair.up()
    endpoints = "%s,%s" % (primary.endpoint, backup.endpoint)
    pub = Publisher(endpoints, "s", idempotent=True, heartbeat=0.2, expiry=1.0)
    stop = gevent.event.Event()
    sent = [0]

    def publish():
        while not stop.is_set():
            for _ in range(500):
                sent[0] += 1
                pub.publish("k", b"%d" % sent[0])
            gevent.sleep(0.002)

    worker = gevent.spawn(publish)
    try:
        wait_for(lambda: sent[0] > 5000, 20, "publishing")
        refused_before = backup.call("INFO")["counters"].get("invalid", 0)
        pair.stop("primary")
        wait_for(lambda: pair_state(backup) == "active", 20, "the backup to take over")
        wait_for(lambda: pub.stats["reattached"] >= 1, 20, "the publisher's failover")
        stop.set()
        worker.join(10)
        pub.flush(timeout=30)
        refused = backup.call("INFO")["counters"].get("invalid", 0) - refused_before
        print("\n%d published; the passive refused %d commands during the failover; resent %d"
              % (sent[0], refused, pub.stats["resent"]))
        assert refused < 100, "the passive refused %d commands (a flood of resent PUBLISHes)" % refused
        got, _epochs = records(pair.dirs["backup"], b"s")
        bodies = [int(r.body) for r in got]
        assert pub.confirmed == sent[0]
        assert bodies == list(range(1, sent[0] + 1))      # nothing lost, nothing twice, in order
    finally:
        stop.set()
        pub.close()


def pair_state(broker):
    return broker.call("INFO")["pair"]["state"]
