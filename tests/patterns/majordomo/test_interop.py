"""Interoperability with the real majortomo 0.2.0 package, both ways (framing="majortomo").

majortomo blocks in plain pyzmq calls, so its peers run in OS threads here
while the zactors actors run on this thread's gevent hub.
"""
import threading

import pytest

majortomo = pytest.importorskip("majortomo")
from majortomo import broker as mbroker  # noqa: E402

from zactors.patterns.majordomo import Broker, Client, ServiceError, Worker  # noqa: E402
from tests.conftest import wait_for  # noqa: E402
from tests.patterns.majordomo.conftest import Count, Echo  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def run_thread(target, *args):
    result = {}

    def main():
        try:
            result["value"] = target(*args)
        except BaseException as exc:  # reported by the test
            result["error"] = exc
    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    return thread, result


def join(thread, result, timeout=20):
    wait_for(lambda: not thread.is_alive(), timeout, "thread end")
    if "error" in result:
        raise result["error"]
    return result.get("value")


def majortomo_worker(endpoint, service):
    """Echo, with a partial first when asked; stops after a b"quit" request."""
    worker = majortomo.Worker(endpoint, service, heartbeat_interval=0.2)
    requests = majortomo.WorkerRequestsIterator(worker)
    served = 0
    for request in requests:
        served += 1
        if request[0] == b"partial":
            requests.send_reply_partial([b"part"])
        requests.send_reply_final(request)
        if request[0] == b"quit":
            requests.stop()
    return served


def majortomo_client(endpoint, service, *bodies):
    with majortomo.Client(endpoint) as client:
        replies = []
        for body in bodies:
            client.send(service, body)
            replies.append(list(client.recv_all(timeout=10)))
        return replies


def test_majortomo_client_and_worker_on_a_zactors_broker():
    with Broker(heartbeat=0.2, liveness=5, framing="majortomo") as broker:
        worker = run_thread(majortomo_worker, broker.endpoint, b"echo")
        wait_for(lambda: broker.call("INFO")["workers"] == 1, 10, "majortomo worker READY")
        replies = join(*run_thread(majortomo_client, broker.endpoint, b"echo", b"hello", b"partial"))
        assert replies == [[[b"hello"]], [[b"part"], [b"partial"]]]
        # zactors' own client, in majortomo framing, on the same broker
        with Client(broker.endpoint, framing="majortomo") as client:
            assert client.request("mmi.service", "echo") == [[b"200"]]
            assert client.request("echo", "quit") == [[b"quit"]]
        assert join(*worker) == 3
        c = broker.call("INFO")["counters"]
        assert c["replies"] == 3 and c["partials"] == 1 and "invalid" not in c and "unexpected" not in c


class _Broker(mbroker.Broker):
    """majortomo's broker, telling us the port it bound."""

    def bind(self):
        super().bind()
        self.endpoint = self._socket.last_endpoint.decode()

    def close(self):  # its own close() disconnects a wildcard address and raises
        if self._socket is not None:
            self._socket.close(0)
            self._socket = None


def test_zactors_client_and_worker_on_a_majortomo_broker(workers):
    broker = _Broker("tcp://127.0.0.1:*", heartbeat_interval=0.2, heartbeat_timeout=2.0)
    thread, result = run_thread(broker.run)
    try:
        wait_for(lambda: getattr(broker, "endpoint", None), 10, "majortomo broker bound")
        workers(Echo, broker.endpoint, framing="majortomo", heartbeat=0.2)
        workers(Count, broker.endpoint, framing="majortomo", heartbeat=0.2)
        with Client(broker.endpoint, framing="majortomo", timeout=5) as client:
            assert client.request("echo", "hello", "there") == [[b"hello", b"there"]]
            assert client.request("count", "2") == [[b"0"], [b"1"], [b"done"]]
            for i in range(20):
                assert client.request("echo", b"%d" % i) == [[b"%d" % i]]
    finally:
        broker.stop()
        join(thread, result)


class Failing(Worker):
    def handle(self, request):
        raise KeyError(request[0].decode())


def test_an_error_reply_crosses_a_majortomo_broker_as_an_ordinary_reply(workers):
    broker = _Broker("tcp://127.0.0.1:*", heartbeat_interval=0.2, heartbeat_timeout=2.0)
    thread, result = run_thread(broker.run)
    try:
        wait_for(lambda: getattr(broker, "endpoint", None), 10, "majortomo broker bound")
        workers(Failing, broker.endpoint, service=b"fail", framing="majortomo", heartbeat=0.2)
        # majortomo's own client sees a three-frame reply (the extension is only body frames)
        replies = join(*run_thread(majortomo_client, broker.endpoint, b"fail", b"k"))
        assert replies == [[[b"\x00MDP-ERROR", b"KeyError", b"'k'"]]]
        with Client(broker.endpoint, framing="majortomo", timeout=5, retries=1) as client:
            with pytest.raises(ServiceError) as raised:
                client.request("fail", "k2")
            assert (raised.value.kind, raised.value.message) == ("KeyError", "'k2'")
    finally:
        broker.stop()
        join(thread, result)
