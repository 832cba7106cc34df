"""The credit budget is shared fairly: subscribers that ask for all of it and never read stall only
themselves, never a subscriber that reads (issue #20, the hostile soak: its p99 was 270-990 ms)."""
import time

import gevent
import pytest

from zactors.patterns.zeps import protocol as p
from zactors.patterns.zeps.client import Publisher, Subscriber

from .test_budgets import MiB, BrokerProcess, never_reading, poll

pytestmark = pytest.mark.timeout(120)
pytest.importorskip("zactors.actors.journal")


def test_credit_floods_that_never_read_do_not_delay_a_reading_subscriber(journal_dir, processes):
    broker = BrokerProcess(processes, journal_dir, max_credit=8 * MiB, max_credit_total=16 * MiB, expiry=60.0)
    with Publisher(broker.endpoint, "s") as pub, Subscriber(broker.endpoint, "s", new=True, window=1 * MiB) as sub:
        pub.publish(b"k", b"first")
        assert sub.get(timeout=10).body == b"first"
        hostile = [never_reading(broker.endpoint, b"s", 8 * MiB) for _ in range(12)]

        def flood():  # and again and again, as the swarm's credit flood does
            while True:
                for peer in hostile:
                    peer.send(p.credit(2 ** 32))
                gevent.sleep(0.01)

        flooding = gevent.spawn(flood)
        rtts = []
        try:
            for i in range(150):
                t0 = time.monotonic()
                pub.publish(b"k", b"%d" % i)
                message = sub.get(timeout=10)
                rtts.append(time.monotonic() - t0)
                assert message is not None and message.body == b"%d" % i, (i, message)
                gevent.sleep(0.01)
            info = broker.info()
        finally:
            flooding.kill()
            for peer in hostile:
                peer.close()
    rtts.sort()
    print("publish -> deliver under the credit flood: p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (
        rtts[len(rtts) // 2] * 1000, rtts[int(len(rtts) * 0.99)] * 1000, rtts[-1] * 1000))
    counters = info["counters"]
    assert counters["credit_deferred"] >= 1 and counters["credit_revoked"] >= 1  # the floods were held back
    assert info["credit"]["held"] <= 16 * MiB
    assert rtts[int(len(rtts) * 0.99)] < 0.15, "a reading subscriber waited %.0f ms" % (rtts[-1] * 1000)


@pytest.mark.xfail(strict=True, reason="open defect: never-readers that SPEND their credit (the stream has data for "
                   "them) hold it in flight (libzmq's queue to them) until their connection goes, even once expired "
                   "(gone_holding): the budget stays full and a reading subscriber gets nothing; revoking unspent "
                   "credit cannot help. Needs the bytes of peers that never acknowledge bounded apart (a share of "
                   "the budget) or freed (their queue dropped)")
def test_never_readers_that_spend_their_credit_do_not_starve_a_reading_subscriber(journal_dir, processes):
    broker = BrokerProcess(processes, journal_dir, max_credit=8 * MiB, max_credit_total=16 * MiB, heartbeat=0.5,
                           expiry=3.0)
    with Publisher(broker.endpoint, "s") as pub:
        for _ in range(32):
            pub.publish(b"k", bytes(1000000))
        pub.flush()
    hostile = [never_reading(broker.endpoint, b"s", 8 * MiB) for _ in range(2)]
    try:
        poll(lambda: broker.info()["credit"]["held"] == 16 * MiB)
        with Subscriber(broker.endpoint, "s", from_seq=0, window=4 * MiB) as sub:
            first = sub.get(timeout=10)
        assert first is not None and first.seq == 1, "the reader got nothing: %s" % broker.info()["credit"]
    finally:
        for peer in hostile:
            peer.close()
