"""Planning and reading partitions of ZEPS streams, from journal files or a live broker.

Shared by the batch reader and the streaming reader: a partition is a plain,
picklable list of slices, each naming one stream and a sequence range (see
:func:`plan` for how a read is cut); :func:`read_partition` turns it into
Arrow record batches on an executor.

- Journal slices (``path=``) cover part of one segment file; each reader
  seeks to its first record through the segment's sparse index.
- Broker slices (``broker=``) cover a sequence range read by a
  :class:`~zactors.patterns.zeps.client.Subscriber` over the network (so an
  executor on another machine can read).  The wire carries no timestamps:
  the ``timestamp`` column is null there, and ``endTime`` cannot be applied.
"""
import logging
import math
import os

import pyarrow as pa

from zactors.actors.journal import JournalError, JournalReader, SequenceGone

from .options import ZepsSparkError
from .segments import SCHEMA, segment_batches, sparse_index

__all__ = ["JournalPart", "BrokerPart", "journal_streams", "journal_range", "broker_range",
           "plan", "read_partition", "BASE_FIELDS"]

log = logging.getLogger(__name__)

#: (name, Spark DDL type) of the columns before the body
BASE_FIELDS = (("stream", "STRING"), ("seq", "BIGINT"), ("timestamp", "TIMESTAMP"), ("key", "BINARY"))
BROKER_BATCH = 32768                # rows per Arrow batch read over the network
MIN_SPLIT = 4 << 20                 # bytes: no partition smaller, to spread a read over minPartitions


class JournalPart:
    """Records ``from_seq..to_seq`` of one segment file of one stream."""
    __slots__ = ("stream", "path", "base", "from_seq", "to_seq")

    def __init__(self, stream, path, base, from_seq, to_seq):
        self.stream, self.path, self.base, self.from_seq, self.to_seq = stream, path, base, from_seq, to_seq

    def __getstate__(self):
        return (self.stream, self.path, self.base, self.from_seq, self.to_seq)

    def __setstate__(self, state):
        self.stream, self.path, self.base, self.from_seq, self.to_seq = state


class BrokerPart:
    """Records ``from_seq..to_seq`` of one stream, read from a broker."""
    __slots__ = ("stream", "from_seq", "to_seq")

    def __init__(self, stream, from_seq, to_seq):
        self.stream, self.from_seq, self.to_seq = stream, from_seq, to_seq

    def __getstate__(self):
        return (self.stream, self.from_seq, self.to_seq)

    def __setstate__(self, state):
        self.stream, self.from_seq, self.to_seq = state


# -- the streams and their ranges --------------------------------------------------

def journal_streams(opts):
    """{stream name: directory} under ``opts.path`` (clear errors for what is missing)."""
    from zactors.patterns.zeps.names import stream_directory, stream_name

    path = opts.path
    if not os.path.isdir(path):
        raise ZepsSparkError("no journal directory %s" % path)
    if any(name.endswith(".seg") for name in os.listdir(path)):       # one stream's directory
        name = (stream_name(os.path.basename(os.path.normpath(path))) or b"").decode("utf-8", "replace")
        if opts.streams and opts.streams != [name]:
            raise ZepsSparkError("%s holds stream %r, not %s" % (path, name, ", ".join(opts.streams)))
        return {name: path}
    if opts.streams:
        found = {}
        for name in opts.streams:
            directory = os.path.join(path, stream_directory(name.encode()))
            if not os.path.isdir(directory):
                raise ZepsSparkError("no stream %r in journal directory %s" % (name, path))
            found[name] = directory
        return found
    found = {}
    for entry in sorted(os.listdir(path)):
        name = stream_name(entry)
        if name is not None and os.path.isdir(os.path.join(path, entry)):
            found[name.decode("utf-8", "replace")] = os.path.join(path, entry)
    if not found:
        raise ZepsSparkError("no streams in journal directory %s" % path)
    return found


def journal_range(directory):
    """(first_seq, last_seq) written to a stream's journal directory (last < first: empty)."""
    try:
        with JournalReader(directory) as reader:
            return reader.first_seq, reader.last_seq
    except JournalError as exc:
        raise ZepsSparkError(str(exc)) from None


