"""Apache Spark over ZEPS streams: the ``zeps`` data source for PySpark (4.2+).

Install with ``pip install 'zactors[spark]'`` (it brings a Java runtime when
the machine has none), then::

    from zactors.patterns.zeps.spark import prepare, register
    prepare()                                         # Java and this interpreter for Spark's workers
    spark = SparkSession.builder.getOrCreate()
    register(spark)                                   # format "zeps" in this session
    spark.read.format("zeps").option("path", journal_dir).option("stream", "readings").load()

See :mod:`.source` for the columns and :mod:`.options` for every option.
Our errors happen in Spark's Python workers, and Spark raises them again in
the driver wrapped in a page of its own: :func:`explain` turns such an
exception back into its one-line message, and once :func:`register` has run,
an uncaught one prints as that one line (``sys.excepthook``).
"""
import os
import sys
import traceback

from .options import Options, ZepsSparkError
from .runtime import JavaNotFound, prepare
from .source import ZepsDataSource

__all__ = ["ZepsDataSource", "ZepsSparkError", "Options", "register", "explain", "prepare", "JavaNotFound"]


def register(spark):
    """Register the ``zeps`` format with SparkSession ``spark``.

    On a ``local`` master, first checks that Spark's Python workers run an interpreter where zactors is
    installed (a session built from a venv without :func:`prepare` runs the system's ``python3``, and
    every task would fail with ``No module named 'zactors'``): :class:`ZepsSparkError` says how to fix it.
    May block a moment (it asks that interpreter).  Also installs a ``sys.excepthook`` (once; other
    exceptions go on to the hook that was there) that prints an uncaught error of this source as one line,
    ``ZepsSparkError: MESSAGE (at FILE, line N)``, instead of Spark's page around it.
    """
    _check_workers(spark.sparkContext)
    spark.dataSource.register(ZepsDataSource)
    _one_line_errors()


def _one_line_errors():
    previous = sys.excepthook
    if getattr(previous, "zactors_spark", False):
        return

    def hook(kind, value, tb):
        line = str(value) if isinstance(value, ZepsSparkError) else _our_line(str(value))
        if line is None:
            previous(kind, value, tb)
            return
        # the user's own last frame: not Spark's, nor ours (PySpark appends the worker's frames)
        skip = tuple(os.sep + name + os.sep for name in ("pyspark", "py4j")) + (os.path.dirname(__file__),)
        caller = [frame for frame in traceback.extract_tb(tb) if not any(d in frame.filename for d in skip)]
        where = " (at %s, line %d)" % (caller[-1].filename, caller[-1].lineno) if caller else ""
        sys.stderr.write("ZepsSparkError: %s%s\n" % (line, where))

    hook.zactors_spark = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def _our_line(text):
    """The message of the last ``ZepsSparkError`` in Spark's text of an error, or None."""
    found = None
    for line in text.splitlines():
        at = line.find("ZepsSparkError: ")
        if at >= 0:
            found = line[at + len("ZepsSparkError: "):].strip()
    return found or None


def _check_workers(context):
    import shutil
    import subprocess

    python = context.pythonExec or "python3"
    if not str(context.master).startswith("local"):
        return                    # a cluster's workers have their own interpreters: their setup decides
    found = shutil.which(python) or python
    # the same path, not the same file: a venv's python is a symlink to the system's, whose site-packages
    # lack zactors (a fresh Debian 12: /usr/bin/python3 resolved "the same" and every Spark task failed)
    if os.path.abspath(found) == os.path.abspath(sys.executable):
        return
    try:
        ok = subprocess.run([found, "-c", "import zactors.patterns.zeps.spark"], capture_output=True,
                            timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    if not ok:
        raise ZepsSparkError("Spark's Python workers run %s, which cannot import zactors: call "
                             "zactors.patterns.zeps.spark.prepare() before building the SparkSession (or set "
                             "PYSPARK_PYTHON=%s)" % (python, sys.executable))


def explain(error):
    """The one-line reason inside a Spark exception raised by this data source
    (``ZepsSparkError: ...``, else any other Python error's last line), or None."""
    text = str(error)
    found = _our_line(text)
    if found:
        return found
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line and ("Error: " in line or "Exception: " in line) and not line.startswith("at "):
            return line
    return None
