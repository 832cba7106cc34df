"""Journal benchmark: appends, writes, fsync and sequential reads, beside raw file appends.

    python benchmarks/journal.py [--records 1000000] [--body 100] [--dir DIR]

All in one run, 100-byte bodies with a 16-byte key by default:

  * append: records/s into the memory buffer (no I/O), the broker's per-message cost;
  * append + write(): with a write() every 1000 appends (the broker's loop round);
  * write(): MB/s of framed records handed to the OS, beside the ceiling, a
    plain os.write() of the same bytes to a file in the same directory;
  * sync(): fsync latency after a 1000-record write (p50/p99);
  * read(): sequential catch-up from the tail cache, from the files (page
    cache, tail cache off), and a JournalReader (what a Spark worker uses).

Each figure is printed as it is measured; the run has a deadline
(``--deadline``; see ``_harness.py``).
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _harness import Steps, add_deadline_option  # noqa: E402 - after the path

from zactors.actors.journal import Journal, JournalReader  # noqa: E402


def rate(n, seconds):
    return "%10.0f rec/s" % (n / seconds) if seconds > 0 else "inf"


def raw_write(path, size):
    """MB/s of one os.write() loop of ``size`` bytes to a new file (then removed)."""
    data = memoryview(bytes(size))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    t0 = time.perf_counter()
    while data:
        data = data[os.write(fd, data):]
    seconds = time.perf_counter() - t0
    os.close(fd)
    os.unlink(path)
    return size / seconds / 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    add_deadline_option(ap, 600)
    args = ap.parse_args(argv)
    if args.records < 1000:
        ap.error("--records must be at least 1000")
    with Steps(args.deadline).guard("journal", "appends, writes, fsyncs and reads of %d records" % args.records):
        measure(args)


def measure(args):
    n = args.records
    root = tempfile.mkdtemp(prefix="journal-bench-", dir=args.dir)
    key = b"k" * 16
    body = b"x" * args.body
    try:
        # 1. appends into the buffer only, then one write(); beside it the ceiling,
        #    os.write() of as many bytes to a new file (interleaved rounds: the disk is shared)
        t_append, journal_mbs, raw_mbs = [], [], []
        for r in range(3):
            j = Journal(os.path.join(root, "a%d" % r), tail_cache_bytes=32 << 20, buffer_bytes=1 << 40)
            append = j.append
            t0 = time.perf_counter()
            for _ in range(n):
                append(key, body)
            t_append.append(time.perf_counter() - t0)
            pending = j.stats()["pending_bytes"]
            t0 = time.perf_counter()
            j.write()
            journal_mbs.append(pending / (time.perf_counter() - t0) / 1e6)
            j.close(sync=False)
            shutil.rmtree(os.path.join(root, "a%d" % r))
            raw_mbs.append(raw_write(os.path.join(root, "raw"), pending))
        best = min(t_append)
        print("append (buffer only)        %s  %.2f us each (best of 3)" % (rate(n, best), best / n * 1e6))
        print("write() of %d MB framed     %10.0f MB/s  (median of 3)" % (pending >> 20, statistics.median(journal_mbs)))
        print("raw os.write same bytes     %10.0f MB/s  (median of 3; journal at %.2fx)"
              % (statistics.median(raw_mbs), statistics.median(journal_mbs) / statistics.median(raw_mbs)))

        # 2. append with a write() every 1000 appends (a broker's loop rounds)
        j = Journal(os.path.join(root, "b"))
        append, write = j.append, j.write
        t0 = time.perf_counter()
        for i in range(n):
            append(key, body)
            if i % 1000 == 999:
                write()
        write()
        t_aw = time.perf_counter() - t0
        print("append + write()/1000       %s" % rate(n, t_aw))

        # 3. fsync latency
        lat = []
        for _ in range(50):
            for _ in range(1000):
                append(key, body)
            write()
            t0 = time.perf_counter()
            j.sync()
            lat.append(time.perf_counter() - t0)
        lat.sort()
        print("sync() after 1000 records   p50 %.2f ms  p99 %.2f ms"
              % (statistics.median(lat) * 1e3, lat[int(len(lat) * 0.99) - 1] * 1e3))

        # 4. sequential reads
        def catch_up(journal, batch=4096):
            seq, count = journal.first_seq, 0
            t0 = time.perf_counter()
            while True:
                got = journal.read(seq, max_records=batch, max_bytes=None)
                if not got:
                    break
                count += len(got)
                seq = got[-1].seq + 1
            return count, time.perf_counter() - t0

        count, t = catch_up(j)
        print("read() mixed cache+disk     %s  (%d records)" % (rate(count, t), count))
        j.close()
        j = Journal(os.path.join(root, "b"), tail_cache_bytes=0)
        count, t = catch_up(j)
        print("read() from files           %s  (%d records)" % (rate(count, t), count))
        j.close()
        reader = JournalReader(os.path.join(root, "b"))
        t0 = time.perf_counter()
        count = sum(1 for _ in reader.records())
        t = time.perf_counter() - t0
        print("JournalReader.records()     %s  (%d records)" % (rate(count, t), count))
        reader.close()

        j = Journal(os.path.join(root, "c"), tail_cache_bytes=1 << 40, buffer_bytes=1 << 40)
        for _ in range(n):
            j.append(key, body)
        j.write()
        count, t = catch_up(j)
        print("read() from the tail cache  %s  (%d records)" % (rate(count, t), count))
        j.close(sync=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