def broker_info(opts):
    """The broker's QUERY report, with a clear error when it does not answer."""
    from zactors.patterns.zeps.client import ZepsError, query
    try:
        return query(opts.broker, timeout=opts.timeout)
    except ZepsError as exc:
        reason = str(exc).replace("no answer from %s " % opts.broker, "no answer ")
        if reason.startswith("no answer"):   # a Broker made in the Spark driver cannot answer: gevent waits there
            reason += " (is it running, in a process of its own? not in this Spark driver)"
        raise ZepsSparkError("cannot reach the ZEPS broker at %s: %s" % (opts.broker, reason)) from None
    except Exception as exc:   # a malformed endpoint (zmq.ZMQError)
        raise ZepsSparkError("cannot reach the ZEPS broker at %r: %s" % (opts.broker, exc)) from None


def broker_range(opts, stream, must_exist=True, report=None):
    """(first_seq, last_seq) of a stream on the broker (from its QUERY ``report``, asked for if None).

    Reading never creates a stream: a stream the broker does not have is an
    error with ``must_exist``, else empty (``(1, 0)``: a streaming query may
    start before the stream's first message).
    """
    info = (report or broker_info(opts))["streams"].get(stream)
    if info is None:
        if must_exist:
            raise ZepsSparkError("no stream %r on the broker at %s" % (stream, opts.broker))
        return 1, 0
    return info["first_seq"], info["last_seq"]


def stream_ranges(opts, must_exist=True):
    """{stream: (first_seq, last_seq, directory or None)} for the configured source."""
    opts.require_source()
    if opts.path:
        return {name: journal_range(d) + (d,) for name, d in journal_streams(opts).items()}
    if not opts.streams:
        raise ZepsSparkError("option stream is required with broker")
    report = broker_info(opts)      # one QUERY for every stream
    return {name: broker_range(opts, name, must_exist, report) + (None,) for name in opts.streams}


# -- planning ------------------------------------------------------------------------

