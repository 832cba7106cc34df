"""Options of the ``zeps`` Spark data source, parsed once and checked with clear messages.

=====================  ==========================================================
``path``               a broker's journal directory (one sub-directory per stream),
                       or one stream's directory; read straight from the files
``broker``             a broker endpoint (``tcp://host:port``): read or write over
                       the network, from any executor
``stream``             stream name(s), comma-separated (with ``path``, default:
                       every stream in the directory)
``fromSeq``/``toSeq``  sequence range, inclusive (batch)
``startTime``/         time range: epoch seconds or ISO-8601 (``2026-11-23T14:00:00Z``)
``endTime``
``keyPattern``         a ZEPS pattern (prefix, ``re:``, ``glob:``, ``prefix:``)
``bodyFormat``         ``binary`` (default), ``utf-8`` (body as a string), ``json``
                       (body fields as columns: give ``bodySchema`` in DDL)
``bodySchema``         e.g. ``"sensor STRING, value DOUBLE"`` (with ``bodyFormat=json``)
``mode``               ``bodyFormat=json``, a body that is not a JSON object matching
                       bodySchema, as Spark's JSON reader: ``PERMISSIVE`` (default:
                       its fields are null), ``DROPMALFORMED`` (its row is left out)
                       or ``FAILFAST`` (the read fails, naming its sequence)
``columnNameOfCorruptRecord``  PERMISSIVE: a STRING field of bodySchema with this
                       name (default ``_corrupt_record``) holds a malformed body's
                       text (null for the others)
``partitionBytes``     most bytes of journal per partition (default 128 MiB, as
                       Spark's ``spark.sql.files.maxPartitionBytes``)
``minPartitions``      partitions a read spreads over at least, while each keeps
                       4 MiB or more (default: the planning machine's cores)
``startingOffsets``    streaming: ``earliest`` (default), ``latest``, a JSON object
                       ``{"stream": next_seq}``, or a time (epoch seconds / ISO-8601)
``maxRecordsPerTrigger``  streaming: records per micro-batch, all streams together, shared
                       fairly (equal shares; what one stream does not need goes to
                       the others)
``failOnDataLoss``     streaming, and reads from a broker: ``true`` (default) fails
                       when retention removed sequences the query still needs;
                       ``false`` reads what is left, from the first retained one
                       (logged)
``writerId``           streaming write: names the exactly-once commit log (default
                       ``default``; give distinct ids to queries writing one stream)
``timeout``            seconds to wait for the broker (default 10)
``window``             reads from a broker: the subscriber's credit window in bytes
                       (default 8 MiB)
=====================  ==========================================================

Option names are case-insensitive, as Spark's are; a name not listed here is
refused with the list (a misspelled option would otherwise be ignored).
"""
import datetime
import json
import os

__all__ = ["Options", "ZepsSparkError", "parse_time"]

BODY_FORMATS = ("binary", "utf-8", "json")
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
#: every option, spelled as documented (Spark lower-cases the names it passes)
NAMES = ("path", "broker", "stream", "streams", "fromSeq", "toSeq", "startTime", "endTime", "keyPattern",
         "bodyFormat", "bodySchema", "mode", "columnNameOfCorruptRecord", "partitionBytes", "minPartitions",
         "startingOffsets", "maxRecordsPerTrigger", "failOnDataLoss", "writerId", "timeout", "window")
#: options Spark itself handles and may pass along (a streaming write's checkpoint)
_SPARKS = ("checkpointlocation", "queryname")
_KNOWN = {name.lower() for name in NAMES} | set(_SPARKS)


class ZepsSparkError(Exception):
    """A problem with the zeps data source's options, input or broker, in one readable line."""


def parse_time(value, name):
    """Epoch seconds (float) from a number or an ISO-8601 string (naive means UTC)."""
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        stamp = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ZepsSparkError("option %s: %r is neither epoch seconds nor an ISO-8601 time" % (name, value)) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.timezone.utc)
    return stamp.timestamp()


def _int(options, name, default=None, minimum=0):
    value = options.get(name)
    if value is None:
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ZepsSparkError("option %s: %r is not an integer" % (name, value)) from None
    if number < minimum:
        raise ZepsSparkError("option %s: %d is below %d" % (name, number, minimum))
    return number


