"""The documentation: the site builds with warnings as errors, and every code example runs.

Every fenced block of README.md and docs/ is either run here as written, or carries a marker on the
line before it saying who runs it or why nobody can:

    <!-- example: tested by tests/test_readme.py::test_majordomo_example_runs -->
    <!-- example: not run: it serves until Ctrl-C -->

A block without a marker must run as written: Python in a fresh interpreter in an empty directory,
TOML through ``zactors up``'s config loader.  Shell blocks always need a marker (they start servers or
benchmarks).  A tutorial (``docs/tutorials/``) is one Python session: its blocks run in order, in one
interpreter, as a reader who types them one after another would.
"""
import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!-- example: (tested by (?P<test>\S+)|not run: (?P<reason>.+?)) -->")
FENCE = re.compile(r"^```(\S+)$")
#: the fence languages that are examples to run; others (abnf, text, directives) are not code
EXAMPLES = ("python", "toml", "sh", "bash", "console")


TUTORIALS = ROOT / "docs" / "tutorials"


def documents():
    return [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)


def _run_python(code, where, cwd):
    run = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=100)
    assert run.returncode == 0, "%s failed:\n%s" % (where, run.stderr[-3000:])


def blocks():
    """Yield ``(path, line, language, code, marker)`` for each fenced example (a language of EXAMPLES)."""
    for path in documents():
        lines = path.read_text().split("\n")
        i = 0
        while i < len(lines):
            fence = FENCE.match(lines[i])
            if fence:
                end = lines.index("```", i + 1)
                if fence.group(1) in EXAMPLES:
                    marker = MARKER.search(lines[i - 1]) if i else None
                    yield path, i + 1, fence.group(1), "\n".join(lines[i + 1:end]), marker
                i = end
            i += 1


BLOCKS = [b for b in blocks() if not (b[0].parent == TUTORIALS and b[2] == "python" and not b[4])]
SESSIONS = sorted(TUTORIALS.glob("*.md"))


def test_the_readme_stays_a_readme():
    # what it is, the Quick start (.ci/run runs it), what works with short figures, and where the docs are:
    # a guide to a part belongs in docs/ (issue 26: the README had grown to 1,141 lines)
    text = (ROOT / "README.md").read_text()
    sections = [line for line in text.split("\n") if line.startswith("## ")]
    assert sections == ["## Quick start", "## What works", "## Documentation"], sections
    assert len(text.split("\n")) < 150, "the README is a page, not a manual: move the detail into docs/"
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), "README links to %s, which is not there" % link


def test_the_documents_have_examples():
    assert len(BLOCKS) >= 10, [(p.name, line) for p, line, *_ in BLOCKS]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path, line, language, code, marker", BLOCKS,
                         ids=["%s:%d" % (b[0].relative_to(ROOT), b[1]) for b in BLOCKS])
def test_example(path, line, language, code, marker, tmp_path):
    where = "%s:%d" % (path.relative_to(ROOT), line)
    if marker and marker.group("reason"):
        assert len(marker.group("reason").strip()) > 10, "%s: say why it is not run" % where
        return
    if marker:
        test = marker.group("test")
        file, _, name = test.partition("::")
        source = (ROOT / file).read_text()
        assert not name or re.search(r"def %s\b" % re.escape(name), source), "%s: no test %s" % (where, test)
        return
    if language == "python":
        _run_python(code, where, tmp_path)
    elif language == "toml":
        from zactors.apps.up import load_config
        config = tmp_path / "node.toml"
        config.write_text(code)
        assert load_config(str(config)), where
    else:
        pytest.fail("%s: a %s block needs a marker: who runs it, or why it cannot run" % (where, language))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", SESSIONS, ids=[p.name for p in SESSIONS])
def test_tutorial_runs_as_one_session(page, tmp_path):
    steps = [(line, code) for path, line, language, code, marker in blocks()
             if path == page and language == "python" and not marker]
    assert len(steps) >= 3, "%s: a tutorial builds something step by step" % page.name
    # each step's first line says where it is, so a failure points at the step
    script = "\n".join("# -- %s:%d\n%s" % (page.name, line, code) for line, code in steps)
    _run_python(script, "tutorial %s" % page.relative_to(ROOT), tmp_path)


@pytest.mark.timeout(600)
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    missing = [m for m in ("sphinx", "myst_parser") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip("the docs extra is not installed (%s): pip install '.[docs]'" % ", ".join(missing))
    build = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                            str(ROOT / "docs"), str(tmp_path / "html")], capture_output=True, text=True,
                           timeout=580)
    assert build.returncode == 0, build.stderr[-5000:]
    assert (tmp_path / "html" / "api" / "zeps.html").exists()
    cli = (tmp_path / "html" / "cli.html").read_text()
    assert "zactors zeps broker" in cli and "--ack" in cli  # generated from the parsers
