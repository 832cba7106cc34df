"""zactors: composable gevent actors for the classic ZeroMQ patterns.

The kernel is :mod:`zactors.actors`, the patterns are under
:mod:`zactors.patterns`, the command line and the node under
:mod:`zactors.apps`.  Importing ``zactors`` imports nothing else;
``zactors.__version__`` is read from the installed distribution on first use.
"""

__all__ = ["__version__"]


def __getattr__(name):
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version
        try:
            value = version("zactors")
        except PackageNotFoundError:  # a source tree that was never installed
            value = "0.0.0+unknown"
        globals()["__version__"] = value
        return value
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
