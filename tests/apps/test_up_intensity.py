"""``zactors up``'s restart intensity is configurable: ``[node] intensity``/``period`` in its TOML,
``--intensity``/``--period`` on its command line (the options win); wrong values are one-line usage errors."""
import pytest

from zactors.actors.testkit import Probe, crash
from zactors.apps.cli import build_parser
from zactors.apps.commands.up import config_from
from zactors.apps.up import DEFAULTS, ConfigError, Up, load_config, merge

from .cli_helpers import zactors

pytestmark = pytest.mark.timeout(60)

#: every part off: a check that failed to refuse would bind no default port
NOTHING = ("--no-mdp", "--no-zeps", "--no-clone", "--no-harmony", "--no-web")


def test_the_toml_and_the_options_set_the_trees_intensity(tmp_path):
    toml = tmp_path / "node.toml"
    toml.write_text('[node]\nintensity = 1\nperiod = 60\n')
    assert load_config(str(toml))["node"] == {"intensity": 1, "period": 60}
    assert DEFAULTS["node"] == {"intensity": 5, "period": 10.0}

    args = build_parser().parse_args(["up", "--config", str(toml), "--period", "30"])
    config = config_from(args)
    assert config["node"] == {"intensity": 1, "period": 30.0}  # the option wins; the file's intensity stays
    config = merge(config, {"data": str(tmp_path / "data"), "zeps": {"bind": "tcp://127.0.0.1:*"},
                            "majordomo": {"enabled": False}, "clone": {"enabled": False},
                            "harmony": {"enabled": False}, "dashboard": {"enabled": False}})
    node = Up(config).start()
    try:
        assert (node.tree.intensity, node.tree.period) == (1, 30.0)
        with Probe(node.tree) as probe:
            crash(node.zeps)  # the one restart it allows...
            probe.fish("CHILD_STARTED", "zeps", 1)
            assert not node.failed.is_set()
            crash(node.zeps)  # ...and one too many: with the default (5 in 10 s) the node would go on
            assert node.failed.wait(10), "the node did not give up after 2 restarts with intensity 1"
        assert "more than 1 restarts in 30s; the last, of 'zeps'" in node.failure, node.failure
    finally:
        node.stop()


@pytest.mark.parametrize("given, said", [
    ({"intensity": -1}, "[node] intensity is a whole number of restarts >= 0, not -1"),
    ({"intensity": "many"}, "[node] intensity is a whole number of restarts >= 0, not 'many'"),
    ({"intensity": True}, "[node] intensity is a whole number of restarts >= 0, not True"),
    ({"period": 0}, "[node] period is a number of seconds > 0, not 0"),
    ({"period": "10s"}, "[node] period is a number of seconds > 0, not '10s'"),
    ({"restarts": 3}, "[node] has no setting restarts (known: intensity, period)"),
])
def test_wrong_node_settings_are_refused_in_one_line(given, said):
    with pytest.raises(ConfigError) as refused:
        merge(DEFAULTS, {"node": given}, "node.toml")
    assert str(refused.value) == "node.toml: " + said


def test_the_command_line_refuses_wrong_values_in_one_line(tmp_path):
    toml = tmp_path / "node.toml"
    toml.write_text('[node]\nintensity = "many"\n')
    for args, said in [(("--intensity", "-1"), "must be 0 or more"), (("--period", "0"), "must be a number above 0"),
                       (("--config", str(toml)), "[node] intensity is a whole number")]:
        done = zactors("up", "--data", str(tmp_path / "data"), *args, *NOTHING, timeout=30)
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
