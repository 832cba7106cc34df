"""What both soaks share: child processes they own, free loopback ports, deadlines, a tmpfs, samples.

Everything here runs in the calling thread's gevent hub; waits park only the calling greenlet and
every one has a deadline.  Not safe across OS threads.
"""
from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import gevent
import gevent.subprocess

#: the repository root: children run there, so ``python -m soak.hostile`` finds this package
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

__all__ = ["SoakError", "Child", "free_ports", "wait_until", "Tmpfs", "sample", "percentile", "zactors_argv"]


class SoakError(RuntimeError):
    """A soak could not run (a child would not start, a wait passed its deadline)."""


def zactors_argv(*args: str) -> list[str]:
    """The ``zactors`` command line, run by this Python (so the soak tests the code it imports)."""
    return [sys.executable, "-m", "zactors.apps.entry", *args]


def free_ports(count: int = 1, host: str = "127.0.0.1") -> int:
    """A base port P such that P .. P+count-1 are free on ``host`` now (the kernel's ephemeral range)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind((host, 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        held = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                held.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
        return base
    raise SoakError("no %d consecutive free ports on %s" % (count, host))


def wait_until(predicate, timeout: float, what: str, step: float = 0.02):
    """Poll ``predicate()`` (yielding to other greenlets) until it returns a true value, which is returned;
    SoakError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise SoakError("timed out after %gs waiting for %s" % (timeout, what))
        gevent.sleep(step)


class Child:
    """One child process the soak started (its own process group); ``kill`` sends SIGKILL to it alone.

    Its stdout and stderr go to ``log`` (a path), never to a pipe nobody reads.
    """

    def __init__(self, argv: list[str], log: str, name: str, stdout=None, nofile: int | None = None) -> None:
        """``nofile``: the child's limit of open files (its descriptor budgets derive from it)."""
        self.name = name
        self.argv = argv
        self.log = log
        self._log = open(log, "ab")
        self.proc = gevent.subprocess.Popen(argv, stdout=self._log if stdout is None else stdout,
                                            stderr=self._log, stdin=subprocess.DEVNULL, start_new_session=True,
                                            cwd=ROOT, preexec_fn=None if nofile is None else
                                            lambda: _limit_files(nofile))
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL this child (by its pid) and reap it."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=timeout)
        except gevent.subprocess.TimeoutExpired:
            raise SoakError("%s (pid %d) did not die within %gs of SIGKILL" % (self.name, self.pid, timeout))
        self._log.close()

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGINT (the CLI's Ctrl-C: a clean stop), then SIGKILL after ``timeout``; its exit status."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except gevent.subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
        return self.proc.returncode

    def tail(self, lines: int = 20) -> str:
        """The end of its log, for an error message."""
        try:
            with open(self.log, "rb") as f:
                return b"".join(f.readlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""


def _limit_files(limit):
    """Soft and hard: zactors raises its soft limit to the hard one, and derives its budgets from that."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


class Tmpfs:
    """A small tmpfs mounted at a fresh directory (root only), to fill a disk for real and empty it again.

    ``fill()`` writes a filler file until ENOSPC; ``drain()`` removes it.  ``close()`` unmounts.
    ``Tmpfs.open(size)`` returns None where mounting is not possible (not root, no mount permission).
    """

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size
        self.filler = os.path.join(path, "filler")

    @classmethod
    def open(cls, size: int) -> "Tmpfs | None":
        if os.geteuid() != 0:
            return None
        path = tempfile.mkdtemp(prefix="zactors-soak-tmpfs-")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,mode=0700" % size, "tmpfs", path],
                              capture_output=True, timeout=30)
        if done.returncode != 0:
            os.rmdir(path)
            return None
        return cls(path, size)

    def fill(self) -> int:
        """Write the filler until the disk is full; the bytes it took."""
        written = 0
        chunk = b"\0" * (64 << 10)
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while True:
                try:
                    n = os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(chunk) == 1:
                        break
                    chunk = chunk[:len(chunk) // 2]   # fill the last bytes too
                    continue
                written += n
        finally:
            os.close(fd)
        return written

    def drain(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.filler)

    def close(self) -> None:
        self.drain()
        subprocess.run(["umount", self.path], capture_output=True, timeout=30)
        with contextlib.suppress(OSError):
            os.rmdir(self.path)


def sample(pid: int) -> tuple[int, int]:
    """(resident bytes, open file descriptors) of process ``pid``."""
    import psutil
    proc = psutil.Process(pid)
    return proc.memory_info().rss, proc.num_fds()


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` (nearest rank); 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]
