"""Stream names to directory names and back: a journal directory per stream, never a path.

Every byte of a stream name outside ``[A-Za-z0-9_-]`` is escaped as
``%XX``, so names from the network such as ``../x`` or ``/etc`` never leave
the broker's journal directory, and the mapping is reversible.  Imports
neither gevent nor zmq (Spark's workers use it).
"""

__all__ = ["stream_directory", "stream_name"]

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def stream_directory(name: bytes) -> str:
    """The directory name of stream ``name`` (bytes): reversible, never a path."""
    return "".join(chr(c) if c in _SAFE else "%%%02X" % c for c in name)


def stream_name(directory: str) -> bytes | None:
    """The stream name (bytes) of a directory made by :func:`stream_directory`, or None."""
    out, i = bytearray(), 0
    while i < len(directory):
        c = directory[i]
        if c == "%":
            try:
                out.append(int(directory[i + 1:i + 3], 16))
            except ValueError:
                return None
            i += 3
        else:
            out.append(ord(c))
            i += 1
    return bytes(out) if stream_directory(bytes(out)) == directory else None
