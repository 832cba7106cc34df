"""An actor handle used from another OS thread: one clear error, not gevent internals; post() works."""
import concurrent.futures
import threading

import gevent.event
import pytest

from zactors.actors import Actor, ActorError, WrongThread, command

pytestmark = pytest.mark.timeout(30)


class Adder(Actor):
    """ADD n -> n + 1."""

    @command(reply=True)
    def add(self, n):
        return n + 1


@pytest.fixture
def adder():
    actor = Adder()
    yield actor
    actor.destroy()


def _in_thread(func, *args):
    """Run func(*args) in a plain thread; its result or exception, and the thread's name."""
    box = {}

    def run():
        try:
            box["result"] = func(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, name="plain-worker")
    thread.start()
    thread.join(20)
    assert not thread.is_alive()
    return box


def _assert_one_line(error, actor):
    assert isinstance(error, WrongThread) and isinstance(error, ActorError)
    text = str(error)
    assert "\n" not in text
    assert repr(threading.main_thread().name) in text   # the owning thread
    assert "post(" in text and "run_in_thread" in text   # what to do instead


@pytest.mark.parametrize("use", [
    lambda actor: actor.call("ADD", 1, timeout=2),
    lambda actor: actor.send("ADD", 1),
    lambda actor: actor.recv_event(timeout=0.1),
    lambda actor: next(actor.events(timeout=0.1), None),
    lambda actor: actor.subscribe(),
    lambda actor: actor.destroy(),
], ids=["call", "send", "recv_event", "events", "subscribe", "destroy"])
def test_a_plain_thread_gets_a_one_line_error_naming_the_owner(adder, use):
    box = _in_thread(use, adder)
    assert "result" not in box
    _assert_one_line(box["error"], adder)
    assert "'plain-worker'" in str(box["error"])
    assert adder.call("ADD", 41) == 42          # the actor is untouched


def test_a_thread_pool_gets_the_same_error(adder):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(adder.call, "ADD", n, timeout=2) for n in range(4)]
        errors = [future.exception(20) for future in futures]
    for error in errors:
        _assert_one_line(error, adder)
    assert adder.call("ADD", 1) == 2


def test_post_from_another_thread_runs_in_the_actor_loop(adder):
    seen = gevent.event.AsyncResult()
    box = _in_thread(adder.post, lambda: seen.set(threading.current_thread().name))
    assert "error" not in box
    assert seen.get(timeout=10) == threading.main_thread().name
