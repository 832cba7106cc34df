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
    """Register the ``zeps`` format with SparkSession ``spark``."""
    spark.dataSource.register(ZepsDataSource)


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
