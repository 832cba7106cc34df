"""The installed distribution puts one top-level name, ``zactors``, into site-packages."""
from importlib.metadata import distribution

import pytest

pytestmark = pytest.mark.timeout(30)


def test_no_generic_top_level_package_is_installed():
    files = distribution("zactors").files or []
    tops = {f.parts[0] for f in files if f.parts and not f.parts[0].startswith("..")}
    assert not tops & {"actors", "patterns", "apps", "tests", "benchmarks"}, sorted(tops)


def test_packages_import_under_the_zactors_namespace():
    import zactors.actors
    import zactors.apps.cli
    import zactors.patterns.majordomo

    assert zactors.actors.Actor.__module__ == "zactors.actors.actor"
    assert callable(zactors.apps.cli.main)
