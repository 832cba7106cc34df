"""The scatter-gather task pipeline: in one process, and as three CLI processes."""
import os
import signal
import subprocess
import sys
import time

import gevent
import gevent.subprocess
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from zactors.actors.auth import create_keypair
from zactors.actors.sockets import context
from zactors.apps.commands.pipeline import SquareWorker, pipeline
from zactors.apps.pipeline import Sink, Ventilator, Worker, decode_result, decode_task, encode_result, encode_task
from zactors.patterns.scatter import Scatter, native_available
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(90)



@pytest.fixture
def rig():
    """A ventilator and a sink; workers added with ``rig.worker(cls, ...)``; all torn down."""
    class Rig:
        ventilator = Ventilator()
        sink = Sink()
        workers = []

        def worker(self, cls, **kw):
            worker = cls(self.ventilator.endpoint, self.sink.endpoint, **kw)
            self.workers.append(worker)
            return worker

    rig = Rig()
    yield rig
    for worker in rig.workers:
        worker.destroy()
    rig.ventilator.close()
    rig.sink.close()


@pytest.mark.timeout(60)
def test_pipeline_spreads_tasks_and_gathers_every_result():
    lines = []
    assert pipeline(lines.append, 3000, 3)
    shares = [int(line.split()[1]) for line in lines if line.strip().startswith("worker-")]
    assert len(shares) == 3 and sum(shares) == 3000
    assert min(shares) >= 600, shares  # round-robin spread, not all on one worker


class Picky(Worker):
    def process(self, payload):
        n = int(payload)
        if n % 2:
            raise ValueError("odd task %d" % n)
        return payload


@pytest.mark.timeout(60)
def test_worker_failures_and_malformed_tasks_are_counted_not_fatal(rig):
    worker = rig.worker(Picky)
    assert rig.ventilator.wait_for_workers(1, timeout=20)
    rig.ventilator.scatter.send(b"\xc1 not msgpack")
    rig.ventilator.scatter.send(encode_task(1, b"x")[:-1])
    for n in range(20):
        rig.ventilator.send(b"%d" % n)
    got = sorted(int(r.payload) for r in rig.sink.results(10, timeout=20))
    assert got == list(range(0, 20, 2))
    wait_for(lambda: worker.call("$STATS").get("failed") == 10, 10, "the failures counted")
    stats = worker.call("$STATS")
    assert stats["done"] == 10 and stats["malformed"] == 2
    assert worker.alive


@pytest.mark.timeout(60)
def test_worker_threads_and_greenlets_share_its_sockets(rig):
    workers = [rig.worker(SquareWorker, threads=2, concurrency=3) for _ in range(2)]
    assert rig.ventilator.wait_for_workers(2, timeout=20)
    tasks = 5000
    sender = gevent.spawn(lambda: [rig.ventilator.send(b"%d" % n) for n in range(tasks)])
    results = list(rig.sink.results(tasks, timeout=20))
    sender.get(timeout=10)
    assert sorted(r.task_id for r in results) == list(range(tasks))
    assert all(int(r.payload) == r.task_id ** 2 for r in results)
    assert {r.worker for r in results} == {w.name for w in workers}


@pytest.mark.timeout(30)
def test_sink_counts_malformed_results(rig):
    scatter = Scatter(linger=0)
    try:
        scatter.connect(rig.sink.endpoint)
        scatter.send(b"junk")
        scatter.send(encode_result(7, "w", b"49"))
        (result,) = list(rig.sink.results(1, timeout=10))
        assert result == (7, "w", b"49") and rig.sink.malformed == 1
    finally:
        scatter.close()
    with pytest.raises(ValueError):
        decode_result(b"\x93\x01")


@pytest.fixture
def role(processes):
    """A pipeline role (sink, ventilate, work) as its own CLI process."""
    return lambda *argv: processes([sys.executable, "-m", "zactors.apps.cli", "-q", "pipeline", *argv],
                                   stdout=gevent.subprocess.PIPE, stderr=gevent.subprocess.PIPE, text=True,
                                   env=dict(os.environ, PYTHONUNBUFFERED="1"))


def _endpoint(proc):
    line = proc.stdout.readline()
    return line.split(" on ", 1)[1].split(",")[0].strip()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("curve", [False, True], ids=["plain", "curve"])
def test_cli_roles_in_separate_processes(role, tmp_path, curve):
    server_opts, worker_opts = [], []
    if curve:
        create_keypair(str(tmp_path), "server")
        create_keypair(str(tmp_path / "workers"), "worker")
        server_opts = ["--curve", str(tmp_path / "server.key_secret"),
                       "--curve-clients", str(tmp_path / "workers")]
        worker_opts = ["--curve-server", str(tmp_path / "server.key"),
                       "--curve", str(tmp_path / "workers" / "worker.key_secret")]
    sink = role("sink", "--bind", "tcp://127.0.0.1:*", "--tasks", "500", "--timeout", "30", *server_opts)
    results = _endpoint(sink)
    ventilator = role("ventilate", "--bind", "tcp://127.0.0.1:*", "--tasks", "500", "--workers", "2",
                           "--wait", "30", *server_opts)
    tasks = _endpoint(ventilator)
    workers = [role("work", "--ventilator", tasks, "--sink", results, "--threads", "1", *worker_opts)
               for _ in range(2)]
    out, err = sink.communicate(timeout=60)
    assert sink.returncode == 0, err
    assert "500 of 500 results" in out
    shares = [line for line in out.splitlines() if line.strip().startswith("squareworker-")]
    assert len(shares) == 2, out  # both workers took part
    assert ventilator.wait(timeout=30) == 0
    for worker, sig in zip(workers, (signal.SIGINT, signal.SIGTERM)):
        worker.send_signal(sig)  # a worker is a server: asked to stop, it says what it did and exits 0
        out, err = worker.communicate(timeout=20)
        assert " done, 0 failed" in out and worker.returncode == 0, (out, err)
        assert "Traceback" not in err


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_decoders_turn_any_bytes_into_a_value_or_a_value_error(frame):
    for decode in (decode_task, decode_result):
        try:
            message = decode(frame)
        except ValueError:
            continue
        assert type(message) is tuple and type(message[0]) is int and type(message[-1]) is bytes


