"""Background work: posts from real OS threads, blocking calls on the hub's threadpool."""
import os
import threading
import time

import gevent
import pytest
from gevent import getcurrent
from gevent.event import Event

from zactors.actors import Actor, command
from zactors.actors.reactor import Reactor

pytestmark = pytest.mark.timeout(30)


def start(reactor):
    return gevent.spawn(reactor.run)


def finish(reactor, runner):
    reactor.stop()
    runner.get(timeout=5)
    reactor.close()


def test_posts_from_many_threads_all_run_in_the_loop_in_order():
    r = Reactor()
    runner = start(r)
    seen = {}
    wrong_greenlet = []
    done = Event()
    threads, per_thread = 8, 2000

    def record(thread, i):
        if getcurrent() is not runner:
            wrong_greenlet.append(thread)
        seen.setdefault(thread, []).append(i)
        if sum(map(len, seen.values())) == threads * per_thread:
            done.set()

    def poster(thread):
        for i in range(per_thread):
            r.post(record, thread, i)

    workers = [threading.Thread(target=poster, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    assert done.wait(10), "posts were lost"
    for w in workers:
        w.join(5)
    assert not wrong_greenlet
    assert all(seen[t] == list(range(per_thread)) for t in range(threads))
    finish(r, runner)


def test_a_post_from_a_thread_wakes_a_parked_reactor():
    r = Reactor()
    runner = start(r)
    gevent.sleep(0)  # parked: no sockets, no timers
    done = Event()
    for _ in range(20):
        done.clear()
        threading.Thread(target=r.post, args=(done.set,)).start()
        assert done.wait(5), "the post did not wake the reactor"
    finish(r, runner)


def test_a_posted_call_that_raises_stops_the_reactor():
    r = Reactor()

    def boom():
        raise RuntimeError("posted bug")

    r.post(boom)
    with pytest.raises(RuntimeError, match="posted bug"):
        start(r).get(timeout=5)
    r.close()


def test_posts_after_close_are_dropped_quietly():
    r = Reactor()
    r.close()
    r.post(print, "never")  # no error, from this thread or another
    t = threading.Thread(target=r.post, args=(print, "never"))
    t.start()
    t.join(5)


def test_run_in_thread_fsyncs_a_real_file_and_delivers_in_the_loop(tmp_path):
    r = Reactor()
    runner = start(r)
    path = tmp_path / "journal"
    data = os.urandom(1 << 20)
    results = []
    done = Event()

    def write_and_sync():
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return threading.get_ident()

    def on_done(result, error):
        results.append((result, error, getcurrent() is runner))
        done.set()

    r.run_in_thread(write_and_sync, on_done=on_done)
    assert done.wait(10)
    (ident, error, in_loop), = results
    assert error is None and in_loop
    assert ident != threading.get_ident(), "the blocking call ran on the hub's thread"
    assert path.read_bytes() == data
    finish(r, runner)


def test_the_loop_runs_while_a_blocking_call_waits_in_a_thread():
    r = Reactor()
    runner = start(r)
    release = threading.Event()
    ticks = []
    r.call_every(0.002, lambda: ticks.append(1))
    done = Event()
    results = []
    r.run_in_thread(release.wait, 10, on_done=lambda result, error: (results.append((result, error)), done.set()))
    deadline = time.monotonic() + 5
    while len(ticks) < 10 and time.monotonic() < deadline:
        gevent.sleep(0.005)
    assert len(ticks) >= 10, "the loop stalled behind the blocking call"
    assert not done.is_set()
    release.set()
    assert done.wait(5)
    assert results == [(True, None)]
    finish(r, runner)


def test_run_in_thread_errors_go_to_on_done_or_stop_the_reactor(tmp_path):
    r = Reactor()
    runner = start(r)
    done = Event()
    results = []
    missing = tmp_path / "missing" / "file"
    r.run_in_thread(open, missing, "rb", on_done=lambda result, error: (results.append((result, error)), done.set()))
    assert done.wait(5)
    assert results[0][0] is None and isinstance(results[0][1], FileNotFoundError)
    r.run_in_thread(open, missing, "rb")  # no on_done: a bug
    with pytest.raises(FileNotFoundError):
        runner.get(timeout=5)
    r.close()


class Counter(Actor):
    def setup(self):
        self.total = 0
        self.synced = None

    def add(self, n):
        self.total += n

    @command(reply=True)
    def total_(self):
        return self.total

    @command(reply=True)
    def sync(self, path):
        def write():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.write(fd, b"%d" % self.total)
                os.fsync(fd)
            finally:
                os.close(fd)
            return "synced"

        self.run_in_thread(write, on_done=lambda result, error: setattr(self, "synced", result or error))

    @command(reply=True)
    def synced_(self):
        return self.synced


def test_actor_post_and_run_in_thread(tmp_path):
    counter = Counter()
    try:
        workers = [threading.Thread(target=lambda: [counter.post(counter.add, 1) for _ in range(500)])
                   for _ in range(4)]
        for w in workers:
            w.start()
        deadline = time.monotonic() + 10
        while counter.call("TOTAL_", timeout=5) < 2000 and time.monotonic() < deadline:
            gevent.sleep(0.005)
        for w in workers:
            w.join(5)
        assert counter.call("TOTAL_", timeout=5) == 2000
        path = tmp_path / "total"
        counter.call("SYNC", str(path), timeout=5)
        deadline = time.monotonic() + 10
        while counter.call("SYNCED_", timeout=5) is None and time.monotonic() < deadline:
            gevent.sleep(0.005)
        assert counter.call("SYNCED_", timeout=5) == "synced"
        assert path.read_bytes() == b"2000"
    finally:
        counter.destroy()
