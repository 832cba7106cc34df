"""Cooperative tasks: bounded steps per round, the loop keeps flowing, clean endings."""
import time

import gevent
import pytest
import zmq
from gevent.event import Event

from zactors.actors import Actor, ActorDied, command
from zactors.actors.reactor import Reactor
from zactors.actors.sockets import Socket, context

pytestmark = pytest.mark.timeout(30)


def run_in_greenlet(reactor):
    return gevent.spawn(reactor.run)


def stop(reactor, runner):
    reactor.stop()
    runner.get(timeout=5)
    reactor.close()


def forever(counter, key, pause=0.0):
    while True:
        counter[key] = counter.get(key, 0) + 1
        if pause:
            busy_until = time.perf_counter() + pause
            while time.perf_counter() < busy_until:
                pass
        yield


def test_a_task_runs_to_its_end_and_on_done_gets_the_result():
    r = Reactor()
    done = Event()
    ended = []

    def work(n):
        total = 0
        for i in range(n):
            total += i
            yield
        return total

    task = r.start_task(work(10000), on_done=lambda t: (ended.append(t), done.set()))
    runner = run_in_greenlet(r)
    assert done.wait(5)
    assert ended == [task]
    assert task.done and not task.cancelled and task.error is None
    assert task.result == sum(range(10000))
    stop(r, runner)