@given(st.integers(min_value=0, max_value=2**63), st.binary(max_size=32), st.text(max_size=8))
def test_codecs_round_trip(task_id, payload, worker):
    assert decode_task(encode_task(task_id, payload)) == (task_id, payload)
    assert decode_result(encode_result(task_id, worker, payload)) == (task_id, worker, payload)


@pytest.mark.timeout(60)
def test_runs_back_to_back_leave_the_shared_context_working():
    # Regression: a monitor left running after its reader closed blocked
    # libzmq's I/O thread, and so every tcp socket of the process.
    for _ in range(5):
        assert pipeline(lambda line: None, 300, 3)
    ctx = context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    try:
        pull.linger = push.linger = 0
        port = pull.bind_to_random_port("tcp://127.0.0.1")
        push.connect("tcp://127.0.0.1:%d" % port)
        push.send(b"still alive")
        assert pull.poll(10000), "the context's I/O thread is stuck"
    finally:
        pull.close()
        push.close()


@pytest.mark.timeout(60)
def test_ventilator_counts_only_completed_handshakes(tmp_path):
    """A raw TCP client, a worker with a refused key and an HTTP request never count as workers."""
    import socket
    from zactors.actors.auth import Authenticator, curve_client, curve_server, generate_keypair
    server, good, stranger = generate_keypair(), generate_keypair(), generate_keypair()
    create_keypair(str(tmp_path), "unused")
    (tmp_path / "good.key").write_text("metadata\ncurve\n    public-key = \"%s\"\n" % good.public.decode())
    auth = Authenticator(curve=str(tmp_path))
    ventilator = Ventilator(secure=lambda sock: curve_server(sock, server))
    sink = Sink(secure=lambda sock: curve_server(sock, server))
    crew = []
    try:
        host, port = ventilator.endpoint.rsplit("//", 1)[1].rsplit(":", 1)
        idle = socket.create_connection((host, int(port)))           # never speaks
        http = socket.create_connection((host, int(port)))
        http.sendall(b"GET / HTTP/1.0\r\n\r\n")
        refused = SquareWorker(ventilator.endpoint, sink.endpoint,
                               secure=lambda sock: curve_client(sock, stranger, server.public))
        crew.append(refused)
        event = refused.recv_event(timeout=10)
        assert event is not None and event.name == "REFUSED" and "refused our key" in event.args[0]
        http.close()
        crew.append(SquareWorker(ventilator.endpoint, sink.endpoint,
                                 secure=lambda sock: curve_client(sock, good, server.public)))
        assert ventilator.wait_for_workers(1, timeout=20)
        assert ventilator.workers == 1 and ventilator.peers.failed >= 1
        idle.close()
    finally:
        for worker in crew:
            worker.destroy()
        ventilator.close()
        sink.close()
        auth.destroy()


@pytest.mark.timeout(60)
def test_a_worker_with_a_refused_key_exits_4_at_once(role, tmp_path):
    create_keypair(str(tmp_path), "server")
    create_keypair(str(tmp_path / "workers"), "worker")
    create_keypair(str(tmp_path / "others"), "stranger")
    ventilator = role("ventilate", "--bind", "tcp://127.0.0.1:*", "--tasks", "1", "--workers", "1", "--wait", "2",
                      "--curve", str(tmp_path / "server.key_secret"), "--curve-clients", str(tmp_path / "workers"))
    tasks = _endpoint(ventilator)
    started = time.monotonic()
    worker = role("work", "--ventilator", tasks, "--sink", "tcp://127.0.0.1:9", "--curve-server",
                  str(tmp_path / "server.key"), "--curve", str(tmp_path / "others" / "stranger.key_secret"))
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 4, (out, err)
    assert time.monotonic() - started < 10
    assert "the ventilator at %s refused our key" % tasks in err
    out, err = ventilator.communicate(timeout=30)
    assert ventilator.returncode == 1
    assert "only 0 of 1 workers connected" in err and "failed the handshake" in err


def test_sink_throughput_is_timed_from_the_first_result():
    from zactors.apps.commands.pipeline import _Tally, _report
    from zactors.apps.pipeline import Result
    tally = _Tally()
    tally.first = None
    for i in range(3):
        tally.add(Result(i, "w", b""))
    tally.first, tally.last = 100.0, 100.5   # three results over half a second, whenever the sink started
    lines = []
    assert _report(lines.append, tally, 3)
    assert lines[-1] == "  3 of 3 results in 0.50s (4 tasks/s, first to last result)"


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "zactors.apps.cli", "-q", "pipeline", *argv],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(native_available(), reason="this pyzmq has the draft API: --native works here")
@pytest.mark.parametrize("role", ["demo", "ventilate", "work", "sink"])
def test_native_without_drafts_is_a_one_line_usage_error(role):
    done = _cli(role, "--native")
    assert done.returncode == 2, done
    assert "--native needs pyzmq and libzmq built with the draft API" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(not native_available(), reason="native SCATTER/GATHER needs pyzmq built with the draft API "
                                                   "(run .ci/draft)")
def test_demo_runs_on_the_native_wire():
    done = _cli("demo", "--native", "--tasks", "500", "--workers", "2")
    assert done.returncode == 0, done.stderr
    assert "500 of 500 results" in done.stdout
