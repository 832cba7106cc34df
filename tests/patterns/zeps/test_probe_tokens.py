"""PROBE and PROBE-OK (FEATURES "tokens", a zactors extension): the broker's PING to a subscriber that asked
carries a random token, and only its echo says what it drained.  Our Subscriber and Consumer speak it, so
a broker that requires it (``require_tokens``) serves them through many times its credit budget."""
import pytest

from zactors.patterns.zeps import protocol as p
from zactors.patterns.zeps.client import Publisher, Subscriber

pytestmark = pytest.mark.timeout(60)
pytest.importorskip("zactors.actors.journal")

KiB = 1 << 10


def test_probe_and_probe_ok_codec():
    assert p.probe(1) == b"\xaa\xa5\x18" + (1).to_bytes(8, "big")
    assert p.probe_ok(2 ** 64 - 1) == b"\xaa\xa5\x19" + b"\xff" * 8
    for message in (p.Probe(7), p.ProbeOk(2 ** 63)):
        decoded = p.decode(p.encode(message))
        assert decoded == message and type(decoded) is type(message)
    with pytest.raises(p.ProtocolError, match="PROBE-OK token"):
        p.decode(p.probe_ok(5)[:-1])
    with pytest.raises(p.ProtocolError, match="PROBE"):
        p.decode(p.probe(5) + b"x")


def _broker(journal_dir):
    from zactors.patterns.zeps.broker import Broker
    return Broker(journal_dir, max_message=16 * KiB, max_credit=64 * KiB, max_credit_total=64 * KiB,
                  require_tokens=True, streams=["s"])


def test_a_subscriber_answers_probes_through_many_budgets(journal_dir):
    with _broker(journal_dir) as broker:
        with Subscriber(broker.endpoint, "s", new=True, window=256 * KiB) as sub, \
                Publisher(broker.endpoint, "s") as pub:
            for i in range(200):  # 2 MB: 30 times the budget, released only by PROBE-OKs
                pub.publish(b"k", b"%d" % i + bytes(10000))
            pub.flush()
            got = [sub.get(timeout=10) for _ in range(200)]
            assert [m.seq for m in got if m is not None] == list(range(1, 201))
        counters = broker.call("$STATS")
    assert counters.get("refused_spec_only", 0) == 0 and counters.get("probes_forged", 0) == 0, counters
    assert counters.get("peers_stalled", 0) == 0, counters


def test_a_consumer_answers_probes_through_many_budgets(journal_dir):
    from zactors.patterns.zeps.consumer import Consumer
    with _broker(journal_dir) as broker:
        with Publisher(broker.endpoint, "s") as pub:
            for i in range(200):
                pub.publish(b"k", b"%d" % i + bytes(10000))
            pub.flush()
        with Consumer(broker.endpoint, "s", "g", window=32 * KiB) as consumer:
            seen = set()
            while len(seen) < 200:
                message = consumer.get(timeout=10)
                assert message is not None, "the consumer stopped at %d of 200" % len(seen)
                seen.add(message.seq)
                message.ack()
        counters = broker.call("$STATS")
    assert counters.get("refused_spec_only", 0) == 0 and counters.get("probes_forged", 0) == 0, counters
