"""The kernel's per-message socket calls: in C when built, else in pure Python.

pyzmq's Python-facing layers cost more per message than libzmq does: a
``copy=False`` receive (the only cheap way to read a frame's "more" flag)
about 1 us, a ``getsockopt(EVENTS)`` about 0.7 us, a plain receive 0.25 us.
The C extension ``zactors.actors._speedups`` (built from ``actors/_speedups.c`` at
install when a compiler is there; optional) makes the same libzmq calls
directly, on the libzmq that pyzmq loaded.  The pure-Python versions here
behave identically and are used when it was not built, when it fails the
self-test it runs at load (a pyzmq or libzmq that changed under it: logged
as a warning), or when the environment sets ``ZACTORS_PURE_PYTHON`` to
``1``/``true``/``yes`` (``0`` or empty leave the C calls on).

The C calls hold the GIL for microseconds and never swallow a signal: an
``EINTR`` before anything is taken runs the Python handlers (which may
raise); inside a message they finish it first, and the handler runs as soon
as the call returns.

All calls are non-blocking and take ``(sock, handle)``: a pyzmq socket and
its :func:`handle` (``sock.underlying``, read once: it is a property).

* ``recv_message(sock, handle[, max_frames, max_bytes])``: one whole message
  as a list of bytes, or None when none is waiting.  With the limits, a
  message of more frames, or more bytes in all, is dropped unread instead
  (libzmq holds a whole message until its last frame came, but we never copy
  it): ``False`` when one is refused (count it), ``True`` when a call only
  dropped more of the rest of one (``SKIP_BUDGET`` frames a call at most:
  a million-frame message costs slices of the loop, never one long stall).
* ``recv_singles(sock, handle, limit)``: ``(messages, discarded)``, up to
  ``limit`` single-part messages; multipart ones are dropped whole and
  counted.  Messages taken before an error are returned, the error comes
  again on the next call.
* ``send_message(sock, handle, frames)``: queue all frames as one message;
  ``zmq.Again`` (nothing queued) when it cannot be taken now.  Every
  frame's buffer is taken first: a frame that is not bytes-like
  (``TypeError``) or not contiguous (``BufferError``) fails the whole
  message with nothing sent.
* ``send_locked(lock, sock, handle, frames, counts)``: ``send_message``
  holding ``lock`` (a ``_thread`` lock) if it is free now; True once queued
  (``counts[0]`` incremented under the lock), False with nothing queued when
  the lock is held elsewhere or the peer cannot take it now.  In C no other
  thread runs while it holds the lock, so threads sharing a socket this way
  never wait on each other (a Python ``with lock:`` may be preempted inside,
  and the others then queue up behind it, one thread switch per message).
* ``send_each(sock, handle, prefix, frames)``: queue ``[prefix, frame]`` as
  one message for each frame of the list ``frames`` (all bytes), until one
  cannot be queued now (``EAGAIN``, an unroutable ROUTER peer, any error);
  returns the count queued, the rest left to the caller.  One call for a
  batch to one peer (a ZEPS replay).
* ``events(sock, handle)``: ``ZMQ_EVENTS``.

Closed sockets raise ``zmq.ZMQError(ENOTSOCK)``, like pyzmq.
"""
import _thread
import errno
import logging
import sys

import zmq

from .purepython import optional_extension, pure_python_requested

__all__ = ["SPEEDUPS", "handle", "buffers", "send_frames", "recv_message", "recv_singles", "send_message", "send_locked",
           "send_each",
           "events",
           "pure_python_requested", "self_test"]

log = logging.getLogger(__name__)

# Plain ints: the IntFlag arithmetic of pyzmq's enums costs microseconds per call.
NOBLOCK = 1
SNDMORE = 2
POLLIN = 1
POLLOUT = 2
_EVENTS = 15
_RCVMORE = 13
#: frames of a refused message that one bounded ``recv_message`` drops at most
SKIP_BUDGET = 4096
#: a limit at or past this is none
UNBOUNDED = 1 << 62
_send = zmq.backend.Socket.send
_recv = zmq.backend.Socket.recv
_get = zmq.backend.Socket.get


def handle(sock):
    """What the calls below take beside ``sock``."""
    return sock.underlying


def _error(number):
    """The exception pyzmq raises for libzmq's ``errno``."""
    if number == errno.EAGAIN:
        return zmq.Again(number)
    if number == zmq.ETERM:
        return zmq.ContextTerminated(number)
    return zmq.ZMQError(number)


# -- pure Python ------------------------------------------------------------------
def _check(sock):
    if sock._closed:
        raise zmq.ZMQError(errno.ENOTSOCK)


