"""Typed input: lines from a terminal (or a pipe) that park only the reading greenlet.

A plain ``sys.stdin`` read blocks the whole gevent hub until the user
types, so actors stop answering their peers' heartbeats meanwhile.
:func:`lines` waits on the descriptor instead.  Not for regular files
(they are always readable: read them directly).  Not thread-safe.
"""
import os

from gevent.socket import wait_read

__all__ = ["lines"]


def lines(fd):
    """Lines read from ``fd`` (bytes, without the line end), until end of input."""
    pending = b""
    while True:
        wait_read(fd)
        data = os.read(fd, 65536)
        if not data:
            if pending:
                yield pending
            return
        pending += data
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.rstrip(b"\r")
