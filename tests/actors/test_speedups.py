"""actors.speedups: the C calls and their pure-Python twins behave the same."""
import errno
import itertools
import os
import shutil
import threading
import time

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zactors.actors import speedups
from zactors.actors.sockets import context

IMPLEMENTATIONS = {
    "python": (speedups.py_recv_message, speedups.py_recv_singles, speedups.py_send_message,
               speedups.py_events),
}
if speedups.SPEEDUPS:
    IMPLEMENTATIONS["c"] = (speedups._c.recv_message, speedups._c.recv_singles, speedups._c.send_message,
                            speedups._c.events)


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def impl(request):
    return IMPLEMENTATIONS[request.param]


# unique: a closed socket's inproc name is released later, by libzmq's reaper
_names = itertools.count()


@pytest.fixture
def pair():
    """A connected PUSH -> PULL pair over inproc, with room for many messages."""
    ctx = context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.rcvhwm = push.sndhwm = 0
    endpoint = "inproc://speedups-%d" % next(_names)
    pull.bind(endpoint)
    push.connect(endpoint)
    yield push, pull
    push.close(0)
    pull.close(0)


def _send_all(push, messages):
    for frames in messages:
        push.send_multipart(frames)


def test_the_c_calls_are_built_where_a_compiler_is():
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the pure-Python calls are in use")
    if os.environ.get("ZACTORS_PURE_PYTHON"):
        pytest.skip("ZACTORS_PURE_PYTHON is set")
    assert speedups.SPEEDUPS, "the zactors.actors._speedups extension was not built (see pip's output)"


def test_recv_message_returns_whole_messages_then_none(impl, pair):
    recv_message = impl[0]
    push, pull = pair
    _send_all(push, [[b"a"], [b"b", b"", b"c" * 100000]])
    handle = speedups.handle(pull)
    assert recv_message(pull, handle) == [b"a"]
    assert recv_message(pull, handle) == [b"b", b"", b"c" * 100000]
    assert recv_message(pull, handle) is None


def test_recv_singles_takes_up_to_limit_and_discards_multipart_whole(impl, pair):
    recv_singles = impl[1]
    push, pull = pair
    _send_all(push, [[b"1"], [b"x", b"y", b"z"], [b"2"], [b"3"], [b"p", b"q"], [b"4"]])
    handle = speedups.handle(pull)
    assert recv_singles(pull, handle, 2) == ([b"1", b"2"], 1)
    assert recv_singles(pull, handle, 100) == ([b"3", b"4"], 1)
    assert recv_singles(pull, handle, 100) == ([], 0)


def test_send_message_sends_bytes_like_frames(impl, pair):
    send_message = impl[2]
    push, pull = pair
    send_message(push, speedups.handle(push), [b"a", bytearray(b"b"), memoryview(b"cd")[1:], zmq.Frame(b"e")])
    assert pull.recv_multipart() == [b"a", b"b", b"d", b"e"]
    with pytest.raises(TypeError):
        send_message(push, speedups.handle(push), [b"first", "not bytes"])
    send_message(push, speedups.handle(push), [b"next"])  # no half message was left behind
    assert pull.recv_multipart() == [b"next"]


def test_send_message_without_room_raises_again_and_queues_nothing(impl):
    send_message = impl[2]
    ctx = context()
    push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)  # no peer yet: no room at all
    try:
        with pytest.raises(zmq.Again):
            send_message(push, speedups.handle(push), [b"refused", b"tail"])
        endpoint = "inproc://speedups-%d" % next(_names)
        pull.bind(endpoint)
        push.connect(endpoint)
        send_message(push, speedups.handle(push), [b"next"])
        assert pull.recv_multipart() == [b"next"]
    finally:
        push.close(0)
        pull.close(0)


def test_events_reports_readiness(impl, pair):
    events = impl[3]
    push, pull = pair
    assert events(pull, speedups.handle(pull)) & zmq.POLLIN == 0
    push.send(b"x")
    assert events(pull, speedups.handle(pull)) & zmq.POLLIN
    assert events(push, speedups.handle(push)) & zmq.POLLOUT