# A Python signal handler that raises (KeyboardInterrupt) runs between two
# bytecodes, so it may strike between the frames of one message.  The pure
# calls then finish that message (read the rest and drop it, or send the
# rest) before the exception goes on, so the socket is normally left at a
# message boundary.  This narrows the window but cannot close it from Python
# (a SIGALRM storm still splits about one message in ten runs): only the C
# calls, which never run a handler inside a message, guarantee it.

def _skip_rest(sock):
    while _get(sock, _RCVMORE):
        _recv(sock, NOBLOCK)


def _skip_some(sock):
    """Drop up to SKIP_BUDGET frames of the message under way: True if some are left."""
    for _ in range(SKIP_BUDGET):
        if not _recv(sock, NOBLOCK, False).more:
            return False
    return True


def py_recv_message(sock, handle, max_frames=None, max_bytes=None):
    _check(sock)
    bounded = max_frames is not None and (max_frames < UNBOUNDED or max_bytes < UNBOUNDED)
    if bounded and _get(sock, _RCVMORE):  # the rest of a message refused by an earlier call
        _skip_some(sock)
        return True
    try:
        frame = _recv(sock, NOBLOCK, False)
        frames = [frame.bytes]
        if bounded:
            total = len(frames[0])
            while frame.more:
                if len(frames) >= max_frames or total > max_bytes:
                    del frames
                    _skip_some(sock)
                    return False
                frame = _recv(sock, NOBLOCK, False)
                frames.append(frame.bytes)
                total += len(frames[-1])
            if total > max_bytes:
                return False
        else:
            while frame.more:
                frame = _recv(sock, NOBLOCK, False)
                frames.append(frame.bytes)
    except zmq.Again:
        return None
    except zmq.ZMQError:
        raise
    except BaseException:  # a signal handler raised mid-message
        _skip_rest(sock)
        raise
    return frames


def py_recv_singles(sock, handle, limit):
    _check(sock)
    messages, discarded = [], 0
    append = messages.append
    try:
        while len(messages) < limit:
            frame = _recv(sock, NOBLOCK, False)
            if frame.more:
                _skip_rest(sock)
                discarded += 1
                continue
            append(frame.bytes)
    except zmq.Again:
        pass
    except zmq.ZMQError:
        if not messages and not discarded:
            raise
    except BaseException:
        _skip_rest(sock)
        raise
    return messages, discarded


def send_frames(sock, frames, copy=True):
    """Send ``frames`` (checked by :func:`buffers`) as one message, non-blocking.

    ``zmq.Again`` with nothing queued when the first frame is refused; the
    following ones are never refused (libzmq takes whole messages).
    """
    n = len(frames)
    sent = 0
    try:
        while sent < n:
            sent += 1  # counted before the call: a signal handler raises after it returns
            _send(sock, frames[sent - 1], NOBLOCK if sent == n else NOBLOCK | SNDMORE, copy)
    except zmq.ZMQError:
        raise
    except BaseException:  # a signal handler raised mid-message: finish it first
        while sent < n:
            sent += 1
            _send(sock, frames[sent - 1], NOBLOCK if sent == n else NOBLOCK | SNDMORE, copy)
        raise


def buffers(frames):
    """Every frame's buffer, taken before anything is sent (bytes stay as they are).

    ``TypeError`` for a frame that is not bytes-like, ``BufferError`` for one
    that is not contiguous: a message fails whole, never after its first
    frames went out.  Hold the result until the last frame is sent.
    """
    views = []
    append = views.append
    for frame in frames:
        if type(frame) is bytes:
            append(frame)
            continue
        try:
            view = memoryview(frame)
        except TypeError:
            raise TypeError("a frame must be bytes-like, not %s" % type(frame).__name__) from None
        if not view.c_contiguous:
            raise BufferError("a frame must be a contiguous buffer")
        append(view)
    return views


def py_send_message(sock, handle, frames):
    _check(sock)
    send_frames(sock, buffers(frames))


def py_send_locked(lock, sock, handle, frames, counts):
    if not lock.acquire(False):
        return False
    try:
        py_send_message(sock, handle, frames)
        counts[0] += 1
        return True
    except zmq.Again:
        return False
    finally:
        lock.release()


def py_send_each(sock, handle, prefix, frames):
    _check(sock)
    if type(prefix) is not bytes or type(frames) is not list or any(type(f) is not bytes for f in frames):
        raise TypeError("send_each takes a bytes prefix and a list of bytes")
    sent = 0
    for frame in frames:
        try:
            send_frames(sock, [prefix, frame])
        except zmq.ZMQError:
            return sent
        sent += 1
    return sent


def py_events(sock, handle):
    _check(sock)
    while True:
        try:
            return _get(sock, _EVENTS)
        except zmq.InterruptedSystemCall:   # a signal (its handler ran): ask again, as the C call does
            continue