def plan(opts, ranges):
    """Partitions covering the ranges ``[(stream, directory or None, from_seq, to_seq), ...]``.

    A partition is a list of slices (:class:`JournalPart`: part of one
    segment; :class:`BrokerPart`: a sequence range read from the broker),
    cut as Spark cuts files: the bytes are shared out evenly over
    ``n`` partitions, ``n`` large enough that none holds more than
    ``partitionBytes``, and at least ``minPartitions`` (so every core has
    work) while each keeps :data:`MIN_SPLIT` bytes.  Small segments are
    packed together; a large one is cut by sequence (and read from its
    sparse index).  Broker ranges are sized by a guess of 128 bytes a record.
    """
    spans = []                      # (stream, path, base, lo, hi, bytes); path None: from the broker
    for stream, directory, from_seq, to_seq in ranges:
        if to_seq < from_seq:
            continue
        if directory is None:
            spans.append((stream, None, None, from_seq, to_seq, (to_seq - from_seq + 1) * 128))
            continue
        try:
            with JournalReader(directory) as reader:
                segments = reader.segments()
        except JournalError as exc:
            raise ZepsSparkError(str(exc)) from None
        for i, (base, path, _first_ts, _last_ts, size) in enumerate(segments):
            last = segments[i + 1][0] - 1 if i + 1 < len(segments) else to_seq
            lo, hi = max(base, from_seq), min(last, to_seq)
            if lo > hi:
                continue
            if i + 1 == len(segments):
                hi = to_seq     # the active segment: up to what the range asks (read stops at its end)
            span = last - base + 1 if i + 1 < len(segments) else max(1, hi - base + 1)
            spans.append((stream, path, base, lo, hi, size * (hi - lo + 1) / span))
    total = sum(span[5] for span in spans)
    if not spans:
        return []
    n = max(1, math.ceil(total / opts.partition_bytes), min(opts.min_partitions, int(total // MIN_SPLIT)))
    target = total / n or 1.0
    parts = [[] for _ in range(n)]
    at = 0.0                        # bytes before the span at hand
    for stream, path, base, lo, hi, size in spans:
        per = size / (hi - lo + 1) or 1.0
        s = lo
        while s <= hi:              # records s.. go to the partition their first byte falls in
            k = min(n - 1, int((at + (s - lo) * per) / target))
            e = hi if k == n - 1 else max(s, min(hi, lo + math.ceil(((k + 1) * target - at) / per) - 1))
            parts[k].append(BrokerPart(stream, s, e) if path is None else JournalPart(stream, path, base, s, e))
            s = e + 1
        at += size
    return [part for part in parts if part]


# -- reading -------------------------------------------------------------------------

def _broker_batches(opts, part):
    from zactors.patterns.zeps.client import Subscriber, ZepsError
    try:
        sub = Subscriber(opts.broker, part.stream, from_seq=part.from_seq, window=opts.stream_window,
                         timeout=opts.timeout)
    except ZepsError as exc:
        raise ZepsSparkError("cannot read stream %r from the broker at %s: %s"
                             % (part.stream, opts.broker, exc)) from None
    try:
        seq = part.from_seq
        while seq <= part.to_seq:
            seqs, keys, bodies = [], [], []
            get = sub.get
            while seq <= part.to_seq and len(seqs) < BROKER_BATCH:
                message = get(opts.timeout)
                if message is None:
                    raise ZepsSparkError("the broker at %s sent nothing for %ss while reading stream %r at "
                                         "sequence %d" % (opts.broker, opts.timeout, part.stream, seq))
                if message[0] != seq:  # the subscriber reads every sequence: a jump is retention at work
                    if opts.fail_on_data_loss:
                        raise SequenceGone(message[0])
                    log.warning("stream %r: sequences %d..%d were removed by retention before they were read; "
                                "carrying on from %d", part.stream, seq, message[0] - 1, message[0])
                seqs.append(message[0])
                keys.append(message[1])
                bodies.append(message[2])
                seq = message[0] + 1
            if seqs and seqs[-1] > part.to_seq:
                cut = next(i for i, s in enumerate(seqs) if s > part.to_seq)
                del seqs[cut:], keys[cut:], bodies[cut:]
            yield pa.RecordBatch.from_arrays(
                [pa.array(seqs, pa.int64()), pa.nulls(len(seqs), SCHEMA.field("timestamp").type),
                 pa.array(keys, pa.binary()), pa.array(bodies, pa.binary())], schema=SCHEMA)
    finally:
        sub.destroy()


class _KeyFilter:
    """A ZEPS pattern applied to a key column: the pattern runs once per distinct key."""

    def __init__(self, pattern):
        from zactors.patterns.zeps.matcher import Filter
        self.match = Filter()
        self.match.add(pattern)
        self.seen = {}

    def mask(self, keys):
        import pyarrow.compute as pc      # here: its import costs a worker 40 ms, and most reads filter nothing
        distinct = pc.unique(keys)
        seen = self.seen
        wanted = []
        for key in distinct.to_pylist():
            hit = seen.get(key)
            if hit is None:
                if len(seen) > 100000:
                    seen.clear()
                hit = seen[key] = self.match(key)
            if hit:
                wanted.append(key)
        return pc.is_in(keys, value_set=pa.array(wanted, pa.binary()))


def _body_columns(opts, body, arrow_fields, part, seqs):
    """The body's columns for one batch, and a mask of the rows to keep (None: all).

    ``bodyFormat=json`` follows ``mode`` as Spark's JSON reader does: a body
    that is not one JSON object matching ``bodySchema`` gives nulls
    (PERMISSIVE, and its text in the ``columnNameOfCorruptRecord`` field if
    bodySchema has one), drops its row (DROPMALFORMED), or fails the read
    naming its sequence (FAILFAST).
    """
    if opts.body_format == "binary":
        return [body], None
    if opts.body_format == "utf-8":
        text = body.cast(pa.string(), safe=False)
        try:
            text.validate(full=True)
        except pa.ArrowInvalid:
            raise ZepsSparkError("stream %r: a body between sequences %d and %d is not valid UTF-8"
                                 " (use bodyFormat binary)" % (part.stream, part.from_seq, part.to_seq)) from None
        return [text], None
    if len(body) == 0:
        return [pa.array([], f.type) for f in arrow_fields], None
    corrupt = opts.corrupt_column
    fields = [f for f in arrow_fields if f.name != corrupt]
    bodies = body.to_pylist()
    tables, bad = _parse_json(bodies, 0, len(bodies), pa.schema(fields))
    if bad and opts.mode == "FAILFAST":
        at = bad[0]
        raise ZepsSparkError("stream %r: the body at sequence %d is not a JSON object matching bodySchema "
                             "(mode FAILFAST; PERMISSIVE gives nulls, DROPMALFORMED skips it)"
                             % (part.stream, seqs[at].as_py()))
    parsed = pa.concat_tables(tables) if tables else None
    n = len(bodies)
    bad_set = set(bad)
    if bad:   # row i takes parsed row take[i]; a bad row takes null
        take, good = [], 0
        for i in range(n):
            take.append(None if i in bad_set else good)
            good += i not in bad_set
        take = pa.array(take, pa.int64())
    columns = []
    for f in arrow_fields:
        if f.name == corrupt:
            columns.append(pa.array([bodies[i].decode("utf-8", "replace") if i in bad_set else None
                                     for i in range(n)], f.type) if bad else pa.nulls(n, f.type))
        elif parsed is None:
            columns.append(pa.nulls(n, f.type))
        else:
            column = parsed.column(f.name).combine_chunks()
            columns.append(column.take(take) if bad else column)
    keep = None
    if bad and opts.mode == "DROPMALFORMED":
        keep = pa.array([i not in bad_set for i in range(n)], pa.bool_())
    return columns, keep


def _parse_json(bodies, lo, hi, schema):
    """([tables of the good bodies in order], [indices of the bad]) for bodies[lo:hi]: read at once, and
    split in halves only where a read fails, so a batch with k bad bodies costs O(k log n) reads."""
    import io
    import pyarrow.json as pajson
    try:
        table = pajson.read_json(io.BytesIO(b"\n".join(bodies[lo:hi])), parse_options=pajson.ParseOptions(
            explicit_schema=schema, newlines_in_values=True, unexpected_field_behavior="ignore"))
        if table.num_rows == hi - lo:
            return [table], []
    except (pa.ArrowInvalid, ValueError):
        pass
    if hi - lo == 1:
        return [], [lo]
    mid = (lo + hi) // 2
    left, left_bad = _parse_json(bodies, lo, mid, schema)
    right, right_bad = _parse_json(bodies, mid, hi, schema)
    return left + right, left_bad + right_bad


def read_partition(opts, slices, out_schema, body_fields=None):
    """Yield Arrow record batches of ``out_schema`` for one partition, a list of slices (runs on an executor)."""
    for part in slices:
        yield from _read_slice(opts, part, out_schema, body_fields)


def _read_slice(opts, part, out_schema, body_fields):
    if isinstance(part, JournalPart):
        batches = segment_batches(part.path, part.base, part.from_seq, part.to_seq, index=sparse_index(part.path))
    else:
        batches = _broker_batches(opts, part)
    keys = _KeyFilter(opts.key_pattern) if opts.key_pattern else None
    since = int(opts.start_time * 1e6) if opts.start_time is not None else None
    until = int(opts.end_time * 1e6) if opts.end_time is not None else None
    stream = pa.scalar(part.stream, pa.string())
    try:
        for batch in batches:
            if since is not None or until is not None:
                import pyarrow.compute as pc
                ts = batch.column(1).cast(pa.int64())
                mask = None
                if since is not None:
                    mask = pc.greater_equal(ts, since)
                if until is not None and isinstance(part, JournalPart):
                    upper = pc.less_equal(ts, until)
                    mask = upper if mask is None else pc.and_(mask, upper)
                if mask is not None:
                    batch = batch.filter(pc.fill_null(mask, True))
            if keys is not None and batch.num_rows:
                batch = batch.filter(keys.mask(batch.column(2)))
            if not batch.num_rows:
                continue
            columns = [pa.repeat(stream, batch.num_rows), batch.column(0), batch.column(1), batch.column(2)]
            body, keep = _body_columns(opts, batch.column(3), body_fields, part, batch.column(0))
            columns.extend(body)
            out = pa.RecordBatch.from_arrays(columns, schema=out_schema)
            yield out if keep is None else out.filter(keep)
    except SequenceGone as exc:
        if not opts.fail_on_data_loss:      # a whole segment file removed between planning and reading
            log.warning("stream %r: sequences %d..%d were removed by retention before they were read; skipped",
                        part.stream, part.from_seq, min(part.to_seq, exc.first_seq - 1))
            return
        raise ZepsSparkError("stream %r: sequences from %d were removed by retention (first available: %d)"
                             % (part.stream, part.from_seq, exc.first_seq)) from None
    except JournalError as exc:
        raise ZepsSparkError("stream %r: %s" % (part.stream, exc)) from None
