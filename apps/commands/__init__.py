"""One module per command group.

Each module defines ``register(subparsers)`` to add its sub-commands, and may
define ``demo(out)`` for its part of ``zactors demo`` and ``ORDER`` (an int;
lower runs first) for where that part comes.  The CLI finds modules here by
itself: adding a pattern's commands touches no other file.
"""
import importlib
import pkgutil

__all__ = ["modules"]


def modules():
    """The command modules, in demo order."""
    found = [importlib.import_module("%s.%s" % (__name__, info.name))
             for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")]
    return sorted(found, key=lambda m: (getattr(m, "ORDER", 100), m.__name__))