def self_test(calls):
    """Check ``calls`` (the C module) against pyzmq on a private context; raise if they disagree.

    A few hundred microseconds at load: it catches a pyzmq or libzmq that
    changed under the extension (symbols, message layout, flags, errors).
    """
    major, minor, _ = zmq.zmq_version_info()
    if (major, minor) < (4, 1):
        raise RuntimeError("libzmq %s is older than the 4.1 ABI the C calls use" % zmq.zmq_version())
    ctx = zmq.Context(io_threads=0)  # inproc only: no I/O thread to start
    sockets = []
    try:
        a, b, gone = (ctx.socket(zmq.PAIR) for _ in range(3))
        sockets += (a, b, gone)
        for sock in sockets:
            sock.linger = 0
        a.bind("inproc://zactors-self-test")
        b.connect("inproc://zactors-self-test")
        ha, hb = handle(a), handle(b)

        def expect(what, got, wanted):
            if got != wanted:
                raise RuntimeError("%s: got %r, wanted %r" % (what, got, wanted))

        expect("EVENTS of an idle socket", calls.events(b, hb), POLLOUT)
        expect("recv_message with nothing waiting", calls.recv_message(b, hb), None)
        big = b"\xa5" * 70000  # past libzmq's inline "very small message" size
        calls.send_message(a, ha, [b"zactors", b"", big])
        expect("EVENTS with a message waiting", calls.events(b, hb), POLLIN | POLLOUT)
        expect("what pyzmq read of a C send", b.recv_multipart(NOBLOCK), [b"zactors", b"", big])
        a.send_multipart([b"pyzmq", big], NOBLOCK)
        expect("what C read of a pyzmq send", calls.recv_message(b, hb), [b"pyzmq", big])
        a.send_multipart([b"x"] * (SKIP_BUDGET + 3), NOBLOCK)
        a.send_multipart([b"within", b"limits"], NOBLOCK)
        expect("a message over max_frames", calls.recv_message(b, hb, 2, 100), False)
        expect("the rest of it", calls.recv_message(b, hb, 2, 100), True)
        expect("the next message", calls.recv_message(b, hb, 2, 100), [b"within", b"limits"])
        a.send_multipart([b"k", big], NOBLOCK)
        expect("a message over max_bytes", calls.recv_message(b, hb, 2, 100), False)
        a.send_multipart([b"single"], NOBLOCK)
        a.send_multipart([b"multi", b"part"], NOBLOCK)
        expect("recv_singles", calls.recv_singles(b, hb, 10), ([b"single"], 1))
        lock, counts = _thread.allocate_lock(), [0]  # any lock: only its methods are called
        expect("send_locked", calls.send_locked(lock, a, ha, [b"locked"], counts), True)
        expect("what pyzmq read of send_locked", (b.recv_multipart(NOBLOCK), counts), ([b"locked"], [1]))
        with lock:
            expect("send_locked with the lock held", calls.send_locked(lock, a, ha, [b"no"], counts), False)
        expect("the lock after send_locked", (lock.locked(), counts, calls.events(b, hb)), (False, [1], POLLOUT))
        expect("send_each", calls.send_each(a, ha, b"id", [b"one", b"two"]), 2)
        expect("what pyzmq read of send_each", [b.recv_multipart(NOBLOCK) for _ in range(2)],
               [[b"id", b"one"], [b"id", b"two"]])
        hg = handle(gone)
        gone.close()
        try:
            calls.events(gone, hg)
        except zmq.ZMQError as exc:
            expect("the errno of a closed socket", exc.errno, errno.ENOTSOCK)
        else:
            raise RuntimeError("a closed socket raised nothing")
    finally:
        for sock in sockets:
            sock.close(0)
        ctx.term()


def _load():
    c = optional_extension(__package__ + "._speedups", "pure-Python socket calls")
    if c is None:
        return None
    try:
        # pyzmq's extension module: its libzmq is the one whose sockets we get
        c.bind(sys.modules[zmq.backend.Socket.__module__].__file__, _error)
    except (ImportError, AttributeError, TypeError) as exc:
        log.debug("zactors: pure-Python socket calls (%s)", exc)
        return None
    try:
        self_test(c)
    except Exception as exc:
        log.warning("zactors: the C socket calls failed their self-test with pyzmq %s, libzmq %s (%s); "
                    "using the pure-Python ones (rebuild zactors against this pyzmq to get them back)",
                    zmq.__version__, zmq.zmq_version(), exc)
        return None
    return c


_c = _load()
#: True when the C calls are in use
SPEEDUPS = _c is not None
if SPEEDUPS:
    recv_message, recv_singles, send_message, send_locked, send_each, events = (
        _c.recv_message, _c.recv_singles, _c.send_message, _c.send_locked, _c.send_each, _c.events)
else:
    recv_message, recv_singles, send_message, send_locked, send_each, events = (
        py_recv_message, py_recv_singles, py_send_message, py_send_locked, py_send_each, py_events)
