"""The Majordomo Client's promises: the timeout bounds the whole call; a refused key is said at once."""
import socket
import time

import gevent
import pytest

from zactors.actors.auth import Authenticator, create_keypair, generate_keypair
from zactors.patterns.majordomo import Broker, Client, HandshakeFailed, RequestTimeout

pytestmark = pytest.mark.timeout(60)


def test_timeout_bounds_the_whole_call_pool_wait_included():
    # 200 callers share 8 sockets and no worker answers: each call still ends within timeout x retries
    with Broker(request_expiry=60) as broker:
        with Client(broker.endpoint, timeout=0.3, retries=2, pool_size=8) as client:
            def call():
                started = time.monotonic()
                with pytest.raises(RequestTimeout) as caught:
                    client.request("nobody", "x")
                return time.monotonic() - started, caught.value

            calls = [gevent.spawn(call) for _ in range(200)]
            gevent.joinall(calls, timeout=30, raise_error=True)
    took = [c.value[0] for c in calls]
    assert max(took) < 0.6 + 0.5, max(took)           # the bound, plus slack for a loaded machine
    assert all(c.value[1].connected for c in calls)    # the broker was there: no worker is the reason


def test_no_broker_is_told_from_no_worker():
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    endpoint = "tcp://127.0.0.1:%d" % free.getsockname()[1]
    free.close()  # nothing listens there now
    with Client(endpoint, timeout=0.2, retries=1) as client:
        with pytest.raises(RequestTimeout) as caught:
            client.request("echo", "x")
    assert caught.value.connected is False


def test_bad_settings_name_the_setting():
    for kwargs, says in [({"timeout": 0}, "timeout must be above 0"), ({"retries": 0}, "retries must be 1"),
                         ({"pool_size": 0}, "pool_size must be 1")]:
        with pytest.raises(ValueError, match=says):
            Client("tcp://127.0.0.1:5555", **kwargs)
    with Client("tcp://127.0.0.1:5555") as client:
        with pytest.raises(ValueError, match="a service name cannot be empty"):
            client.request("", "x")


def test_a_refused_key_raises_handshake_failed_at_once(tmp_path):
    server, stranger = generate_keypair(), generate_keypair()
    create_keypair(str(tmp_path), "the-only-client")
    auth = Authenticator(curve=str(tmp_path))  # only that client is accepted
    try:
        with Broker(curve=server) as broker:
            for curve, says in [((server.public, stranger), "refused our key"),
                                ((stranger.public, stranger), "the server public key we use is not its key"),
                                (None, "it uses CURVE")]:
                with Client(broker.endpoint, timeout=20, retries=3, curve=curve) as client:
                    started = time.monotonic()
                    with pytest.raises(HandshakeFailed, match=says):
                        client.request("echo", "x")
                    assert time.monotonic() - started < 5
    finally:
        auth.destroy()
