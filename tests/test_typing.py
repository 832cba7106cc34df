"""The public API is typed (issue #9): every public function and method of the
annotated modules has annotations for all its parameters and its return, and
mypy finds no error in them (config: the ``[mypy]`` section of setup.cfg)."""
import importlib
import inspect
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: the modules whose public API is annotated (folder-relative, as in the worktree)
MODULES = [
    "actors/actor.py", "actors/reactor.py", "actors/task.py", "actors/sockets.py", "actors/pipe.py",
    "actors/events.py", "actors/outbox.py", "actors/router.py", "actors/heartbeat.py",
    "actors/beacon.py", "actors/auth.py", "actors/monitor.py",
    "actors/supervisor.py", "actors/names.py", "actors/testkit.py",
    "actors/journal/writer.py", "actors/journal/reader.py", "actors/journal/format.py", "actors/journal/files.py",
    "actors/group_commit.py", "actors/errors.py", "actors/values.py",
    "patterns/majordomo/broker.py", "patterns/majordomo/client.py", "patterns/majordomo/worker.py",
    "patterns/harmony/node.py",
    "patterns/scatter/scatter.py", "patterns/scatter/gather.py", "patterns/scatter/safesocket.py",
    "patterns/zeps/broker.py", "patterns/zeps/client.py",
    "patterns/clone/server.py", "patterns/clone/client.py",
]

#: dunder methods that are part of a class's public face
DUNDERS = {"__init__", "__call__", "__enter__", "__exit__", "__iter__", "__next__"}


def _module_name(path):
    return "zactors." + path[:-3].replace("/", ".")


def _functions(module):
    """(qualified name, function) for every public function and method of ``module``."""
    for name in getattr(module, "__all__", ()):
        obj = getattr(module, name)
        if getattr(obj, "__module__", None) != module.__name__:
            continue  # re-exported: checked where it is defined
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if attr.startswith("_") and attr not in DUNDERS:
                    continue
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                elif isinstance(value, property):
                    value = value.fget
                if inspect.isfunction(value) and value.__module__ == module.__name__:
                    yield "%s.%s" % (name, attr), value


def _missing(func):
    annotations = func.__annotations__
    params = list(inspect.signature(func).parameters.values())
    missing = [p.name for i, p in enumerate(params)
               if p.name not in annotations and not (i == 0 and p.name in ("self", "cls"))]
    if "return" not in annotations:
        missing.append("return")
    return missing


@pytest.mark.parametrize("path", MODULES)
def test_public_api_is_annotated(path):
    module = importlib.import_module(_module_name(path))
    found = list(_functions(module))
    assert found, "%s exports no function or class of its own" % path
    unannotated = {name: missing for name, func in found if (missing := _missing(func))}
    assert not unannotated, "unannotated in %s: %s" % (path, unannotated)


def test_coverage_check_catches_a_missing_annotation():
    def typed(a: int, *args: int, b: str = "", **kw: object) -> None: ...

    def untyped(a, b: int): ...

    assert _missing(typed) == []
    assert _missing(untyped) == ["a", "return"]


def test_mypy_is_clean(tmp_path):
    pytest.importorskip("mypy")
    # mypy cannot follow the editable install's import hook: give it the
    # package as it installs, zactors/<folder> -> the worktree's folder.
    package = tmp_path / "src" / "zactors"
    package.mkdir(parents=True)
    for folder in ("actors", "patterns", "apps"):
        (package / folder).symlink_to(os.path.join(ROOT, folder))
    modules = [arg for path in MODULES for arg in ("-m", _module_name(path))]
    env = dict(os.environ, MYPYPATH=str(tmp_path / "src"))
    run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", os.path.join(ROOT, "setup.cfg"),
                          "--cache-dir", str(tmp_path / "cache"), *modules],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stdout + run.stderr
