"""18/MDP v0.2 codec: every MDP/Client and MDP/Worker command, as frames.

The spec's frame tables (``MDPC02``/``MDPW02`` header first, then a one-byte
command) are the default framing.  :data:`MAJORTOMO` is the framing of the
majortomo 0.2.0 package, offered for interoperability only: an empty frame
starts every message, client commands reuse the worker numbering (REQUEST
0x02, PARTIAL 0x03, FINAL 0x04) and replies to clients carry no service frame.

Two zactors extensions, invisible to a spec-only peer (they are ordinary
body frames or absent):

- **Error replies.** A FINAL whose body is exactly three frames, the first
  :data:`ERROR` (``\\x00MDP-ERROR``, which no text reply starts with), then
  the error's kind and its message (UTF-8, at most :data:`ERROR_TEXT_MAX`
  bytes each), says the request failed: the handler raised, or the worker
  holding it was lost.  zactors clients raise it as ``ServiceError``; other
  clients see a three-frame reply.  Build with :func:`error_body`, read with
  :func:`parse_error`.
- **Idempotent workers.** READY may carry a fourth frame, :data:`IDEMPOTENT`:
  the worker's promise that its service may run a request twice, so the
  broker may give a request whose worker was lost to another worker.
  Without it the broker answers such a request with an error reply instead.

Decoders return a :class:`Message` and raise :class:`ProtocolError` (and
nothing else) for any other input.  Encoders return lists of frames without
the ROUTER identity.  Pure functions: safe everywhere, no sockets.
"""
import re
from collections import namedtuple

__all__ = [
    "CLIENT", "WORKER", "REQUEST", "PARTIAL", "FINAL", "READY", "HEARTBEAT", "DISCONNECT",
    "Message", "ProtocolError", "Framing", "SPEC", "MAJORTOMO", "framing", "MAX_MESSAGE", "frame_limit",
    "ERROR", "ERROR_TEXT_MAX", "IDEMPOTENT", "error_body", "parse_error",
]

CLIENT = b"MDPC02"
WORKER = b"MDPW02"

#: default largest body frame a peer may send (bytes): ``max_message`` of the broker, client and worker
MAX_MESSAGE = 16 << 20


def frame_limit(max_message):
    """The ``ZMQ_MAXMSGSIZE`` for an MDP socket: the body limit, or room for the longest header frame."""
    return max(max_message, 1024)


# Command names used across the package (wire bytes depend on the framing).
READY, REQUEST, PARTIAL, FINAL, HEARTBEAT, DISCONNECT = "READY", "REQUEST", "PARTIAL", "FINAL", "HEARTBEAT", "DISCONNECT"

Message = namedtuple("Message", "header command service address body")
Message.__doc__ = """One decoded command.

``header`` is CLIENT or WORKER; ``command`` a command name; ``service`` the
service name (bytes, or None); ``address`` the client address of worker
REQUEST/PARTIAL/FINAL (else None); ``body`` the list of body frames.
"""

_printable = re.compile(rb"[\x20-\x7e]+\Z").match
_message = tuple.__new__  # Message(...) without the namedtuple's Python-level __new__

#: first body frame of an error reply (a zactors extension: see the module docstring)
ERROR = b"\x00MDP-ERROR"
#: most bytes of an error reply's kind and of its message
ERROR_TEXT_MAX = 1024
#: READY's optional fourth frame: the worker's service may run a request twice
IDEMPOTENT = b"idempotent"


def _text(value):
    data = str(value).encode("utf-8", "replace")
    if len(data) > ERROR_TEXT_MAX:
        data = data[:ERROR_TEXT_MAX - 3].decode("utf-8", "ignore").encode() + b"..."
    return data


def error_body(kind, message):
    """The body of an error reply: :data:`ERROR`, ``kind`` and ``message`` (str, cut to ERROR_TEXT_MAX)."""
    return [ERROR, _text(kind), _text(message)]


