"""The soaks' short passes: each runs a soak as a child process for ~25 s with a fixed seed.

Run them alone with ``python -m pytest -q tests/soak`` (or ``-m soak``).
"""


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: a short pass of a soak (soak/); tens of seconds, child processes")


def pytest_collection_modifyitems(config, items):
    """Not in the default run (they take a minute and load the machine): only when named, as
    ``pytest tests/soak`` (or a file or test in it) or with ``-m soak``."""
    import pathlib

    import pytest

    here = pathlib.Path(__file__).resolve().parent
    if "soak" in (config.getoption("markexpr") or ""):
        return
    for arg in config.args:
        path = pathlib.Path(str(arg).split("::")[0]).resolve()
        if path == here or here in path.parents:
            return
    skip = pytest.mark.skip(reason="a soak's short pass: run it with `pytest tests/soak` or `-m soak`")
    for item in items:
        if here in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)
