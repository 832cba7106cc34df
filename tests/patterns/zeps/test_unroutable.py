"""A clean publish, subscribe and close is not counted as ``unroutable`` by the broker (issue 21): the
DETACH-OK answering a client's DETACH, and the PING to a subscriber that left, found the client's
connection closed (it closes as it goes), and each was counted as a routing failure."""
import pytest

from zactors.patterns.zeps import Publisher, Subscriber

from ...conftest import wait_for

pytestmark = pytest.mark.timeout(60)


def test_clean_clients_leave_no_unroutable(broker):
    def counters():
        return broker.call("INFO")["counters"]

    for _ in range(5):
        with Publisher(broker.endpoint, "s") as pub:
            pub.publish("k", "v")
            pub.flush()
    for _ in range(3):
        sub = Subscriber(broker.endpoint, "s", timeout=10)
        assert [sub.get(10).seq for _ in range(5)] == [1, 2, 3, 4, 5]
        sub.destroy()
    wait_for(lambda: counters().get("disconnects", 0) == 8, 10, "eight connections closed")
    assert counters().get("detached") == 8 and broker.call("INFO")["peers"] == 0
    assert counters().get("unroutable", 0) == 0, counters()