def test_the_loop_keeps_serving_sockets_and_timers_while_a_task_never_ends():
    r = Reactor()
    counts = {}
    r.start_task(forever(counts, "steps", pause=0.0002))  # 0.2 ms a step, never yields for good
    ticks = []
    r.call_every(0.005, lambda: ticks.append(time.monotonic()))
    push = context().socket(zmq.PUSH, socket_class=Socket)
    pull = context().socket(zmq.PULL, socket_class=Socket)
    push.linger = pull.linger = 0
    pull.bind("tcp://127.0.0.1:*")
    push.connect(pull.last_endpoint)
    got = []
    arrived = Event()
    r.add_reader(pull, lambda frames: (got.append(frames[0]), arrived.set()))
    runner = run_in_greenlet(r)
    latencies = []
    for i in range(20):
        arrived.clear()
        sent = time.monotonic()
        push.send(b"%d" % i)
        assert arrived.wait(5), "the reader starved behind the task"
        latencies.append(time.monotonic() - sent)
    deadline = time.monotonic() + 5
    while len(ticks) < 5 and time.monotonic() < deadline:
        gevent.sleep(0.005)
    assert len(ticks) >= 5, "timers starved behind the task"
    assert got == [b"%d" % i for i in range(20)]
    assert counts["steps"] > 20
    # a round is ~1 ms of task work: far below this, even on a loaded machine
    assert sorted(latencies)[len(latencies) // 2] < 0.05
    stop(r, runner)
    push.close(); pull.close()


def test_tasks_take_turns_and_each_progresses():
    r = Reactor()
    counts = {}
    for key in range(50):
        r.start_task(forever(counts, key, pause=0.0001))
    runner = run_in_greenlet(r)
    deadline = time.monotonic() + 5
    while len(counts) < 50 and time.monotonic() < deadline:
        gevent.sleep(0.01)
    assert sorted(counts) == list(range(50)), "some tasks never got a step"
    stop(r, runner)


def test_cancel_closes_the_generator_and_reports_once():
    r = Reactor()
    closed = []
    ended = []

    def work():
        try:
            while True:
                yield
        finally:
            closed.append(True)

    task = r.start_task(work(), on_done=ended.append)
    runner = run_in_greenlet(r)
    gevent.sleep(0)  # let it step
    assert task.cancel() is True
    assert task.done and task.cancelled and closed == [True] and ended == [task]
    assert task.cancel() is False
    assert ended == [task]
    stop(r, runner)


def test_a_task_may_cancel_itself_inside_its_step():
    r = Reactor()
    closed = Event()
    ended = []
    box = []

    def work():
        try:
            yield
            box[0].cancel()
            yield  # never resumed: the reactor closes it after this step
            raise AssertionError("stepped after cancel")
        finally:
            closed.set()

    box.append(r.start_task(work(), on_done=ended.append))
    runner = run_in_greenlet(r)
    assert closed.wait(5)
    assert box[0].cancelled and ended == box
    stop(r, runner)


def test_an_error_goes_to_on_done_and_the_loop_lives_on():
    r = Reactor()
    done = Event()
    ended = []

    def work():
        yield
        raise ValueError("bad step")

    r.start_task(work(), on_done=lambda t: (ended.append(t), done.set()))
    fired = Event()
    runner = run_in_greenlet(r)
    assert done.wait(5)
    assert isinstance(ended[0].error, ValueError) and ended[0].result is None
    r.call_later(0, fired.set)
    assert fired.wait(5), "the reactor stopped after a task error handled by on_done"
    stop(r, runner)


def test_an_error_without_on_done_stops_the_reactor():
    r = Reactor()

    def work():
        yield
        raise ValueError("task bug")

    task = r.start_task(work())
    with pytest.raises(ValueError, match="task bug"):
        run_in_greenlet(r).get(timeout=5)
    assert task.done and isinstance(task.error, ValueError)
    r.close()


def test_a_paused_task_is_not_stepped_and_lets_the_reactor_park():
    r = Reactor()
    counts = {}
    task = r.start_task(forever(counts, "steps"))
    task.pause()
    runner = run_in_greenlet(r)
    cpu = time.thread_time()
    gevent.sleep(0.2)  # a measuring window, not synchronisation
    assert time.thread_time() - cpu < 0.1, "the reactor spun with only a paused task"
    assert counts == {}
    task.resume()
    deadline = time.monotonic() + 5
    while not counts and time.monotonic() < deadline:
        gevent.sleep(0.001)
    assert counts["steps"] > 0
    task.cancel()
    cpu = time.thread_time()
    gevent.sleep(0.2)
    assert time.thread_time() - cpu < 0.1, "the reactor spun after its task ended"
    stop(r, runner)


def test_tasks_may_start_tasks():
    r = Reactor()
    done = Event()
    results = []

    def child(i):
        yield
        return i

    def parent():
        for i in range(100):
            r.start_task(child(i), on_done=lambda t: (results.append(t.result), len(results) == 100 and done.set()))
            yield

    r.start_task(parent())
    runner = run_in_greenlet(r)
    assert done.wait(5)
    assert sorted(results) == list(range(100))
    stop(r, runner)


def test_start_task_wants_an_iterator():
    r = Reactor()
    with pytest.raises(TypeError, match="generator"):
        r.start_task(lambda: None)
    r.close()


def test_close_closes_unfinished_tasks():
    r = Reactor()
    closed = []

    def work():
        try:
            while True:
                yield
        finally:
            closed.append(True)

    task = r.start_task(work())
    runner = run_in_greenlet(r)
    gevent.sleep(0)
    stop(r, runner)
    assert closed == [True] and task.done


class Streamer(Actor):
    """Runs a never-ending task; PING -> "PONG" must still be answered."""

    def setup(self):
        self.steps = 0
        self.start_task(self.work())

    def work(self):
        while True:
            self.steps += 1
            busy_until = time.perf_counter() + 0.0001
            while time.perf_counter() < busy_until:
                pass
            yield

    @command(reply=True)
    def ping(self):
        return self.steps

    @command
    def fail(self):
        def bad():
            yield
            raise RuntimeError("task bug")
        self.start_task(bad())


def test_actor_pipe_flows_and_term_is_prompt_during_an_endless_task():
    actor = Streamer()
    steps = [actor.call("PING", timeout=5) for _ in range(20)]
    assert steps == sorted(steps) and steps[-1] > steps[0]
    started = time.monotonic()
    actor.destroy()
    assert time.monotonic() - started < 0.1
    assert not actor.alive


def test_actor_dies_of_a_task_error_without_on_done():
    actor = Streamer()
    actor.send("FAIL")
    event = None
    for event in actor.events(timeout=5):
        if event.name == "$DIED":
            break
    assert event is not None and event.name == "$DIED" and "task bug" in event.args[0]
    with pytest.raises(ActorDied):
        actor.call("PING", timeout=5)
    actor.destroy()
