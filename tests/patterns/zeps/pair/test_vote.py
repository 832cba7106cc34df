"""A passive that has not caught up never wins a vote (the lesson of the Clone review), driven step by step:
the test plays the active on the pair link with raw sockets."""
import msgpack
import pytest
import zmq

from zactors.actors import bstar
from zactors.actors.sockets import Socket, context
from zactors.patterns.zeps.broker import Broker
from zactors.patterns.zeps.client import Publisher, ZepsError

from .conftest import pair_info, records, wait_for

pytestmark = pytest.mark.timeout(60)


class FakeActive:
    """The active's end of the pair link: a ROUTER the backup connects to, a DEALER to the backup's."""

    def __init__(self, backup_link):
        self.router = context().socket(zmq.ROUTER, socket_class=Socket)
        self.router.linger = 0
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = "tcp://127.0.0.1:%d" % port
        self.dealer = context().socket(zmq.DEALER, socket_class=Socket)
        self.dealer.linger = 0
        self.dealer.connect(backup_link)
        self.follower = None

    def beat(self):
        self.dealer.send_multipart(bstar.encode_state(bstar.ACTIVE, 0) + [b"tcp://127.0.0.1:1"])

    def recv(self, kind, timeout=10):
        """The next message of ``kind`` from the backup (heartbeats and others skipped), beating meanwhile."""
        while True:
            self.beat()
            if self.router.wait(zmq.POLLIN, 0.1):
                frames = self.router.recv_multipart()
                if frames[1] == kind:
                    self.follower = frames[0]
                    return frames
            timeout -= 0.1
            assert timeout > 0, "no %r from the backup" % kind

    def send(self, *frames):
        self.router.send_multipart([self.follower, *frames])

    def close(self):
        self.router.close(0)
        self.dealer.close(0)


def test_a_passive_that_has_not_caught_up_refuses_the_vote_then_takes_over_once_it_has(tmp_path):
    backup = Broker(str(tmp_path / "b"), role="backup", heartbeat=0.25, name="backup")
    active = FakeActive(backup.pair_endpoint)
    try:
        backup.call("PEER", active.endpoint)
        _, _, token, _ = active.recv(b"FOLLOW")
        epochs = [[1, 1]]
        active.send(b"STREAMS", token, msgpack.packb({"s": [1, True, 3, epochs, 0]}),
                    msgpack.packb([]))          # 3 records to copy before the backup is ready
        rows = [[seq, 1000.0 + seq, b"k", b"m%d" % seq, b"p" * 8, seq] for seq in (1, 2)]
        active.send(b"REC", token, b"s", msgpack.packb([epochs, rows], use_bin_type=True))
        _, _, _, acks = active.recv(b"ACK")
        assert msgpack.unpackb(acks) == {"s": 2}
        assert pair_info(backup)["state"] == "passive" and not pair_info(backup)["ready"]
        # the active falls silent (no more heartbeats); a client votes: refused, it lacks record 3
        wait_for(lambda: pair_info(backup)["peer_state"] is None, 5, "the fake active to be silent")
        with pytest.raises(ZepsError) as caught:
            Publisher(backup.endpoint, "s", timeout=1)
        assert "PASSIVE" in str(caught.value) and "not caught up" in str(caught.value)
        assert pair_info(backup)["state"] == "passive"
        # the last record arrives: the streams are caught up, but not the consumer groups yet
        active.send(b"REC", token, b"s", msgpack.packb([epochs, [[3, 1003.0, b"k", b"m3", None, 0]]],
                                                        use_bin_type=True))
        while msgpack.unpackb(active.recv(b"ACK")[3]) != {"s": 3}:
            pass                                        # (an empty ACK: the passive's probe)
        assert not pair_info(backup)["ready"]
        # the groups' snapshot (none here) arrives: caught up, and the next vote makes it active
        active.send(b"GREC", token, msgpack.packb([1, [[None, ["B"]], [None, ["E"]]]]))
        while len(frames := active.recv(b"ACK")) < 5:
            pass
        assert msgpack.unpackb(frames[4]) == 2
        wait_for(lambda: pair_info(backup)["ready"], 5, "the backup ready")
        with Publisher(backup.endpoint, "s", idempotent=True, timeout=5) as pub:
            pub.publish("k", b"m4")
            pub.flush()
        assert pair_info(backup)["state"] == "active"
        got, history = records(str(tmp_path / "b"), b"s")
        assert [(r[0], r[1], r[3]) for r in got] [:3] == [(1, 1001.0, b"m1"), (2, 1002.0, b"m2"), (3, 1003.0, b"m3")]
        assert got[0][4:] == (b"p" * 8, 1) and got[3][3] == b"m4"
        assert history == [(1, 1), (2, 4)]                 # its takeover started a new epoch
    finally:
        active.close()
        backup.destroy()


