"""Errors of Scatter and Gather (pyzmq's ``zmq.Again`` where a retry may succeed)."""
import zmq

from .safesocket import Closed

__all__ = ["MultipartError", "NoPeerAvailable", "NoMessage", "Closed"]


class MultipartError(ValueError):
    """Scatter-gather carries single-part messages only (49/SCATTERGATHER)."""


class NoPeerAvailable(zmq.Again):
    """No gather peer could take the message (all queues full, or no peers) in time.

    The message was not accepted: nothing was queued or discarded.
    """

    def __init__(self, timeout, note=""):
        when = "now" if timeout == 0 else "within %gs" % timeout
        super().__init__()
        self.strerror = ("no gather peer available %s: every peer queue is full or no peer "
                         "is connected; message not sent%s" % (when, note))


class NoMessage(zmq.Again):
    """No message arrived in time."""

    def __init__(self, timeout, note=""):
        when = "now" if timeout == 0 else "within %gs" % timeout
        super().__init__()
        self.strerror = "no message %s%s" % (when, note)
