"""Issue 20: a whole message has a bound, not only each frame: more frames or bytes are dropped unread and counted.

ZMQ_MAXMSGSIZE limits a frame; a peer could send a million empty frames and every ROUTER copied them all into
one Python list (pyzmq's recv_multipart does the same).  Real TCP sockets.
"""
import time

import pytest
import zmq

from zactors.actors import command
from zactors.actors.router import RouterActor
from zactors.actors.sockets import Socket, context
from zactors.actors.speedups import SKIP_BUDGET


pytestmark = pytest.mark.timeout(120)


class Sink(RouterActor):
    """Keeps the frame counts of what it is handed; a message is at most 4 frames (identity included)."""

    max_message = 1000
    max_frames = 4
    max_bytes = 2000

    def setup(self):
        super().setup()
        self.seen = []

    def on_message(self, identity, frames):
        self.seen.append(len(frames))

    @command(reply=True)
    def seen_(self):
        return [self.seen, dict(self.stats)]


def _dealer(endpoint):
    sock = context().socket(zmq.DEALER, socket_class=Socket)
    sock.linger = 0
    sock.sndhwm = 0
    sock.connect(endpoint)
    return sock


def test_a_million_frame_message_is_dropped_and_counted_and_the_rest_served():
    sink = Sink()
    dealer = _dealer(sink.endpoint)
    try:
        dealer.send_multipart([b"x", b"y"])
        frames = 2000000
        for _ in range(frames):
            dealer.send(b"", zmq.SNDMORE)
        dealer.send(b"end")
        dealer.send_multipart([b"b" * 900, b"b" * 900, b"b" * 900])   # 2,700 bytes in all: over max_bytes
        dealer.send_multipart([b"after"])
        worst = 0.0
        deadline = time.monotonic() + 60
        while True:                      # the loop answers while it drops the frames, SKIP_BUDGET a slice
            started = time.monotonic()
            seen, stats = sink.call("SEEN_")
            worst = max(worst, time.monotonic() - started)
            if seen == [2, 1] or time.monotonic() > deadline:
                break
        assert seen == [2, 1]            # (the handler gets the frames after the identity)
        assert stats["multipart_refused"] == 2
        assert worst < 1.0, worst
        assert frames > 100 * SKIP_BUDGET
    finally:
        dealer.close()
        sink.destroy()
