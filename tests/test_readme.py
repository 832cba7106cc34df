"""The README's actor example runs as written (on an ephemeral port)."""
import pathlib
import re

import pytest

pytestmark = pytest.mark.timeout(30)

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_actor_example_runs():
    text = README.read_text()
    block = re.search(r"```python\n(import zmq\n.*?)```", text, re.S)
    assert block, "README lost its actor example"
    code = block.group(1).replace("tcp://127.0.0.1:5555", "tcp://127.0.0.1:*").replace("timeout=5", "timeout=0.1")
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["event"] is None  # nothing was sent: no BIG event


def test_quick_start_has_the_two_commands():
    quick = README.read_text().split("## Quick start", 1)[1].split("##", 1)[0]
    commands = re.search(r"```sh\n(.*?)```", quick, re.S).group(1).strip().splitlines()
    assert commands == ["pip install . && zactors demo", "pip install '.[test]' && python -m pytest"]
