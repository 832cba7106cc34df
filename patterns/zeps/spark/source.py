"""The ``zeps`` Spark data source: batch and streaming reads, batch and streaming writes.

::

    from zactors.patterns.zeps.spark import register
    register(spark)
    df = spark.read.format("zeps").option("path", "/var/lib/zeps").option("stream", "orders").load()
    live = spark.readStream.format("zeps").option("broker", "tcp://10.0.0.5:5570").option("stream", "orders").load()

Columns: ``stream`` (string), ``seq`` (long), ``timestamp`` (timestamp; null
when read from a broker), ``key`` (binary), then ``body`` (binary, or string
with ``bodyFormat=utf-8``) or, with ``bodyFormat=json``, the ``bodySchema``
fields.  Options: :mod:`.options`.  Writers take ``key`` and ``body``
columns (binary or string).

Streaming offsets are ``{"stream": next_seq}``: a query restarted from its
checkpoint resumes at exactly the next sequence.  Every object here is
created by Spark (driver or executor); none is shared between threads.
"""
import logging
import time

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from .options import Options, ZepsSparkError
from .reader import BASE_FIELDS, plan, read_partition, stream_ranges

__all__ = ["ZepsDataSource"]

log = logging.getLogger(__name__)

#: seconds the streaming reader reuses the streams' latest offsets: Spark asks for them between
#: micro-batches, tens of times a second when idle; each ask is a QUERY to the broker (or a look
#: at every journal), so at most this often
LATEST_OFFSETS_TTL = 0.5


def fair_share(wants, budget):
    """{name: rows} splitting ``budget`` rows over ``wants`` ({name: rows waiting}), max-min fair.

    Each gets an equal share, and what one does not need goes to the rest
    (water filling): no stream is starved by the one listed first.  When the
    budget is smaller than the number of streams waiting, the ones furthest
    behind get a row each.
    """
    grant = dict.fromkeys(wants, 0)
    left = budget
    waiting = sorted((name for name, want in wants.items() if want > 0), key=lambda name: (wants[name], name))
    while left > 0 and waiting:
        share = left // len(waiting)
        if share == 0:
            for name in sorted(waiting, key=lambda name: (grant[name] - wants[name], name))[:left]:
                grant[name] += 1
            break
        still = []
        for name in waiting:
            give = min(share, wants[name] - grant[name])
            grant[name] += give
            left -= give
            if grant[name] < wants[name]:
                still.append(name)
        waiting = still
    return grant


class _Part(InputPartition):
    """A planned partition, wrapped in Spark's InputPartition."""


class ZepsDataSource(DataSource):
    """Spark data source ``zeps`` (see the module docstring); register with :func:`register`."""

    @classmethod
    def name(cls):
        return "zeps"

    def __init__(self, options):
        super().__init__(options)
        self.opts = Options(options)

    def schema(self):
        base = ", ".join("`%s` %s" % field for field in BASE_FIELDS)
        if self.opts.body_format == "json":
            return "%s, %s" % (base, self.opts.body_schema)
        return "%s, `body` %s" % (base, "STRING" if self.opts.body_format == "utf-8" else "BINARY")

    def reader(self, schema):
        self.opts.require_source()
        return _BatchReader(self.opts, schema)

    def streamReader(self, schema):
        self.opts.require_source()
        return _StreamReader(self.opts, schema)

    def writer(self, schema, overwrite):
        from .writer import BatchWriter
        return BatchWriter(self.opts, schema, overwrite)

    def streamWriter(self, schema, overwrite):
        from .writer import StreamWriter
        return StreamWriter(self.opts, schema, overwrite)


class _Reading:
    """What the batch and stream readers share: the Arrow schema and the partition read."""

    def __init__(self, opts, schema):
        self.opts = opts
        self.schema = schema
        if len(schema.fields) < len(BASE_FIELDS) + 1 or \
                [f.name for f in schema.fields[:len(BASE_FIELDS)]] != [n for n, _ in BASE_FIELDS]:
            raise ZepsSparkError("a zeps schema starts with %s and the body: do not set .schema() by hand, "
                                 "use bodyFormat/bodySchema" % ", ".join(n for n, _ in BASE_FIELDS))
        if opts.body_format == "json":
            from pyspark.sql.types import StringType
            for field in schema.fields[len(BASE_FIELDS):]:
                if field.name == opts.corrupt_column and not isinstance(field.dataType, StringType):
                    raise ZepsSparkError("bodySchema field %s holds malformed bodies (columnNameOfCorruptRecord):"
                                         " make it STRING" % field.name)

    def read(self, partition):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        arrow = to_arrow_schema(self.schema, timezone="UTC")
        arrow = pa.schema([f.with_nullable(True) for f in arrow])
        body_fields = list(arrow)[len(BASE_FIELDS):]
        return read_partition(self.opts, partition.value, arrow, body_fields)