def _bool(options, name, default):
    value = options.get(name)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ZepsSparkError("option %s: %r is not true or false" % (name, value))


class Options:
    """The parsed options (picklable: shipped to executors inside the reader)."""

    def __init__(self, options):
        options = {str(k).lower(): v for k, v in dict(options).items()}
        unknown = sorted(name for name in options if name not in _KNOWN)
        if unknown:
            raise ZepsSparkError("unknown option%s %s: the zeps source takes %s" % (
                "s" if len(unknown) > 1 else "", ", ".join(unknown), ", ".join(NAMES)))
        self.path = options.get("path") or None
        self.broker = options.get("broker") or None
        if self.path and self.broker:
            raise ZepsSparkError("give either path (a journal directory) or broker (an endpoint), not both")
        streams = options.get("stream") or options.get("streams") or ""
        self.streams = [s.strip() for s in streams.split(",") if s.strip()]
        self.from_seq = _int(options, "fromseq", 1, 1)
        self.to_seq = _int(options, "toseq", None, 1)
        self.start_time = parse_time(options["starttime"], "startTime") if options.get("starttime") else None
        self.end_time = parse_time(options["endtime"], "endTime") if options.get("endtime") else None
        pattern = options.get("keypattern")
        self.key_pattern = pattern.encode() if pattern else None
        if self.key_pattern is not None:
            from zactors.patterns.zeps.matcher import PatternError, parse
            try:
                parse(self.key_pattern)
            except PatternError as exc:
                raise ZepsSparkError("option keyPattern: %s" % exc) from None
        self.body_format = (options.get("bodyformat") or "binary").lower().replace("utf8", "utf-8")
        if self.body_format not in BODY_FORMATS:
            raise ZepsSparkError("option bodyFormat: %r is not one of %s" % (self.body_format, ", ".join(BODY_FORMATS)))
        self.body_schema = options.get("bodyschema")
        if self.body_format == "json" and not self.body_schema:
            raise ZepsSparkError("bodyFormat json needs bodySchema, e.g. \"sensor STRING, value DOUBLE\"")
        self.mode = str(options.get("mode") or "PERMISSIVE").strip().upper()
        if self.mode not in MODES:
            raise ZepsSparkError("option mode: %r is not one of %s" % (options["mode"], ", ".join(MODES)))
        self.corrupt_column = str(options.get("columnnameofcorruptrecord") or "_corrupt_record").strip()
        self.partition_bytes = _int(options, "partitionbytes", 128 << 20, 1 << 10)
        self.min_partitions = _int(options, "minpartitions", os.cpu_count() or 1, 1)
        self.starting_offsets = (options.get("startingoffsets") or "earliest").strip()
        self.max_records = _int(options, "maxrecordspertrigger", None, 1)
        self.fail_on_data_loss = _bool(options, "failondataloss", True)
        self.writer_id = options.get("writerid") or "default"
        try:
            self.timeout = float(options.get("timeout") or 10.0)
        except ValueError:
            raise ZepsSparkError("option timeout: %r is not a number of seconds" % options["timeout"]) from None
        if not self.timeout > 0:
            raise ZepsSparkError("option timeout: %r must be above 0 seconds" % options["timeout"])
        self.stream_window = _int(options, "window", 8 << 20, 1 << 16)

    def require_source(self):
        """Raise ZepsSparkError unless ``path`` or ``broker`` is set."""
        if not (self.path or self.broker):
            raise ZepsSparkError("the zeps source needs path (a journal directory) or broker (an endpoint)")

    def starting(self):
        """('earliest'|'latest', None) | ('offsets', {stream: seq}) | ('time', epoch)."""
        text = self.starting_offsets
        if text.lower() in ("earliest", "latest"):
            return text.lower(), None
        if text.startswith("{"):
            try:
                value = json.loads(text)
                if not isinstance(value, dict) or not all(isinstance(v, int) and v >= 0 for v in value.values()):
                    raise ValueError
            except ValueError:
                raise ZepsSparkError('option startingOffsets: %r is not a JSON object {"stream": seq}' % text) from None
            return "offsets", value
        return "time", parse_time(text, "startingOffsets")
