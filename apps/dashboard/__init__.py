"""The zactors dashboard: a plain WSGI app showing live patterns, with a JSON API and ``/metrics``.

:class:`Dashboard` (``Dashboard(sources, token=None, ...)``) is the WSGI
application; :mod:`.sources` holds one :class:`~.sources.Source` per
pattern (Majordomo, ZEPS, Clone, Harmony).  ``zactors up`` serves it with
gevent's ``pywsgi``; mount it in your own server or Flask app the same way.
"""
from . import sources
from .app import Dashboard
from .guard import is_loopback_bind

__all__ = ["Dashboard", "sources", "is_loopback_bind"]
