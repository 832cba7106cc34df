"""Bytes from the network, made safe to show: text when it is printable UTF-8, else hex; always bounded.

Nothing here builds HTML: the page puts these strings into the DOM as text
(``textContent``), so a key such as ``<img src=x onerror=alert(1)>`` stays
text.  What is shown is limited (``limit`` bytes), and says so.
"""
__all__ = ["show", "PREVIEW"]

#: bytes of a key or body shown at most
PREVIEW = 256


def show(data, limit=PREVIEW, size=None):
    """``{"text" | "hex": str, "size": n, "truncated": bool}`` for ``data`` (bytes or str).

    ``size``: the whole value's size, when ``data`` is only its first bytes.
    """
    if data is None:
        return None
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    size = len(data) if size is None else max(size, len(data))
    head = data[:limit]
    out = {"size": size, "truncated": size > limit}
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # a multi-byte character cut by the limit is still text
        if size > limit and exc.start >= len(head) - 3 and exc.reason == "unexpected end of data":
            text = head[:exc.start].decode("utf-8")
        else:
            text = None
    if text is not None and all(c.isprintable() or c in "\t\n\r" for c in text):
        out["text"] = text
    else:
        out["hex"] = head.hex()
    return out
