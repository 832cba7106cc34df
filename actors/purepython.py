"""``ZACTORS_PURE_PYTHON``: whether the C extensions are turned off.

One reading of the switch for every optional C extension (the socket calls,
the journal codec, the ZEPS DELIVER batches), and one way to load them.  Imports nothing but the
standard library, so the journal's reading side (Spark workers) can use it.
"""
import importlib
import logging
import os
from types import ModuleType

__all__ = ["pure_python_requested", "optional_extension"]

log = logging.getLogger(__name__)

#: values of ZACTORS_PURE_PYTHON (any case) that turn the C calls off, and those that leave them on
_PURE = frozenset(("1", "true", "yes", "on"))
_SPEEDY = frozenset(("", "0", "false", "no", "off"))


def pure_python_requested(value=None):
    """True when ``ZACTORS_PURE_PYTHON`` (or ``value``) asks for the pure-Python calls.

    ``1``/``true``/``yes``/``on`` mean pure Python; unset, empty,
    ``0``/``false``/``no``/``off`` mean the C calls.  Anything else is
    logged and leaves the C calls on.
    """
    if value is None:
        value = os.environ.get("ZACTORS_PURE_PYTHON", "")
    word = value.strip().lower()
    if word in _PURE:
        return True
    if word not in _SPEEDY:
        log.warning("zactors: ZACTORS_PURE_PYTHON=%r is not 1/true/yes or 0/false/no: the C calls stay on", value)
    return False


def optional_extension(name: str, instead: str) -> ModuleType | None:
    """The C extension module ``name`` (absolute), or None when the switch asks for pure
    Python or the module was not built (logged at debug level: ``instead`` says what runs)."""
    if pure_python_requested():
        return None
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        log.debug("zactors: %s (%s)", instead, exc)
        return None
