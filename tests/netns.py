"""Network namespaces for tests: private LANs that vanish afterwards.

A :class:`Lab` creates Linux network namespaces (``ip netns``) joined by veth
pairs, or by a bridge in a switch namespace for more than two hosts, with
addresses from TEST-NET-1 (192.0.2.0/24, RFC 5737).  Links are created
directly inside their namespaces, so nothing ever appears in (or broadcasts
from) the root namespace.  Processes run inside with ``ip netns exec``;
:meth:`Namespace.entered` moves the calling OS thread into a namespace for a
moment, so sockets created meanwhile (a UDP beacon, say) live there.

Everything a lab made is removed by :meth:`Lab.close`, also when a test
fails: processes it started are killed and reaped, then its namespaces are
deleted (their links go with them).  Use the ``lab`` fixture, which skips the
test with a clear reason where the environment cannot do this (not root, no
``ip``, no netns support).

Not thread-safe: a lab belongs to the test that made it.
"""
import contextlib
import ctypes
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

__all__ = ["Lab", "Namespace", "lab", "netns_unavailable", "SUBNET"]

SUBNET = "192.0.2.%d"
_CLONE_NEWNET = 0x40000000
_counter = itertools.count(1)
_libc = ctypes.CDLL(None, use_errno=True)
_unavailable = []  # cached reason (or "" when available)


def _ip(*args, check=True):
    return subprocess.run(("ip",) + args, check=check, capture_output=True, text=True, timeout=30)


def netns_unavailable():
    """Why namespaces cannot be used here, or None when they can."""
    if _unavailable:
        return _unavailable[0] or None
    reason = ""
    if not sys.platform.startswith("linux"):
        reason = "network namespaces need Linux"
    elif os.geteuid() != 0:
        reason = "network namespaces need root (ip netns add)"
    elif shutil.which("ip") is None:
        reason = "the 'ip' command (iproute2) is not installed"
    else:
        probe = "zaprobe-%d" % os.getpid()
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            reason = "cannot create a network namespace: %s" % made.stderr.strip()
        else:
            _ip("netns", "del", probe, check=False)
    _unavailable.append(reason)
    return reason or None


def _start_zmq_io_thread():
    import zmq
    zmq.Context.instance().socket(zmq.PAIR).close(0)  # libzmq starts its I/O threads with the first socket


def _setns(fd):
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "setns: %s" % os.strerror(err))


class Namespace:
    """One network namespace of a :class:`Lab`; ``address`` is its first IPv4 address."""

    def __init__(self, name):
        self.name = name
        self.address = None
        self.interfaces = []
        self._procs = []

    def run(self, *args, check=True, timeout=30):
        """Run a command inside and wait for it; returns ``CompletedProcess``."""
        return subprocess.run(("ip", "netns", "exec", self.name) + tuple(args), check=check,
                              capture_output=True, text=True, timeout=timeout)

    def popen(self, args, **kwargs):
        """Start a process inside; the lab kills and reaps it at the end."""
        kwargs.setdefault("stdin", subprocess.PIPE)
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        proc = subprocess.Popen(("ip", "netns", "exec", self.name) + tuple(args), **kwargs)
        self._procs.append(proc)
        return proc

    def python(self, *args, **kwargs):
        """Start this Python interpreter inside, unbuffered, with ``args``."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.update(kwargs.pop("env", {}))
        return self.popen((sys.executable,) + tuple(args), env=env, text=True, **kwargs)

    @contextlib.contextmanager
    def entered(self):
        """Move the calling OS thread into this namespace for the block.

        Sockets created inside the block stay in this namespace after it.
        Every greenlet of the thread runs inside meanwhile: keep it short.
        Threads started inside would stay inside for good, so the shared
        ZeroMQ context's I/O thread is started before entering.
        """
        _start_zmq_io_thread()
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open("/run/netns/%s" % self.name, os.O_RDONLY)
            try:
                _setns(target)
            finally:
                os.close(target)
            try:
                yield self
            finally:
                _setns(home)
        finally:
            os.close(home)

    def link(self, up):
        """Set every lab interface of this namespace up or down (up: waits for carrier)."""
        for ifname in self.interfaces:
            _ip("-n", self.name, "link", "set", ifname, "up" if up else "down")
        if up:
            self.wait_carrier()

    def wait_carrier(self, timeout=10.0):
        """Wait until every lab interface here has carrier (veth: its peer is up)."""
        deadline = time.monotonic() + timeout
        for ifname in self.interfaces:
            while "LOWER_UP" not in _ip("-n", self.name, "link", "show", ifname).stdout:
                if time.monotonic() > deadline:
                    raise RuntimeError("%s in %s has no carrier after %ss" % (ifname, self.name, timeout))
                time.sleep(0.01)  # polling a kernel state with a deadline, not synchronising a test

    def kill(self):
        """Kill (SIGKILL) and reap every process started here."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(Exception):
                        stream.close()
        self._procs.clear()

    def __repr__(self):
        return "<Namespace %s %s>" % (self.name, self.address)


class Lab:
    """Namespaces and links made for one test, removed by :meth:`close`."""

    def __init__(self):
        self.namespaces = []
        self._tag = "za%d-%d" % (os.getpid(), next(_counter))
        self._host = itertools.count(1)

    def namespace(self):
        """A fresh namespace with loopback up."""
        ns = Namespace("%s-%d" % (self._tag, len(self.namespaces)))
        _ip("netns", "add", ns.name)
        self.namespaces.append(ns)
        _ip("-n", ns.name, "link", "set", "lo", "up")
        return ns

    def _address(self, ns, ifname):
        address = SUBNET % next(self._host)
        _ip("-n", ns.name, "addr", "add", address + "/24", "brd", "+", "dev", ifname)
        _ip("-n", ns.name, "link", "set", ifname, "up")
        ns.interfaces.append(ifname)
        if ns.address is None:
            ns.address = address
        return address

    def pair(self):
        """Two namespaces joined by a veth pair (interface ``zv0`` in both)."""
        a, b = self.namespace(), self.namespace()
        _ip("link", "add", "zv0", "netns", a.name, "type", "veth", "peer", "name", "zv0", "netns", b.name)
        self._address(a, "zv0")
        self._address(b, "zv0")
        a.wait_carrier()
        b.wait_carrier()
        return a, b

    def lan(self, count):
        """``count`` namespaces on one bridged LAN (a switch namespace holds the bridge)."""
        if count == 2:
            return list(self.pair())
        switch = self.namespace()
        _ip("-n", switch.name, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch.name, "link", "set", "br0", "up")
        hosts = []
        for i in range(count):
            host = self.namespace()
            port = "p%d" % i
            _ip("link", "add", "zv0", "netns", host.name, "type", "veth", "peer", "name", port,
                "netns", switch.name)
            _ip("-n", switch.name, "link", "set", port, "master", "br0")
            _ip("-n", switch.name, "link", "set", port, "up")
            self._address(host, "zv0")
            hosts.append(host)
        for host in hosts:
            host.wait_carrier()
        return hosts

    def close(self):
        """Kill every process, then delete every namespace (their links go too)."""
        for ns in self.namespaces:
            ns.kill()
        for ns in reversed(self.namespaces):
            _ip("netns", "del", ns.name, check=False)
        self.namespaces.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture
def lab():
    """A :class:`Lab`, closed after the test; skips where namespaces are unavailable."""
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    with Lab() as made:
        yield made