class _BatchReader(_Reading, DataSourceReader):

    def partitions(self):
        opts = self.opts
        ranges = []
        for stream, (first, last, directory) in stream_ranges(opts).items():
            lo = max(first, opts.from_seq)
            hi = last if opts.to_seq is None else min(last, opts.to_seq)
            if opts.start_time is not None and directory is not None:
                from zactors.actors.journal import JournalReader
                with JournalReader(directory) as reader:
                    lo = max(lo, reader.seq_at_time(opts.start_time))
            ranges.append((stream, directory, lo, hi))
        return [_Part(p) for p in plan(opts, ranges)] or [_Part(None)]

    def read(self, partition):
        if partition.value is None:
            return iter(())
        return super().read(partition)


class _StreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets: {stream: next sequence to read}."""

    def __init__(self, opts, schema):
        super().__init__(opts, schema)
        self._target = None             # Trigger.AvailableNow: the offsets not to go past
        self._cached = None             # (monotonic time, ranges): see LATEST_OFFSETS_TTL

    def _ranges(self):
        """{stream: (first, last, directory)}, asked for at most every LATEST_OFFSETS_TTL seconds."""
        now = time.monotonic()
        if self._cached is None or now - self._cached[0] >= LATEST_OFFSETS_TTL:
            self._cached = (now, stream_ranges(self.opts, must_exist=False))
        return self._cached[1]

    def initialOffset(self):
        how, value = self.opts.starting()
        offsets = {}
        for stream, (first, last, directory) in self._ranges().items():
            if how == "latest":
                offsets[stream] = last + 1
            elif how == "offsets":
                offsets[stream] = int(value.get(stream, first))
            elif how == "time":
                offsets[stream] = self._seq_at_time(stream, directory, value, last)
            else:
                offsets[stream] = first
        return offsets

    def _seq_at_time(self, stream, directory, when, last):
        if directory is None and last == 0:  # no message yet (perhaps no stream): start at the first
            return 1
        if directory is not None:
            from zactors.actors.journal import JournalReader
            with JournalReader(directory) as reader:
                return reader.seq_at_time(when)
        from zactors.patterns.zeps.client import Subscriber
        sub = Subscriber(self.opts.broker, stream, since=when, timeout=self.opts.timeout)
        try:
            message = sub.get(min(1.0, self.opts.timeout))
            return message[0] if message is not None else last + 1
        finally:
            sub.destroy()

    def prepareForTriggerAvailableNow(self):
        self._target = {stream: last + 1 for stream, (_f, last, _d) in self._ranges().items()}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.opts.max_records) if self.opts.max_records else ReadAllAvailable()

    def latestOffset(self, start, limit):
        ends = self._target or {s: last + 1 for s, (_f, last, _d) in self._ranges().items()}
        begins = {stream: int(start.get(stream, end)) if start else end for stream, end in ends.items()}
        out = {stream: max(begins[stream], end) for stream, end in ends.items()}
        if isinstance(limit, ReadMaxRows):  # the budget shared fairly by the streams with records waiting
            grant = fair_share({stream: out[stream] - begins[stream] for stream in ends}, limit.max_rows)
            out = {stream: begins[stream] + grant[stream] for stream in ends}
        for stream, seq in (start or {}).items():      # a stream that vanished keeps its offset
            out.setdefault(stream, seq)
        return out

    def reportLatestOffset(self):
        return {s: last + 1 for s, (_f, last, _d) in self._ranges().items()}

    def partitions(self, start, end):
        ranges = self._ranges()
        wanted = []
        for stream, stop in end.items():
            begin = int(start.get(stream, stop)) if start else int(stop)
            if stream not in ranges or begin >= stop:
                continue
            first, _last, directory = ranges[stream]
            if begin < first:
                if self.opts.fail_on_data_loss:
                    raise ZepsSparkError(
                        "stream %r: the query needs sequence %d but retention removed it (first available: %d);"
                        " set failOnDataLoss=false to carry on from %d" % (stream, begin, first, first))
                log.warning("stream %r: sequences %d..%d were removed by retention; carrying on from %d",
                            stream, begin, first - 1, first)
                begin = first
            wanted.append((stream, directory, begin, int(stop) - 1))
        return [_Part(p) for p in plan(self.opts, wanted)]

    def commit(self, end):
        pass
