"""Hypothesis against a live Gather: hostile messages from several senders over tcp.

49/SCATTERGATHER carries single-part messages only.  Senders here mix
single-part messages (empty, binary, large) with multipart ones (which a
Gather must discard whole and count), from several PUSH peers at once; the
Gather must hand over exactly the single-part messages, each sender's in
order, and go on serving a valid Scatter afterwards.  On the native wire the
peers are plain pyzmq SCATTER sockets, which refuse multipart messages
themselves (libzmq: EINVAL).
"""
import pytest
import zmq
from hypothesis import HealthCheck, given, settings, strategies as st

from zactors.actors.sockets import context
from zactors.patterns.scatter import NoMessage

pytestmark = pytest.mark.timeout(120)

frame = st.one_of(st.binary(max_size=40), st.just(b""), st.just(b"\x00" * 300000))
message = st.lists(frame, min_size=1, max_size=4)


def test_hostile_messages_never_break_a_gather(make):
    gather = make.gather()
    endpoint = gather.bind("tcp://127.0.0.1:*")
    pushes = []
    for _ in range(3):
        push = context().socket(zmq.SCATTER if make.native else zmq.PUSH)
        push.linger = 0
        push.sndtimeo = 10000  # every blocking call has a deadline
        push.connect(endpoint)
        pushes.append(push)
    try:
        @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.lists(st.tuples(st.integers(0, len(pushes) - 1), message), min_size=1, max_size=10))
        def barrage(batch):
            discarded = gather.discarded
            expected = {i: [] for i in range(len(pushes))}
            for n, (index, frames) in enumerate(batch):
                if len(frames) == 1:
                    frames = [b"%d:%d:" % (index, n) + frames[0]]
                    expected[index].append(frames[0])
                elif make.native:
                    with pytest.raises(zmq.ZMQError):
                        pushes[index].send_multipart(frames)
                    continue
                pushes[index].send_multipart(frames)
            got = {i: [] for i in range(len(pushes))}
            for _ in range(sum(map(len, expected.values()))):
                data = gather.recv(timeout=10)
                got[int(data.split(b":", 1)[0])].append(data)
            assert got == expected  # every single-part message, each sender's in order
            multipart = 0 if make.native else sum(len(frames) > 1 for _, frames in batch)
            for push in pushes:  # a marker per sender: its multipart messages were seen before it
                push.send(b"marker")
            for _ in pushes:
                assert gather.recv(timeout=10) == b"marker"
            assert gather.discarded - discarded == multipart
            with pytest.raises(NoMessage):
                gather.recv(block=False)

        barrage()
        scatter = make.scatter()
        scatter.connect(endpoint)
        scatter.send(b"valid", timeout=10)
        assert gather.recv(timeout=10) == b"valid"
    finally:
        for push in pushes:
            push.close(0)
