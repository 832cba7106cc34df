"""Issue 20 (defect 4): every MDP socket that faces the network caps its frames (ZMQ_MAXMSGSIZE)."""
import pytest
import zmq

from zactors.patterns.majordomo import Broker, Client
from zactors.patterns.majordomo.protocol import frame_limit
from tests.patterns.majordomo.conftest import Echo

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("two_endpoints", [False, True])
def test_every_network_socket_has_a_size_cap(two_endpoints):
    limit = 1 << 20
    broker = Broker("tcp://127.0.0.1:*", worker_endpoint="tcp://127.0.0.1:*" if two_endpoints else None,
                    max_message=limit)
    worker = Echo(broker.worker_endpoint, max_message=limit)
    client = Client(broker.endpoint, max_message=limit, timeout=5.0)
    try:
        assert client.request("echo", b"x") == [[b"x"]]
        for router in (broker._crouter, broker._wrouter):
            assert router.socket.getsockopt(zmq.MAXMSGSIZE) == frame_limit(limit)
        assert worker._sock.getsockopt(zmq.MAXMSGSIZE) == frame_limit(limit)
        assert client._idle and all(s.getsockopt(zmq.MAXMSGSIZE) == frame_limit(limit) for s in client._idle)
    finally:
        client.close()
        worker.destroy()
        broker.destroy()
