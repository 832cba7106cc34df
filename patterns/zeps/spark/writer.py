"""Writers of the ``zeps`` data source: rows (``key``, ``body``) published to a ZEPS stream.

Both writers publish idempotently (``Publisher(idempotent=True)``, the
PUBLISH-ID extension): a broker killed and restarted while they publish
loses none of their rows and duplicates none (what it had not confirmed is
sent again; it drops what its journal kept already), so the writes go on
instead of failing with ``MessagesLost``.

Batch writes publish from every executor task straight to the broker and
flush (the broker has written them) before the task reports success.  Like
any sink without transactions, a task that Spark retries may publish its
rows again: batch writes are at-least-once.

Streaming writes are exactly-once across restarts.  Executors hand their
rows to the driver (Arrow IPC in the commit message) and the driver-side
``commit(batch_id)`` publishes them in one ordered pass, bracketed by
records in a commit log stream on the same broker
(``<stream>.spark-commits.<writerId>``)::

    {"batch": 7, "state": "intent", "start": S, "count": N}   flushed first
    ... the N rows published to <stream> and flushed ...
    {"batch": 7, "state": "done"}

A micro-batch that Spark replays after a crash is skipped when the log says
``done``; after an ``intent`` alone (the crash hit mid-publish) the writer
finds which of its rows already follow sequence S in the stream (as a
multiset: the replay may order rows differently) and publishes only the
rest.  So every row lands once, whatever moment the query died at.  (Rows are matched by key and body: another
publisher writing identical records into the same stream at the same moment
could be taken for ours; give the query its own output stream.)  Each
micro-batch travels through the driver, so this sink suits streams of
aggregates and events, not bulk copies (use a batch write for those).
"""
import json
import logging

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from .options import ZepsSparkError

__all__ = ["BatchWriter", "StreamWriter", "commit_log_stream"]

log = logging.getLogger(__name__)


def commit_log_stream(stream, writer_id):
    """The stream holding the commit log of streaming writer ``writer_id`` into ``stream``."""
    return "%s.spark-commits.%s" % (stream, writer_id)


def _check(opts, schema):
    if not opts.broker:
        raise ZepsSparkError("writing to zeps needs the broker option (an endpoint such as tcp://127.0.0.1:5570)")
    if len(opts.streams) != 1:
        raise ZepsSparkError("writing to zeps needs exactly one stream option")
    names = {f.name: f.dataType.typeName() for f in schema.fields}
    if names.get("body") not in ("binary", "string"):
        raise ZepsSparkError("writing to zeps needs a body column of type binary or string; got columns %s"
                             % ", ".join("%s %s" % kv for kv in names.items()))
    if "key" in names and names["key"] not in ("binary", "string"):
        raise ZepsSparkError("the key column must be binary or string, not %s" % names["key"])
    return opts.streams[0]


def _rows(batch):
    """(keys, bodies) of a record batch as lists of bytes (the publisher sends one frame per row)."""
    names = batch.schema.names
    bodies = batch.column(names.index("body"))
    if pa.types.is_string(bodies.type) or pa.types.is_large_string(bodies.type):
        bodies = bodies.cast(pa.binary())
    bodies = bodies.fill_null(b"").to_pylist()
    if "key" in names:
        keys = batch.column(names.index("key"))
        if not pa.types.is_binary(keys.type):
            keys = keys.cast(pa.binary())
        keys = keys.fill_null(b"").to_pylist()
    else:
        keys = [b""] * len(bodies)
    return keys, bodies


def _publisher(opts, stream):
    from zactors.patterns.zeps.client import Publisher, ZepsError
    try:
        return Publisher(opts.broker, stream, timeout=opts.timeout, idempotent=True)
    except ZepsError as exc:
        raise ZepsSparkError("cannot publish to stream %r on the broker at %s: %s" % (stream, opts.broker, exc)) from None


def _publish(pub, keys, bodies, timeout):
    from zactors.patterns.zeps.client import ZepsError
    publish = pub.publish
    try:
        for key, body in zip(keys, bodies):
            publish(key, body)
        pub.flush(timeout)
    except (ZepsError, ValueError) as exc:
        raise ZepsSparkError("publishing to stream %r on %s failed: %s" % (pub.stream.decode(), pub.endpoint, exc)) from None


class _Count(WriterCommitMessage):
    def __init__(self, rows):
        self.rows = rows


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("zeps")``: each task publishes its rows and flushes (at-least-once)."""

    def __init__(self, opts, schema, overwrite):
        self.opts = opts
        self.stream = _check(opts, schema)
        if overwrite:
            raise ZepsSparkError("a ZEPS stream is append-only: use mode('append')")

    def write(self, iterator):
        pub = _publisher(self.opts, self.stream)
        total = 0
        try:
            for batch in iterator:
                keys, bodies = _rows(batch)
                _publish(pub, keys, bodies, self.opts.timeout)
                total += len(keys)
        finally:
            pub.close()
        return _Count(total)

    def commit(self, messages):
        log.info("zeps: %d rows published to %s", sum(m.rows for m in messages if m), self.stream)


class _Rows(WriterCommitMessage):
    """One task's rows of a micro-batch, as Arrow IPC bytes (key, body)."""

    def __init__(self, data, rows):
        self.data = data
        self.rows = rows


class StreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("zeps")``: exactly-once through the commit log (module docstring)."""

    def __init__(self, opts, schema, overwrite):
        self.opts = opts
        self.stream = _check(opts, schema)
        self.log_stream = commit_log_stream(self.stream, opts.writer_id)

    def write(self, iterator):
        sink = pa.BufferOutputStream()
        writer = None
        rows = 0
        for batch in iterator:
            keys, bodies = _rows(batch)
            table = pa.RecordBatch.from_arrays([pa.array(keys, pa.binary()), pa.array(bodies, pa.binary())],
                                               names=["key", "body"])
            if writer is None:
                writer = pa.ipc.new_stream(sink, table.schema)
            writer.write_batch(table)
            rows += len(keys)
        if writer is None:
            return _Rows(b"", 0)
        writer.close()
        return _Rows(sink.getvalue().to_pybytes(), rows)

    def commit(self, messages, batchId):
        from .reader import broker_info

        opts = self.opts
        marks = _publisher(opts, self.log_stream)
        data = _publisher(opts, self.stream)
        try:
            last = self._last_mark(marks)
            if last is not None and last["batch"] > batchId or (last and last["batch"] == batchId
                                                               and last["state"] == "done"):
                log.info("zeps: micro-batch %d already committed to %s; skipped", batchId, self.stream)
                return
            keys, bodies = [], []
            for message in messages:
                if message is not None and message.rows:
                    for batch in pa.ipc.open_stream(message.data):
                        keys.extend(batch.column(0).to_pylist())
                        bodies.extend(batch.column(1).to_pylist())
            if last is not None and last["batch"] == batchId:          # intent without done: resume
                before = len(keys)
                keys, bodies = self._not_yet_published(last["start"], keys, bodies)
                log.warning("zeps: micro-batch %d was cut short after %d of %d rows; publishing the rest",
                            batchId, before - len(keys), before)
            else:
                start = broker_info(opts)["streams"][self.stream]["last_seq"]
                _publish(marks, [b"intent"], [json.dumps({"batch": batchId, "state": "intent", "start": start,
                                                          "count": len(keys)}).encode()], opts.timeout)
            _publish(data, keys, bodies, opts.timeout)
            _publish(marks, [b"done"], [json.dumps({"batch": batchId, "state": "done"}).encode()], opts.timeout)
        finally:
            data.close()
            marks.close()

    def _last_mark(self, marks):
        """The newest record of the commit log (a dict), or None."""
        from zactors.patterns.zeps.client import Subscriber
        from .reader import broker_info

        last = broker_info(self.opts)["streams"].get(self.log_stream, {}).get("last_seq", 0)
        if not last:
            return None
        sub = Subscriber(self.opts.broker, self.log_stream, from_seq=last, timeout=self.opts.timeout)
        try:
            message = sub.get(self.opts.timeout)
        finally:
            sub.destroy()
        if message is None:
            raise ZepsSparkError("the broker at %s did not deliver the commit log %r" % (self.opts.broker, self.log_stream))
        try:
            return json.loads(message[2])
        except ValueError:
            raise ZepsSparkError("commit log %r holds a record that is not JSON at sequence %d"
                                 % (self.log_stream, message[0])) from None

    def _not_yet_published(self, start, keys, bodies):
        """The rows of (keys, bodies) not found after sequence ``start`` in the stream.

        Matched as a multiset (each stream record accounts for one row at most), so the
        replay may order its rows differently from the attempt that was cut short."""
        from collections import Counter

        from zactors.patterns.zeps.client import Subscriber
        from .reader import broker_info

        end = broker_info(self.opts)["streams"][self.stream]["last_seq"]
        if end <= start or not keys:
            return keys, bodies
        wanted = Counter(zip(keys, bodies))
        found = Counter()
        sub = Subscriber(self.opts.broker, self.stream, from_seq=start + 1, timeout=self.opts.timeout)
        try:
            seq = start
            while seq < end:
                message = sub.get(self.opts.timeout)
                if message is None:
                    raise ZepsSparkError("the broker at %s stopped delivering %r at sequence %d"
                                         % (self.opts.broker, self.stream, seq + 1))
                seq = message[0]
                row = (message[1], message[2])
                if found[row] < wanted[row]:
                    found[row] += 1
        finally:
            sub.destroy()
        out_keys, out_bodies = [], []
        for row in zip(keys, bodies):
            if found[row]:
                found[row] -= 1
            else:
                out_keys.append(row[0])
                out_bodies.append(row[1])
        return out_keys, out_bodies

    def abort(self, messages, batchId):
        log.warning("zeps: micro-batch %d aborted; nothing of it was published", batchId)
