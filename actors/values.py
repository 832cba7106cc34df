"""One value model for every pattern: what a key, a body or a frame may be.

On the wire everything is bytes.  Every client API of zactors (Majordomo,
ZEPS, Clone, Harmony) takes, wherever it takes a key, a body or a frame:

- ``bytes``, ``bytearray``, ``memoryview`` or any other bytes-like object:
  sent as they are;
- ``str``: encoded as UTF-8;
- anything else (``5``, ``None``, a dict): refused with a :class:`TypeError`
  that names the argument, never turned into something surprising
  (``bytes(5)`` is five NUL bytes).

What comes back is always ``bytes``: decode it, or serialise structured
values yourself (JSON, msgpack) on both sides.  Pure functions, thread-safe.
"""
from __future__ import annotations

__all__ = ["to_bytes"]


def to_bytes(value: object, what: str = "value") -> bytes:
    """``value`` as bytes by the rule above; TypeError naming ``what`` for any other type."""
    if type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    try:
        return bytes(memoryview(value))  # type: ignore[arg-type]  # any bytes-like object; others raise
    except TypeError:
        raise TypeError("%s must be bytes or str, not %s" % (what, type(value).__name__)) from None