@pytest.mark.parametrize("frames", [
    [b"FOLLOW", b"t" * 8, b"\xc1"],                                   # not msgpack
    [b"FOLLOW", b"t" * 8, msgpack.packb([1, 2])],                     # not a map
    [b"FOLLOW", b"t" * 8, msgpack.packb({"s": "x"})],                 # a position that is not one
    [b"ACK", b"t" * 8, msgpack.packb({"s": "many"})],
    [b"BSTAR", b"\x09", b"\x00" * 8],
    [b"WHAT"],
])
def test_garbage_on_the_pair_link_is_dropped_and_counted(tmp_path, frames):
    broker = Broker(str(tmp_path / "a"), role="primary", heartbeat=0.25, name="primary")
    sock = context().socket(zmq.DEALER, socket_class=Socket)
    sock.linger = 0
    sock.connect(broker.pair_endpoint)
    try:
        with Publisher(broker.endpoint, "s", timeout=5) as pub:   # a lone primary serves after 2 heartbeats
            pub.publish("k", b"v")
            pub.flush()
        sock.send_multipart(frames)
        counted = ("pair_malformed", "pair_sessions", "pair_stale")   # dropped, or answered as a protocol says
        wait_for(lambda: sum(broker.call("INFO")["counters"].get(c, 0) for c in counted) >= 1, 5,
                 "the garbage counted")
        with Publisher(broker.endpoint, "s", timeout=5) as pub:     # still serving
            pub.publish("k", b"w")
            pub.flush()
    finally:
        sock.close(0)
        broker.destroy()


def test_a_gap_in_the_records_makes_the_passive_follow_again(tmp_path):
    backup = Broker(str(tmp_path / "b"), role="backup", heartbeat=0.25, name="backup")
    active = FakeActive(backup.pair_endpoint)
    try:
        backup.call("PEER", active.endpoint)
        _, _, token, _ = active.recv(b"FOLLOW")
        epochs = [[1, 1]]
        active.send(b"STREAMS", token, msgpack.packb({"s": [1, True, 1, epochs, 0]}), msgpack.packb([]))
        active.send(b"REC", token, b"s", msgpack.packb([epochs, [[5, 1.0, b"k", b"v", None, 0]]]))  # not 1
        _, _, again, positions = active.recv(b"FOLLOW")      # at the next heartbeat, a new session
        assert again != token and msgpack.unpackb(positions, strict_map_key=False)["s"][1] == 0
        assert backup.call("INFO")["counters"]["pair_resyncs"] == 1
        active.send(b"REC", token, b"s", msgpack.packb([epochs, [[1, 1.0, b"k", b"stale", None, 0]]]))
        active.send(b"STREAMS", again, msgpack.packb({"s": [1, False, 1, epochs, 0]}), msgpack.packb([]))
        active.send(b"REC", again, b"s", msgpack.packb([epochs, [[1, 2.0, b"k", b"fresh", None, 0]]]))
        wait_for(lambda: backup.call("INFO")["streams"]["s"]["written_seq"] == 1, 5, "the fresh record")
        assert [r[3] for r in records(str(tmp_path / "b"), b"s")[0]] == [b"fresh"]   # the stale session's: dropped
    finally:
        active.close()
        backup.destroy()
