"""The installed distribution puts one top-level name, ``zactors``, into site-packages."""
import site
import sysconfig
from importlib.metadata import distributions

import pytest

pytestmark = pytest.mark.timeout(30)


def test_no_generic_top_level_package_is_installed():
    # the installed copy, not the zactors.egg-info an editable build leaves in the work tree
    where = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    installed = [d for d in distributions(path=where) if d.metadata["Name"] == "zactors"]
    assert installed, "zactors is not installed in %s" % where
    files = installed[0].files or []
    tops = {f.parts[0] for f in files if f.parts and not f.parts[0].startswith("..")}
    assert not tops & {"actors", "patterns", "apps", "tests", "benchmarks"}, sorted(tops)


def test_packages_import_under_the_zactors_namespace():
    import zactors.actors
    import zactors.apps.cli
    import zactors.patterns.majordomo

    assert zactors.actors.Actor.__module__ == "zactors.actors.actor"
    assert callable(zactors.apps.cli.main)


def test_the_dashboards_static_files_are_installed():
    from importlib.resources import files

    static = files("zactors.apps.dashboard") / "static"
    for name in ("index.html", "app.js", "style.css"):
        assert (static / name).is_file(), "%s is not installed with the package" % name


def test_the_package_has_a_version_and_the_kernel_exports_only_its_api():
    import zactors
    import zactors.actors
    from importlib.metadata import version

    assert zactors.__version__ == version("zactors")
    assert not hasattr(zactors.actors, "importlib")
    assert set(zactors.actors.__all__) <= set(dir(zactors.actors))
    assert "importlib" not in dir(zactors.actors)


def test_stats_of_a_fresh_actor_shows_its_counters_at_zero():
    from zactors.actors import Actor

    actor = Actor()
    try:
        assert actor.call("$STATS", timeout=10) == {"rejected": 0, "failed": 0, "events_dropped": 0,
                                                     "emit_waits": 0}
    finally:
        actor.destroy()


def test_the_two_brokers_have_names_that_cannot_be_confused():
    """Issue 21: Majordomo's and ZEPS's ``Broker`` in one import."""
    from zactors.patterns.majordomo import MajordomoBroker
    from zactors.patterns.majordomo.broker import Broker as Mdp
    from zactors.patterns.zeps import ZepsBroker
    from zactors.patterns.zeps.broker import Broker as Zeps
    assert MajordomoBroker is Mdp and ZepsBroker is Zeps and MajordomoBroker is not ZepsBroker
