"""The supervision example of docs/actors.md runs as written: a crashed actor is restarted, reached by name, and its
state recovered from its file."""
import os
import pathlib
import re
import shutil

import pytest

from zactors.actors.names import registry

pytestmark = pytest.mark.timeout(30)

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "actors.md"


def supervision_example():
    section = PAGE.read_text().split("\n## Supervision", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "docs/actors.md's Supervision section lost its example"
    return block.group(1)


def test_supervision_example_runs():
    namespace = {}
    try:
        exec(compile(supervision_example(), "docs/actors.md", "exec"), namespace)
    finally:
        if "tree" in namespace:
            namespace["tree"].destroy()  # idempotent; a failed run must not leave "counter" registered
        if "path" in namespace:
            shutil.rmtree(os.path.dirname(namespace["path"]), ignore_errors=True)
    assert namespace["first"] == 2
    died, started = namespace["died"], namespace["started"]
    assert died.name == "CHILD_DIED" and died.args[0] == "counter" and "Crash: crashed on purpose" in died.args[1]
    assert (started.name, started.args) == ("CHILD_STARTED", ("counter", 1))
    assert namespace["then"] == 5, "the restarted incarnation recovered the total from its file"
    assert not namespace["tree"].alive and "counter" not in registry
