"""The ZEPS and Clone benchmarks at two commits, in one run, side by side (issue 20: no figure worse by 5%).

Run from a checkout: ``python benchmarks/compare.py [--quick] [BASE [NEW]]``.  BASE defaults to
072f3c6 (main just before issue 20's first merge, the RE2 matcher), NEW to ``main``.  Each commit is
exported (``git archive``), its C extensions built in place, and laid out as the package in a
temporary directory put first on ``PYTHONPATH`` (this interpreter's dependencies), then ``benchmarks/zeps.py`` and
``benchmarks/clone.py`` of *that* commit run against it, NEW right after BASE for each benchmark so
that both see the same machine load.  Every line they print is shown as it comes; then one table
of each figure at both commits and the change (throughput: higher is better; latency and seconds:
lower is better), marking changes worse than 5%.  ``--rounds N`` runs the pair N times, interleaved,
and compares the medians (the load average is printed before each run).  ``--quick`` runs short passes
(seconds, noisy); the default sizes are the benchmarks' own.  Figures of one run only compare with each
other.  BASE 03f311a is main before issue #19's work (the acknowledgement levels).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from _harness import subset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = "072f3c6"
QUICK = {"zeps.py": ["--messages", "20000", "--replay", "100000", "--paced", "1", "--stacks", "zeps"],
         "clone.py": ["--keys", "20000", "--updates", "20000", "--failover-seconds", "2"]}
FULL = {"zeps.py": ["--stacks", "zeps"], "clone.py": []}
#: a row of zeps.py's table (every version prints it): run, msg/s, p50 ms, p99 ms, lost
_ZEPS_ROW = re.compile(r"^zactors ZEPS \(.*?\)\s+(deliver \d+ sub|replay)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\d+)(?:\s.*)?$")
#: figures where lower is better (latencies, seconds, losses)
LOWER = ("p50", "p99", "seconds", "failover_s", "lost", "missed")


def install(ref, into):
    """Export ``ref`` to ``into/src``, build its C extensions in place, and lay it out as the package
    ``zactors`` under ``into/site`` (links to the folders setup.py maps: toplevel, actors, ...)."""
    src, site = os.path.join(into, "src"), os.path.join(into, "site")
    os.makedirs(src)
    archive = subprocess.run(["git", "-C", ROOT, "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=src, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    package = os.path.join(site, "zactors")
    os.makedirs(package)
    top = os.path.join(src, "toplevel")   # (older commits had no zactors/__init__: a namespace package)
    for name in os.listdir(top) if os.path.isdir(top) else ():
        os.symlink(os.path.join(top, name), os.path.join(package, name))
    for folder in ("actors", "patterns", "apps"):
        os.symlink(os.path.join(src, folder), os.path.join(package, folder))
    return src, site


def run(ref, src, site, script, args, deadline):
    """Run ``script`` of ``ref``'s tree against its install; print its lines; return its figures."""
    env = dict(os.environ, PYTHONPATH=site)
    path = os.path.join(src, "benchmarks", script)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    extra = []   # options that older benchmarks lack
    if "--deadline" in text:
        extra += ["--deadline", str(deadline)]
    if '"--rounds"' in text:   # newer ones take medians of their own rounds: here we interleave commits instead
        extra += ["--rounds", "1"]
    if script == "zeps.py" and '"--runs"' in text:   # the rows both commits have (no consumer groups)
        extra += ["--runs", "deliver1,deliver10,replay"]
    argv = [sys.executable, path] + extra + args
    print("== %s at %s: %s (load average %s)" % (script, ref, " ".join(argv[2:]),
                                                 " ".join("%.2f" % x for x in os.getloadavg())), flush=True)
    proc = subprocess.Popen(argv, cwd=src, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    figures = {}
    for line in proc.stdout:
        print("   " + line.rstrip(), flush=True)
        text = line.strip()
        row = _ZEPS_ROW.match(text) if script == "zeps.py" else None
        if row:
            run_, rate, p50, p99, lost = row.groups()
            figures[run_] = {"rate": int(rate), "lost": int(lost), "p50_ms": None if p50 == "-" else float(p50),
                             "p99_ms": None if p99 == "-" else float(p99)}
            continue
        start = text.find("{")
        if start < 0 or not text.endswith("}"):
            continue
        try:
            value = json.loads(text[start:])
        except ValueError:
            continue
        if script == "clone.py" and start == 0:
            figures.update(value)
    if proc.wait() != 0:
        print("   (%s at %s ended with status %d)" % (script, ref, proc.returncode), flush=True)
    return figures


def flatten(figures, prefix=""):
    out = {}
    for key, value in figures.items():
        name = "%s%s" % (prefix, key)
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        elif isinstance(value, list):
            out[name] = sum(value) if all(isinstance(v, (int, float)) for v in value) else None
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    return {k: v for k, v in out.items() if v is not None}


def median(runs):
    """One figures dict from several runs' (flattened): each figure's median over the runs that have it."""
    flat = [flatten(r) for r in runs]
    names = set().union(*flat) if flat else set()
    return {name: statistics.median(f[name] for f in flat if name in f) for name in names}


def table(results, base, new):
    print("\n%-48s %14s %14s %9s" % ("figure", base, new, "change"))
    worse = []
    for script in sorted(results[base]):
        old, now = median(results[base][script]), median(results[new].get(script, []))
        for name in sorted(old):
            if name not in now:
                continue
            a, b = old[name], now[name]
            change = (b - a) / a * 100 if a else (0.0 if b == a else float("inf") * (1 if b > a else -1))
            lower = any(word in name.rsplit(".", 1)[-1] for word in LOWER)
            bad = (change > 5) if lower else (change < -5)
            if name.endswith((".keys", ".received", ".clients", ".written")) or name == "failover.rate":
                bad = False       # the run's own parameters and counts, not figures
            if bad:
                worse.append(name)
            print("%-48s %14.4g %14.4g %+8.1f%%%s" % (script[:-3] + " " + name, a, b, change,
                                                     "  <- worse than 5%" if bad else ""))
    print("\n%d figure(s) worse by more than 5%%%s" % (len(worse), (": " + ", ".join(worse)) if worse else ""))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", nargs="?", default=BASE, help="the commit before (default %s)" % BASE)
    parser.add_argument("new", nargs="?", default="main", help="the commit after (default main)")
    parser.add_argument("--quick", action="store_true", help="short passes (seconds each; noisy)")
    parser.add_argument("--deadline", type=float, default=900, metavar="SECONDS",
                        help="seconds a benchmark step may take (default: %(default)g)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each commit, interleaved (medians)")
    parser.add_argument("--only", default="zeps,clone", help="comma-separated subset: zeps, clone")
    args = parser.parse_args(argv)
    only = subset(parser, "--only", args.only, ("zeps", "clone"))
    sizes = QUICK if args.quick else FULL
    results = {args.base: {}, args.new: {}}
    with tempfile.TemporaryDirectory(prefix="zactors-compare-") as tmp:
        trees = {ref: install(ref, os.path.join(tmp, "r%d" % i)) for i, ref in enumerate((args.base, args.new))}
        for script in [name + ".py" for name in only]:
            for _ in range(args.rounds):
                for ref in (args.base, args.new):
                    src, site = trees[ref]
                    results[ref].setdefault(script, []).append(run(ref, src, site, script, sizes[script],
                                                                   args.deadline))
    table(results, args.base, args.new)


if __name__ == "__main__":
    main()
