"""Supervisor: an actor that starts children and restarts them when they end (Erlang/OTP style).

Build a tree from child specs::

    tree = Supervisor([
        ChildSpec("db", Journaled),                         # permanent: always restarted
        ChildSpec("api", lambda: Api(port), restart=TRANSIENT, shutdown=2.0, register=True),
        ChildSpec("jobs", lambda: Supervisor([...], strategy=ONE_FOR_ALL)),   # a subtree
    ], strategy=REST_FOR_ONE, intensity=3, period=5.0, backoff=0.1)
    tree.proxy("api").call("PING")      # the incarnation running now (see zactors.actors.names)
    tree.destroy()                      # children stop in reverse start order

Children start in spec order, synchronously, in the supervisor's greenlet;
constructing the supervisor returns once all have started (a child that
fails to start stops those started before it, and the error is raised in
the parent).  A child's ``$DIED`` (abnormal) or ``$EXIT`` (normal) reaches
the supervisor through :meth:`Actor.link <zactors.actors.Actor.link>`:
the hub hands it over with ``post``, so the supervisor's loop is never
held by its children's events.  A child's other events stay in its own
queues, for whoever uses the child (``proxy.actor.recv_event()``,
``proxy.subscribe()``), as for any actor.

Restart policy, per child: ``permanent`` (always restarted), ``transient``
(restarted after ``$DIED`` only), ``temporary`` (never; forgotten when it
ends).  Strategy, for the supervisor: ``one_for_one`` restarts the child
that ended; ``one_for_all`` stops all the others (reverse start order) and
restarts everyone; ``rest_for_one`` does so for the children started after
it.  A temporary child stopped by a strategy is not restarted.

Intensity: more than ``intensity`` restarts within ``period`` seconds and
the supervisor gives up: it stops its children and dies with
:class:`RestartIntensityExceeded`, so its own ``$DIED`` carries the reason
and its parent (a supervisor too, or the application) decides.  A failed
start of a child counts as one more restart.  Backoff: with ``backoff``
> 0 the k-th restart within the window waits ``backoff * 2**(k-1)``
seconds (at most ``backoff_max``); meanwhile the child's name is held and
proxy calls wait for it.

Shutdown (``destroy``, ``$TERM``, or giving up) stops the children in
reverse start order, each within its spec's ``shutdown`` seconds (then it
is killed); ``shutdown=None`` uses the child's own ``term_timeout``, which
for a supervisor covers all of its children.

State across restarts is the child's business: a restart is a fresh
object from ``factory()``, so what must survive lives outside it, where
the factory points the new incarnation: a journal directory it recovers
from in ``setup`` (as the ZEPS broker and ``CloneServer(persist=DIR)``
do), and the endpoints it binds (a factory that binds ``tcp://host:*``
the first time should pass the endpoint it got to the next incarnation,
which rebinds it through :meth:`Actor.bind <zactors.actors.Actor.bind>`).

Commands (each replies): ``CHILDREN`` (a list of ``{name, running,
starting, restarts, restart, last_reason}``; :meth:`report` reads the same
without the pipe); ``STOP_CHILD name`` (stop it and leave
it stopped: OTP's ``terminate_child``); ``RESTART_CHILD name`` (start a
stopped child again).  :meth:`start_child` adds a child to a running
supervisor (OTP's ``start_child``): a child that must reach the tree
itself (the dashboard of ``zactors up`` shows its own supervisor) is added
once the tree exists.  Events (dropped rather
than waited for when nobody reads them: the tree must not stall):
``CHILD_STARTED name restarts``, ``CHILD_DIED name reason``,
``CHILD_EXITED name``.  ``$STATS`` counts ``restarts``, ``child_deaths``,
``child_exits`` and ``start_failures``.

What blocks: starting and stopping children runs in the supervisor's
greenlet (a child's ``setup``, or its shutdown timeout), during which the
supervisor does not serve its pipe.  Parent side (``proxy``, ``child``,
calls): the supervisor's thread only, like any actor.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import gevent
from gevent.event import AsyncResult

from .actor import Actor, command
from .errors import ActorError, ActorTimeout
from .events import DROP
from .names import Names, Proxy, registry
from .pipe import DIED, EXIT, Event

__all__ = ["Supervisor", "ChildSpec", "RestartIntensityExceeded", "PERMANENT", "TRANSIENT", "TEMPORARY",
           "ONE_FOR_ONE", "ONE_FOR_ALL", "REST_FOR_ONE"]

log = logging.getLogger(__name__)

PERMANENT, TRANSIENT, TEMPORARY = "permanent", "transient", "temporary"
ONE_FOR_ONE, ONE_FOR_ALL, REST_FOR_ONE = "one_for_one", "one_for_all", "rest_for_one"
_POLICIES = (PERMANENT, TRANSIENT, TEMPORARY)
_STRATEGIES = (ONE_FOR_ONE, ONE_FOR_ALL, REST_FOR_ONE)


class RestartIntensityExceeded(ActorError):
    """A supervisor saw more restarts in its period than its intensity allows, and gave up."""


@dataclass(frozen=True)
class ChildSpec:
    """How to start one child and when to restart it.

    ``factory()`` returns a started :class:`~zactors.actors.Actor` (an actor
    class, a lambda, a function); it runs in the supervisor's greenlet.
    ``name`` is unique among the supervisor's children; ``register=True``
    also holds it in the process's :data:`~zactors.actors.names.registry`.
    """

    name: str
    factory: Callable[[], Actor]
    restart: str = PERMANENT
    shutdown: float | None = None
    register: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("a child spec needs a name, not %r" % (self.name,))
        if not callable(self.factory):
            raise TypeError("child %r: factory must be callable, not %r" % (self.name, self.factory))
        if self.restart not in _POLICIES:
            raise ValueError("child %r: restart must be one of %s, not %r"
                             % (self.name, ", ".join(_POLICIES), self.restart))
        if self.shutdown is not None and not self.shutdown >= 0:
            raise ValueError("child %r: shutdown must be seconds >= 0 or None" % self.name)


class _Child:
    """A spec and its running incarnation (supervisor greenlet only)."""

    __slots__ = ("spec", "actor", "restarts", "last_reason", "pending", "starting")

    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.actor: Actor | None = None  # the running incarnation; None while stopped or restarting
        self.restarts = 0
        self.last_reason: str | None = None
        self.pending: object | None = None  # the token of the scheduled restart that will start it
        self.starting = False  # its factory is running now


def _shutdown_of(spec: ChildSpec, actor: Actor) -> float:
    return spec.shutdown if spec.shutdown is not None else actor.term_timeout


class Supervisor(Actor):
    """Starts children from :class:`ChildSpec` s and restarts them.  See the module docstring."""

    events_policy = DROP

    def __init__(self, children: Sequence[ChildSpec], strategy: str = ONE_FOR_ONE, intensity: int = 3,
                 period: float = 5.0, backoff: float = 0.0, backoff_max: float = 10.0,
                 name: str | None = None) -> None:
        if strategy not in _STRATEGIES:
            raise ValueError("strategy must be one of %s, not %r" % (", ".join(_STRATEGIES), strategy))
        if type(intensity) is not int or intensity < 0 or not period > 0:
            raise ValueError("intensity must be an int >= 0 and period > 0 seconds")
        if not backoff >= 0 or not backoff_max >= backoff:
            raise ValueError("backoff must be >= 0 and backoff_max >= backoff")
        seen = set()
        for spec in children:
            if not isinstance(spec, ChildSpec):
                raise TypeError("children must be ChildSpec, not %r" % (spec,))
            if spec.name in seen:
                raise ValueError("two children are named %r" % spec.name)
            seen.add(spec.name)
        if name is not None:
            self.name = name
        self.strategy = strategy
        self.intensity = intensity
        self.period = period
        self.backoff = backoff
        self.backoff_max = backoff_max
        #: this supervisor's children by name (their current incarnations)
        self.names = Names()
        self._children = [_Child(spec) for spec in children]
        self._restart_times: deque[float] = deque()
        self._registered: set[str] = set()

    # -- parent side ----------------------------------------------------------
    def proxy(self, name: str, wait: float | None = None) -> Proxy:
        """A :class:`~zactors.actors.names.Proxy` to child ``name``: calls reach its running incarnation."""
        return self.names.proxy(name) if wait is None else self.names.proxy(name, wait)

    def child(self, name: str) -> Actor | None:
        """Child ``name``'s running incarnation, or ``None``.  Never blocks."""
        return self.names.whereis(name)

    def report(self) -> dict[str, Any]:
        """``{"children": CHILDREN's answer, "counters": $STATS' answer}``, read without the pipe.

        Never blocks, so it answers even while the supervisor's greenlet is
        busy starting a child (which may be the caller: a dashboard showing
        its own tree).  The supervisor's thread only.
        """
        return {"children": self._describe(), "counters": dict(self.stats)}

    def start_child(self, spec: ChildSpec, timeout: float | None = None) -> Actor:
        """Add ``spec`` as the last child (stopped first, restarted by the strategy) and start it.

        Returns its first incarnation; raises what its factory raised (the
        child is then not added), ``ValueError`` for a name taken, or
        :class:`~zactors.actors.ActorTimeout`.  Blocks the calling greenlet
        until the child started (``timeout``: default ``ready_timeout``).
        The supervisor's thread only.
        """
        if not isinstance(spec, ChildSpec):
            raise TypeError("children must be ChildSpec, not %r" % (spec,))
        self._check_thread()
        result: AsyncResult = AsyncResult()
        if gevent.getcurrent() is self._greenlet:  # from a handler of this supervisor: its loop is here
            self._add_child(spec, result)
        else:
            self.post(self._add_child, spec, result)
        try:
            return result.get(timeout=self.ready_timeout if timeout is None else timeout)
        except gevent.Timeout:
            raise ActorTimeout("%s: child %r did not start in time" % (self.name, spec.name)) from None

    # -- actor side -------------------------------------------------------------
    def setup(self) -> None:
        for child in self._children:
            self._start_child(child)

    def teardown(self) -> None:
        """Stop the children in reverse start order, each within its shutdown timeout."""
        for child in reversed(self._children):
            child.pending = None
            if child.actor is not None:
                self._stop(child)
        for name in self._registered:
            registry.unregister(name)
        self._registered.clear()
        for child in self._children:
            self.names.unregister(child.spec.name)

    @command(reply=True)
    def children(self) -> list[dict[str, Any]]:
        """CHILDREN: each child's name, whether it runs or is starting, its restarts, policy and last death reason."""
        return self._describe()

    def _describe(self) -> list[dict[str, Any]]:
        return [{"name": c.spec.name, "running": c.actor is not None, "starting": c.starting,
                 "restarts": c.restarts, "restart": c.spec.restart, "last_reason": c.last_reason}
                for c in self._children]

    def _add_child(self, spec: ChildSpec, result: AsyncResult) -> None:
        if any(c.spec.name == spec.name for c in self._children):
            result.set_exception(ValueError("%s has a child named %r already" % (self.name, spec.name)))
            return
        child = _Child(spec)
        self._children.append(child)
        try:
            self._start_child(child)
        except Exception as exc:
            self._children.remove(child)
            self.names.unregister(spec.name)
            result.set_exception(exc)
            return
        result.set(child.actor)

    @command(reply=True)
    def stop_child(self, name: str) -> None:
        """Stop child ``name`` within its shutdown timeout, and leave it stopped (its name is free)."""
        child = self._find(name)
        child.pending = None
        if child.actor is not None:
            self._stop(child)
        child.last_reason = "stopped"
        self._forget(child)

    @command(reply=True)
    def restart_child(self, name: str) -> None:
        """Start child ``name`` again after ``STOP_CHILD`` (or a normal exit); counts as no restart."""
        child = self._find(name)
        if child.actor is not None or child.pending is not None:
            raise ValueError("child %r is running" % name)
        self._start_child(child)

    def _find(self, name: str) -> _Child:
        for child in self._children:
            if child.spec.name == name:
                return child
        raise KeyError("no child %r" % name)

    def _start_child(self, child: _Child) -> None:
        spec = child.spec
        child.starting = True
        try:
            actor = spec.factory()
        finally:
            child.starting = False
        if not isinstance(actor, Actor):
            raise TypeError("child %r: factory returned %r, not an Actor" % (spec.name, actor))
        child.actor = actor
        self._hold(spec, actor)
        self._update_term_timeout()
        actor.link(partial(self._on_child_event, child, actor))
        self.emit("CHILD_STARTED", spec.name, child.restarts)

    def _hold(self, spec: ChildSpec, actor: Actor | None) -> None:
        """Register ``actor`` (None: restarting) under the child's name(s)."""
        self.names.register(spec.name, actor, replace=True)
        if spec.register:
            registry.register(spec.name, actor, replace=spec.name in self._registered)
            self._registered.add(spec.name)

    def _forget(self, child: _Child) -> None:
        name = child.spec.name
        self.names.unregister(name)
        if name in self._registered:
            self._registered.discard(name)
            registry.unregister(name)
        if child.spec.restart == TEMPORARY and child in self._children:
            self._children.remove(child)

    def _update_term_timeout(self) -> None:
        """Enough time for a parent's destroy to let every child stop within its own timeout."""
        self.term_timeout = 1.0 + sum(_shutdown_of(c.spec, c.actor) for c in self._children if c.actor is not None)

    def _stop(self, child: _Child) -> None:
        """Stop ``child``'s incarnation (if any) within its shutdown timeout."""
        actor, child.actor = child.actor, None  # its $EXIT is ours: _child_ended ignores it
        if actor is not None:
            actor.destroy(_shutdown_of(child.spec, actor))

    def _on_child_event(self, child: _Child, actor: Actor, event: Event) -> None:
        """In the hub: hand a child's end to the supervisor's loop (other events are not its business)."""
        if event.name == DIED or event.name == EXIT:
            self.post(self._child_ended, child, actor, event)

    def _child_ended(self, child: _Child, actor: Actor, event: Event) -> None:
        actor.destroy()  # the greenlet is gone: this closes the parent's end of its pipe
        if child.actor is not actor:
            return  # stopped by us, or an incarnation replaced already
        child.actor = None
        spec = child.spec
        abnormal = event.name == DIED
        reason = (event.args[0] if event.args else "unknown error") if abnormal else "exited"
        child.last_reason = reason
        if abnormal:
            self.stats["child_deaths"] += 1
            self.emit("CHILD_DIED", spec.name, reason)
        else:
            self.stats["child_exits"] += 1
            self.emit("CHILD_EXITED", spec.name)
        if spec.restart == TEMPORARY or (spec.restart == TRANSIENT and not abnormal):
            self._forget(child)
            return
        self._restart(child, reason)

    def _restart(self, child: _Child, reason: str) -> None:
        """Restart ``child`` by the strategy (raises RestartIntensityExceeded when that is too often)."""
        delay = self._count_restart(child.spec.name, reason)
        children = self._children
        if self.strategy == ONE_FOR_ONE:
            group = [child]
        elif self.strategy == ONE_FOR_ALL:
            group = list(children)
        else:
            group = children[children.index(child):]
        # only those running (or due to start) come back: a child stopped on purpose stays stopped
        group = [other for other in group
                 if other is child or other.actor is not None or other.pending is not None]
        for other in reversed(group):
            if other is not child and other.actor is not None:
                self._stop(other)
        token = object()
        restart = []
        for other in group:
            if other is child or other.spec.restart != TEMPORARY:
                other.pending = token
                self._hold(other.spec, None)
                restart.append(other)
            else:
                self._forget(other)
        if delay:
            self.call_later(delay, self._start_group, restart, token)
        else:
            self._start_group(restart, token)

    def _count_restart(self, name: str, reason: str) -> float:
        """Note one restart; the backoff delay before it.  Gives up past the intensity."""
        now = time.monotonic()
        times = self._restart_times
        times.append(now)
        while times[0] < now - self.period:
            times.popleft()
        if len(times) > self.intensity:
            raise RestartIntensityExceeded(
                "%s gave up: more than %d restarts in %gs; the last, of %r, after: %s"
                % (self.name, self.intensity, self.period, name, reason))
        if not self.backoff:
            return 0.0
        return min(self.backoff * 2 ** (len(times) - 1), self.backoff_max)

    def _start_group(self, group: list[_Child], token: object) -> None:
        for child in group:
            if child.pending is not token or child not in self._children:
                continue  # a later restart took it over, or it was forgotten
            child.pending = None
            child.restarts += 1
            self.stats["restarts"] += 1
            try:
                self._start_child(child)
            except Exception as exc:
                self.stats["start_failures"] += 1
                reason = "restart failed: %s: %s" % (type(exc).__name__, exc)
                log.warning("%s: child %r %s", self.name, child.spec.name, reason)
                child.last_reason = reason
                self._restart(child, reason)
                return  # _restart took over the rest of this group if the strategy covers it