def parse_error(body):
    """``(kind, message)`` of an error reply's body, as str; None for any other body."""
    if len(body) != 3 or body[0] != ERROR:
        return None
    return (bytes(body[1][:ERROR_TEXT_MAX]).decode("utf-8", "replace"),
            bytes(body[2][:ERROR_TEXT_MAX]).decode("utf-8", "replace"))


class ProtocolError(ValueError):
    """A message that is not a valid MDP command for its receiver."""


def _service(frame):
    if type(frame) is not bytes or not _printable(frame):
        raise ProtocolError("service name must be a non-empty printable string, got %r" % (frame[:40],))
    return frame


class Framing:
    """Encoders and decoders for one framing of MDP/0.2.

    ``prefix`` is the list of frames every message starts with; the command
    bytes map wire values to command names per header; ``reply_service`` says
    whether client PARTIAL/FINAL carry the service frame.
    """

    def __init__(self, name, prefix, client_codes, worker_codes, reply_service):
        self.name = name
        self._prefix = list(prefix)
        self._skip = len(prefix)
        self._cenc = dict(client_codes)
        self._cdec = {v: k for k, v in client_codes.items()}
        self._wenc = dict(worker_codes)
        self._wdec = {v: k for k, v in worker_codes.items()}
        self._reply_service = reply_service
        p, c, w = self._prefix, self._cenc, self._wenc
        # Constant messages and heads, built once.
        self.heartbeat = p + [WORKER, w[HEARTBEAT]]
        self.disconnect = p + [WORKER, w[DISCONNECT]]
        self._c_request = p + [CLIENT, c[REQUEST]]
        self._c_partial = p + [CLIENT, c[PARTIAL]]
        self._c_final = p + [CLIENT, c[FINAL]]
        self._w_ready = p + [WORKER, w[READY]]
        self._w_request = p + [WORKER, w[REQUEST]]
        self._w_partial = p + [WORKER, w[PARTIAL]]
        self._w_final = p + [WORKER, w[FINAL]]

    def __repr__(self):
        return "<Framing %s>" % self.name

    # -- encoders -----------------------------------------------------------
    def client_request(self, service, body):
        """Client -> broker REQUEST."""
        return self._c_request + [service, *body]

    def client_reply(self, final, service, body):
        """Broker -> client PARTIAL (``final`` false) or FINAL."""
        head = self._c_final if final else self._c_partial
        if self._reply_service:
            return head + [service, *body]
        return head + list(body)

    def ready(self, service, idempotent=False):
        """Worker -> broker READY (with the :data:`IDEMPOTENT` frame when ``idempotent``)."""
        return self._w_ready + ([service, IDEMPOTENT] if idempotent else [service])

    def worker_request(self, address, body):
        """Broker -> worker REQUEST."""
        return self._w_request + [address, b"", *body]

    def worker_reply(self, final, address, body):
        """Worker -> broker PARTIAL (``final`` false) or FINAL."""
        return (self._w_final if final else self._w_partial) + [address, b"", *body]

    # -- decoders -----------------------------------------------------------
    def _strip(self, frames):
        skip = self._skip
        if skip:
            if len(frames) < skip + 2 or frames[0] != b"":
                raise ProtocolError("expected an empty first frame")
            return frames[skip:]
        if len(frames) < 2:
            raise ProtocolError("a command needs at least 2 frames, got %d" % len(frames))
        return frames

    def decode_for_broker(self, frames):
        """What a client or worker sent to the broker (identity removed)."""
        frames = self._strip(frames)
        header = frames[0]
        if header == CLIENT:
            command = self._cdec.get(frames[1])
            if command != REQUEST:
                raise ProtocolError("brokers accept only REQUEST from clients, got %r" % (frames[1][:8],))
            if len(frames) < 4:
                raise ProtocolError("REQUEST needs a service and a body")
            return Message(CLIENT, REQUEST, _service(frames[2]), None, frames[3:])
        if header == WORKER:
            command = self._wdec.get(frames[1])
            n = len(frames)
            if command == PARTIAL or command == FINAL:
                if n < 5 or not frames[2] or frames[3] != b"":
                    raise ProtocolError("%s needs a client address, an empty frame and a body" % command)
                return Message(WORKER, command, None, frames[2], frames[4:])
            if command == HEARTBEAT or command == DISCONNECT:
                if n != 2:
                    raise ProtocolError("%s has exactly 2 frames, got %d" % (command, n))
                return Message(WORKER, command, None, None, ())
            if command == READY:
                if n != 3 and (n != 4 or frames[3] != IDEMPOTENT):
                    raise ProtocolError("READY has 3 frames (4 with %r), got %d" % (IDEMPOTENT, n))
                return Message(WORKER, READY, _service(frames[2]), None, tuple(frames[3:]))
            raise ProtocolError("brokers do not accept worker command %r" % (frames[1][:8],))
        raise ProtocolError("unknown protocol header %r" % (header[:8],))

    def decode_for_client(self, frames):
        """A PARTIAL or FINAL the broker sent to a client."""
        if self._skip or len(frames) < 2:  # (a client's every reply comes here: no call for the spec's)
            frames = self._strip(frames)
        if frames[0] != CLIENT:
            raise ProtocolError("expected header MDPC02, got %r" % (frames[0][:8],))
        command = self._cdec.get(frames[1])
        if command != PARTIAL and command != FINAL:
            raise ProtocolError("clients accept only PARTIAL and FINAL, got %r" % (frames[1][:8],))
        if self._reply_service:
            if len(frames) < 4:
                raise ProtocolError("%s needs a service and a body" % command)
            return _message(Message, (CLIENT, command, _service(frames[2]), None, frames[3:]))
        if len(frames) < 3:
            raise ProtocolError("%s needs a body" % command)
        return _message(Message, (CLIENT, command, None, None, frames[2:]))

    def decode_for_worker(self, frames):
        """A REQUEST, HEARTBEAT or DISCONNECT the broker sent to a worker."""
        if self._skip or len(frames) < 2:  # (a worker's every request comes here: no call for the spec's)
            frames = self._strip(frames)
        if frames[0] != WORKER:
            raise ProtocolError("expected header MDPW02, got %r" % (frames[0][:8],))
        command = self._wdec.get(frames[1])
        n = len(frames)
        if command == REQUEST:
            if n < 5 or not frames[2] or frames[3] != b"":
                raise ProtocolError("REQUEST needs a client address, an empty frame and a body")
            return _message(Message, (WORKER, REQUEST, None, frames[2], frames[4:]))
        if command == HEARTBEAT or command == DISCONNECT:
            if n != 2:
                raise ProtocolError("%s has exactly 2 frames, got %d" % (command, n))
            return Message(WORKER, command, None, None, ())
        raise ProtocolError("workers accept only REQUEST, HEARTBEAT and DISCONNECT, got %r" % (frames[1][:8],))


_WORKER_CODES = {READY: b"\x01", REQUEST: b"\x02", PARTIAL: b"\x03", FINAL: b"\x04",
                 HEARTBEAT: b"\x05", DISCONNECT: b"\x06"}

#: 18/MDP as written (the default)
SPEC = Framing("spec", (), {REQUEST: b"\x01", PARTIAL: b"\x02", FINAL: b"\x03"}, _WORKER_CODES, True)
#: the framing of majortomo 0.2.0, for interoperability
MAJORTOMO = Framing("majortomo", (b"",), {REQUEST: b"\x02", PARTIAL: b"\x03", FINAL: b"\x04"}, _WORKER_CODES, False)

_FRAMINGS = {"spec": SPEC, "majortomo": MAJORTOMO}


def framing(name):
    """The :class:`Framing` called ``name`` ("spec" or "majortomo"), or a Framing itself."""
    if isinstance(name, Framing):
        return name
    try:
        return _FRAMINGS[name]
    except KeyError:
        raise ValueError("framing must be 'spec' or 'majortomo', got %r" % (name,)) from None
