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


def _block(marker):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    found = [b for b in blocks if marker in b]
    assert found, "README lost its %s example" % marker
    return found[0]


def test_majordomo_example_runs():
    namespace = {}
    exec(compile(_block("patterns.majordomo") + "\nreplies = client.request(b'count', b'3', timeout=10)\n",
                 "README.md", "exec"), namespace)
    try:
        assert namespace["replies"] == [[b"0"], [b"1"], [b"2"], [b"done"]]
    finally:
        namespace["client"].close()
        namespace["worker"].destroy()
        namespace["broker"].destroy()


def test_scatter_example_runs():
    code = _block("patterns.scatter").replace("gather.recv(timeout=5)", "got = gather.recv(timeout=5)")
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    try:
        assert namespace["got"] == b"task"
    finally:
        namespace["scatter"].close()
        namespace["gather"].close()
