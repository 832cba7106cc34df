"""Apache Spark over ZEPS streams: the ``zeps`` data source for PySpark (4.2+).

Install with ``pip install 'zactors[spark]'`` (it brings a Java runtime when
the machine has none), then::

    from zactors.patterns.zeps.spark import prepare, register
    prepare()                                         # Java and this interpreter for Spark's workers
    spark = SparkSession.builder.getOrCreate()
    register(spark)                                   # format "zeps" in this session
    spark.read.format("zeps").option("path", journal_dir).option("stream", "readings").load()

See :mod:`.source` for the columns and :mod:`.options` for every option;
:func:`explain` turns the exception Spark raises around one of ours back into
its one-line message.
"""
from .options import Options, ZepsSparkError
from .runtime import JavaNotFound, prepare
from .source import ZepsDataSource

__all__ = ["ZepsDataSource", "ZepsSparkError", "Options", "register", "explain", "prepare", "JavaNotFound"]


def register(spark):
    """Register the ``zeps`` format with SparkSession ``spark``.

    On a ``local`` master, first checks that Spark's Python workers run an interpreter where zactors is
    installed (a session built from a venv without :func:`prepare` runs the system's ``python3``, and
    every task would fail with ``No module named 'zactors'``): :class:`ZepsSparkError` says how to fix it.
    May block a moment (it asks that interpreter).
    """
    _check_workers(spark.sparkContext)
    spark.dataSource.register(ZepsDataSource)


def _check_workers(context):
    import os
    import shutil
    import subprocess
    import sys

    python = context.pythonExec or "python3"
    if not str(context.master).startswith("local"):
        return                    # a cluster's workers have their own interpreters: their setup decides
    found = shutil.which(python) or python
    if os.path.realpath(found) == os.path.realpath(sys.executable):
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
    found = None
    for line in text.splitlines():
        line = line.strip()
        at = line.find("ZepsSparkError: ")
        if at >= 0:
            found = line[at + len("ZepsSparkError: "):]
    if found:
        return found
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line and ("Error: " in line or "Exception: " in line) and not line.startswith("at "):
            return line
    return None
