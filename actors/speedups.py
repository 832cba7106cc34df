"""The kernel's per-message socket calls: in C when built, else in pure Python.

pyzmq's Python-facing layers cost more per message than libzmq does: a
``copy=False`` receive (the only cheap way to read a frame's "more" flag)
about 1 us, a ``getsockopt(EVENTS)`` about 0.7 us, a plain receive 0.25 us.
The C extension ``zactors.actors._speedups`` (built from ``actors/_speedups.c`` at
install when a compiler is there; optional) makes the same libzmq calls
directly, on the libzmq that pyzmq loaded.  The pure-Python versions here
behave identically and are used when it was not built, or when the
environment sets ``ZACTORS_PURE_PYTHON=1``.

All calls are non-blocking and take ``(sock, handle)``: a pyzmq socket and
its :func:`handle` (``sock.underlying``, read once: it is a property).

* ``recv_message(sock, handle)``: one whole message as a list of bytes, or
  None when none is waiting.
* ``recv_singles(sock, handle, limit)``: ``(messages, discarded)``, up to
  ``limit`` single-part messages; multipart ones are dropped whole and
  counted.  Messages taken before an error are returned, the error comes
  again on the next call.
* ``send_message(sock, handle, frames)``: queue all frames as one message;
  ``zmq.Again`` (nothing queued) when it cannot be taken now.  Every
  frame's buffer is taken first: a frame that is not bytes-like
  (``TypeError``) or not contiguous (``BufferError``) fails the whole
  message with nothing sent.
* ``events(sock, handle)``: ``ZMQ_EVENTS``.

Closed sockets raise ``zmq.ZMQError(ENOTSOCK)``, like pyzmq.
"""
import errno
import logging
import os
import sys

import zmq

__all__ = ["SPEEDUPS", "handle", "buffers", "recv_message", "recv_singles", "send_message", "events"]

log = logging.getLogger(__name__)

# Plain ints: the IntFlag arithmetic of pyzmq's enums costs microseconds per call.
NOBLOCK = 1
SNDMORE = 2
_EVENTS = 15
_RCVMORE = 13
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


def py_recv_message(sock, handle):
    _check(sock)
    try:
        frame = _recv(sock, NOBLOCK, False)
    except zmq.Again:
        return None
    frames = [frame.bytes]
    while frame.more:
        frame = _recv(sock, NOBLOCK, False)
        frames.append(frame.bytes)
    return frames


def py_recv_singles(sock, handle, limit):
    _check(sock)
    messages, discarded = [], 0
    append = messages.append
    try:
        while len(messages) < limit:
            frame = _recv(sock, NOBLOCK, False)
            if frame.more:
                while _get(sock, _RCVMORE):
                    _recv(sock, NOBLOCK)
                discarded += 1
                continue
            append(frame.bytes)
    except zmq.Again:
        pass
    except zmq.ZMQError:
        if not messages and not discarded:
            raise
    return messages, discarded


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
    views = buffers(frames)
    last = len(views) - 1
    for i, view in enumerate(views):
        _send(sock, view, NOBLOCK if i == last else NOBLOCK | SNDMORE)


def py_events(sock, handle):
    _check(sock)
    return _get(sock, _EVENTS)


def _load():
    if os.environ.get("ZACTORS_PURE_PYTHON"):
        return None
    try:
        from . import _speedups as c
        # pyzmq's extension module: its libzmq is the one whose sockets we get
        c.bind(sys.modules[zmq.backend.Socket.__module__].__file__, _error)
    except (ImportError, AttributeError, TypeError) as exc:
        log.debug("zactors: pure-Python socket calls (%s)", exc)
        return None
    return c


_c = _load()
#: True when the C calls are in use
SPEEDUPS = _c is not None
if SPEEDUPS:
    recv_message, recv_singles, send_message, events = (
        _c.recv_message, _c.recv_singles, _c.send_message, _c.events)
else:
    recv_message, recv_singles, send_message, events = (
        py_recv_message, py_recv_singles, py_send_message, py_events)
