"""The README's Quick start is what CI runs, and the examples of the guide pages it points to run as written
(docs/actors.md, docs/patterns/*.md; on ephemeral ports)."""
import pathlib
import re

import pytest

pytestmark = pytest.mark.timeout(30)

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
DOCS = README.parent / "docs"
ACTORS = DOCS / "actors.md"


def test_actor_example_runs():
    text = ACTORS.read_text()
    block = re.search(r"```python\n(import zmq\n.*?)```", text, re.S)
    assert block, "docs/actors.md lost its actor example"
    code = block.group(1)
    assert ":5555" not in code, "the example must not take the mdp broker's default port"
    code = code.replace("timeout=5", "timeout=0.1")
    namespace = {}
    exec(compile(code, "docs/actors.md", "exec"), namespace)
    assert namespace["event"] is None  # nothing was sent: no BIG event


def quick_start_commands():
    """The Quick start's commands, as .ci/run takes them."""
    quick = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```sh\n(.*?)```", quick, re.S).group(1).strip().splitlines()


def test_quick_start_works_with_a_system_python():
    # PEP 668 machines refuse `pip install` into the system Python, and have `python3` but no `python`:
    # each command makes and uses its own venv, through paths into it
    commands = quick_start_commands()
    assert commands == ["python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/zactors demo",
                        "python3 -m venv .venv && .venv/bin/pip install '.[test,spark]' && .venv/bin/python -m pytest"]
    for command in commands:
        for step in command.split(" && "):
            assert step.split()[0] in ("python3", ".venv/bin/pip", ".venv/bin/zactors", ".venv/bin/python"), step


def test_ci_runs_the_readme_commands():
    ci = (README.parent / ".ci" / "run").read_text()
    assert "## Quick start" in ci and "eval" in ci  # it takes them from README.md, not a copy


def _block(marker):
    """The first Python example of the pattern guides (docs/patterns/) that holds ``marker``."""
    blocks = [b for page in sorted((DOCS / "patterns").glob("*.md"))
              for b in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)]
    found = [b for b in blocks if marker in b]
    assert found, "docs/patterns lost its %s example" % marker
    return found[0]


def test_majordomo_example_runs():
    namespace = {}
    exec(compile(_block("patterns.majordomo") + "\nreplies = client.request(b'count', b'3', timeout=10)\n",
                 "docs/patterns", "exec"), namespace)
    try:
        assert namespace["replies"] == [[b"0"], [b"1"], [b"2"], [b"done"]]
    finally:
        namespace["client"].close()
        namespace["worker"].destroy()
        namespace["broker"].destroy()


def test_scatter_example_runs():
    code = _block("patterns.scatter").replace("gather.recv(timeout=5)", "got = gather.recv(timeout=5)")
    namespace = {}
    exec(compile(code, "docs/patterns", "exec"), namespace)
    try:
        assert namespace["got"] == b"task"
    finally:
        namespace["scatter"].close()
        namespace["gather"].close()


@pytest.mark.timeout(300)
def test_spark_example_says_our_error_in_one_line(tmp_path):
    # its batch part, as written, on an empty journal directory: the error (raised at .load()) is one line
    import subprocess
    import sys

    from tests.patterns.zeps.spark.conftest import spark_env
    env = spark_env()            # skips, with the reason, without pyspark or Java
    code = _block('format("zeps")').split("live = ")[0]
    assert "explain(exc)" in code and code.index("try:") < code.index(".load()"), "load() must be inside the try"
    code = code.replace('"/var/lib/zeps"', repr(str(tmp_path)))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "no stream 'readings' in journal directory %s\n" % tmp_path, result.stdout
