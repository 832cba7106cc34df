"""A call to an actor that is gone raises at once, whatever ended it (leftovers item 5).

Its end of the pipe is closed, so a send to it never finds room: a call made before the parent had
read the actor's last words (``$EXIT``/``$DIED``) parked in the pipe's send for ever.  Each case runs
under a deadline."""
import gevent
import pytest

from tests.conftest import wait_for
from zactors.actors import Actor, command
from zactors.actors.errors import ActorDied, ActorError, ActorExited

pytestmark = pytest.mark.timeout(30)

DEADLINE = 5.0


class Boom(BaseException):
    """Not an Exception: what a KeyboardInterrupt-like error looks like to the actor."""


class Target(Actor):
    @command(reply=True)
    def ping(self):
        return "pong"

    @command(reply=True)
    def boom(self, kind):
        raise {"boom": Boom, "exit": SystemExit}[kind]()

    @command
    def pause(self):
        self.pause_commands()


def call_gone(actor):
    """``actor.call("PING")``'s error, which must come within DEADLINE."""
    with gevent.Timeout(DEADLINE, AssertionError("a call to the gone actor did not return")):
        with pytest.raises(ActorError) as raised:
            actor.call("PING")
    return raised.value


@pytest.mark.parametrize("exc, expected", [(gevent.GreenletExit, ActorExited), (Boom, ActorDied)])
def test_a_call_to_an_actor_whose_greenlet_was_killed_raises_at_once(exc, expected):
    actor = Target()
    try:
        actor._greenlet.kill(exc, block=True)   # dead, its last words not read yet
        assert isinstance(call_gone(actor), expected)
        assert isinstance(call_gone(actor), expected)
    finally:
        actor.destroy()


def test_a_handler_raising_a_base_exception_ends_the_actor_as_died():
    actor = Target()
    try:
        with gevent.Timeout(DEADLINE, AssertionError("the call that killed the actor did not return")):
            with pytest.raises(ActorDied, match="Boom"):
                actor.call("BOOM", "boom")
        assert isinstance(call_gone(actor), ActorDied)
    finally:
        actor.destroy()


def test_an_actor_ended_by_system_exit_is_died_for_its_callers():
    actor = Target()
    try:
        with gevent.Timeout(DEADLINE, AssertionError("the call that ended the actor did not return")):
            with pytest.raises((SystemExit, ActorDied)):     # (gevent hands SystemExit to the main greenlet)
                actor.call("BOOM", "exit")
        assert isinstance(call_gone(actor), ActorDied)
    finally:
        actor.destroy()


def test_a_sender_parked_on_a_full_pipe_raises_when_the_actor_goes():
    actor = Target()
    try:
        actor.send("PAUSE")
        parked = gevent.spawn(lambda: [actor.send("PING") for _ in range(100000)])
        wait_for(lambda: not actor._pipe.commands._room.is_set(), DEADLINE, "the pipe to fill (the sender parks)")
        actor._greenlet.kill(Boom, block=True)
        with gevent.Timeout(DEADLINE, AssertionError("the parked sender did not return")):
            with pytest.raises(ActorDied):
                parked.get()
    finally:
        actor.destroy()