def test_a_closed_socket_raises_enotsock_for_every_call(impl):
    recv_message, recv_singles, send_message, events = impl
    sock = context().socket(zmq.PULL)
    handle = speedups.handle(sock)
    sock.close()
    for call in (lambda: recv_message(sock, handle), lambda: recv_singles(sock, handle, 8),
                 lambda: send_message(sock, handle, [b"x"]), lambda: events(sock, handle)):
        with pytest.raises(zmq.ZMQError) as info:
            call()
        assert info.value.errno == errno.ENOTSOCK


def test_context_termination_raises_context_terminated(impl):
    recv_message = impl[0]
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    handle = speedups.handle(sock)
    terminator = threading.Thread(target=ctx.term)
    terminator.start()
    deadline = time.monotonic() + 5
    try:
        with pytest.raises(zmq.ContextTerminated):
            while time.monotonic() < deadline:  # None until term() is under way in the other thread
                recv_message(sock, handle)
    finally:
        sock.close(0)
        terminator.join(10)
    assert not terminator.is_alive()


_message = st.lists(st.binary(max_size=20), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(_message, max_size=40), limit=st.integers(1, 50))
def test_recv_singles_matches_the_model_for_any_traffic(pair, messages, limit):
    push, pull = pair
    handle = speedups.handle(pull)
    singles = [m[0] for m in messages if len(m) == 1]
    multipart = sum(1 for m in messages if len(m) > 1)
    for name, (_, recv_singles, _, _) in sorted(IMPLEMENTATIONS.items()):
        _send_all(push, messages)
        got, discarded = [], 0
        while True:
            batch, dropped = recv_singles(pull, handle, limit)
            assert len(batch) <= limit
            got += batch
            discarded += dropped
            if not batch and not dropped:
                break
        assert (got, discarded) == (singles, multipart), name


# -- whole messages only -------------------------------------------------------
def _assert_next_message_is_whole(push, pull, send_message):
    send_message(push, speedups.handle(push), [b"next", b"message"])
    assert pull.recv_multipart() == [b"next", b"message"], "half a message was left behind"


@pytest.mark.parametrize("position", [0, 1, 2])
def test_a_non_contiguous_frame_fails_the_message_with_nothing_sent(impl, pair, position):
    send_message = impl[2]
    push, pull = pair
    frames = [b"a", bytearray(b"b"), memoryview(b"c")]
    frames[position] = memoryview(b"abcdef")[::2]  # strided: not contiguous
    with pytest.raises(BufferError):
        send_message(push, speedups.handle(push), frames)
    _assert_next_message_is_whole(push, pull, send_message)


def test_a_bad_frame_deep_in_a_long_message_fails_it_whole(impl, pair):
    send_message = impl[2]
    push, pull = pair
    frames = [b"%d" % i for i in range(100)]  # longer than the C path's stack array
    frames[70] = memoryview(bytearray(b"xyzxyz"))[1::2]
    with pytest.raises(BufferError):
        send_message(push, speedups.handle(push), frames)
    frames[70] = "a str is not bytes-like"
    with pytest.raises(TypeError, match="bytes-like"):
        send_message(push, speedups.handle(push), frames)
    frames[70] = b"70"
    send_message(push, speedups.handle(push), frames)
    assert pull.recv_multipart() == [b"%d" % i for i in range(100)]
    _assert_next_message_is_whole(push, pull, send_message)


def test_a_long_message_of_buffers_is_sent_and_released(impl, pair):
    send_message = impl[2]
    push, pull = pair
    frames = [bytearray(b"%d" % i) for i in range(40)]
    send_message(push, speedups.handle(push), frames)
    assert pull.recv_multipart() == [bytes(f) for f in frames]
    for f in frames:
        f.extend(b"!")  # the buffers were released: a bytearray can grow again


@pytest.mark.parametrize("copy", [True, False])
def test_socket_send_multipart_fails_whole_in_both_copy_modes(copy):
    from zactors.actors.sockets import Socket
    ctx = context()
    push = ctx.socket(zmq.PUSH, socket_class=Socket)
    pull = ctx.socket(zmq.PULL, socket_class=Socket)
    endpoint = "inproc://speedups-%d" % next(_names)
    pull.bind(endpoint)
    push.connect(endpoint)
    try:
        with pytest.raises(BufferError):
            push.send_multipart([b"first", memoryview(b"abcdef")[::2], b"last"], copy=copy)
        push.send_multipart([b"whole", bytearray(b"one")], copy=copy)
        assert pull.recv_multipart(timeout=5) == [b"whole", b"one"]
    finally:
        push.close(0)
        pull.close(0)
