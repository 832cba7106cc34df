"""Reading never creates a stream: a subscriber to a missing stream is told so (NoSuchStream), and waits
only when asked (``wait=True``, ``zeps subscribe --wait``)."""
import os

import gevent
import pytest

from zactors.apps.cli import main
from zactors.patterns.zeps import NoSuchStream, Publisher, Subscriber

pytestmark = pytest.mark.timeout(60)


def test_a_missing_stream_is_said_and_not_created(broker, journal_dir):
    with pytest.raises(NoSuchStream, match="no stream 'nowhere' on the ZEPS broker at .*wait=True"):
        Subscriber(broker.endpoint, "nowhere", timeout=10)
    info = broker.call("INFO")
    assert info["streams"] == {}
    assert not os.path.exists(os.path.join(journal_dir, "nowhere"))
    assert info["counters"]["no_stream"] == 1 and info["counters"].get("invalid", 0) == 0  # nothing else sent


def test_wait_true_waits_for_the_first_message(broker):
    sub = Subscriber(broker.endpoint, "later", wait=True, timeout=10)
    pub = None
    try:
        pub = Publisher(broker.endpoint, "later")
        pub.publish("k", "first")
        pub.flush()
        message = sub.get(timeout=10)
        assert message is not None and (message.seq, message.body) == (1, b"first")
    finally:
        sub.destroy()
        if pub is not None:
            pub.close()


def test_a_stream_on_disk_is_read_after_a_restart(journal_dir):
    from zactors.patterns.zeps.broker import Broker

    broker = Broker(journal_dir)
    with Publisher(broker.endpoint, "kept") as pub:
        pub.publish("k", "v")
        pub.flush()
    broker.destroy()
    broker = Broker(journal_dir)
    try:
        sub = Subscriber(broker.endpoint, "kept", timeout=10)
        try:
            assert sub.get(timeout=10).body == b"v"
        finally:
            sub.destroy()
    finally:
        broker.destroy()


def test_the_cli_says_so_in_one_line_and_waits_only_with_wait(broker, capsys):
    c = ["--connect", broker.endpoint, "--timeout", "10"]
    assert main(["-q", "zeps", "subscribe", "nowhere", *c]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("zactors zeps subscribe: error: no stream 'nowhere' on the ZEPS broker at %s (--wait waits for "
                   "its first message)" % broker.endpoint), err     # the command's words: not wait=True
    assert broker.call("INFO")["streams"] == {}

    def publish_when_waiting():
        while "soon" not in broker.call("INFO")["streams"]:
            gevent.sleep(0.01)
        with Publisher(broker.endpoint, "soon") as pub:
            pub.publish("k", "hello")
            pub.flush()

    publisher = gevent.spawn(publish_when_waiting)
    try:
        assert main(["-q", "zeps", "subscribe", "soon", "--wait", "--count", "1", *c]) == 0
        assert capsys.readouterr().out == "1\tk\thello\n"
    finally:
        publisher.kill()
    # --wait SECONDS bounds the wait for the first message (as --wait means seconds in every command)
    assert main(["-q", "zeps", "subscribe", "quiet", "--wait", "0.3", *c]) == 1
    assert "stream quiet got no message within 0.3s (--wait)" in capsys.readouterr().err


def test_a_broker_made_endpoint_first_is_refused_in_words(tmp_path):
    # ZepsBroker(endpoint, dir), as the Majordomo broker is made, said "ZMQError: Invalid argument (addr=DIR)"
    from zactors.patterns.zeps.broker import Broker
    with pytest.raises(ValueError, match=r"Broker\(journal_dir, endpoint\): the journal directory comes first, "
                                         r"not 'tcp://127.0.0.1:\*'"):
        Broker("tcp://127.0.0.1:*", str(tmp_path))
    assert os.listdir(tmp_path) == []
