"""The Majordomo Management Interface (MMI): services the broker answers itself.

Service names starting with ``mmi.`` never reach a worker.  ``mmi.service``
takes a service name as its body and answers ``200`` if that service has at
least one worker, ``404`` if not; any other ``mmi.*`` service answers ``501``.
"""

__all__ = ["PREFIX", "OK", "NOT_FOUND", "NOT_IMPLEMENTED", "is_mmi", "answer"]

PREFIX = b"mmi."
OK, NOT_FOUND, NOT_IMPLEMENTED = b"200", b"404", b"501"


def is_mmi(service):
    """True for a service name the broker answers itself."""
    return service.startswith(PREFIX)


def answer(service, body, has_workers):
    """The reply body for an MMI request; ``has_workers(name) -> bool``."""
    if service == b"mmi.service":
        return [OK if body and has_workers(body[0]) else NOT_FOUND]
    return [NOT_IMPLEMENTED]
