"""The journal's file layer: every call that opens, changes or syncs a journal file.

:class:`Files` is plain ``os`` calls; :class:`~zactors.actors.journal.Journal`
and :class:`~zactors.actors.journal.JournalReader` take one as ``files=``.
Reads (``os.pread``, ``os.fstat``) use the descriptors it opened directly.
A test layer subclasses it to inject faults (an ``fsync`` raising EIO) or to
simulate a power loss (drop every write no ``fsync`` covered, directory
entries too: see ``tests/actors/crashfs.py``).

Every method blocks like the ``os`` call it wraps; all are thread-safe.
Imports no gevent.
"""
from __future__ import annotations

import os

__all__ = ["Files", "OS_FILES"]


class Files:
    """Plain ``os`` file calls (the default layer).  Stateless and thread-safe."""

    __slots__ = ()

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        return os.open(path, flags, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def dup(self, fd: int) -> int:
        return os.dup(fd)

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def listdir(self, directory: str) -> list[str]:
        return os.listdir(directory)

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        """Create a directory (its entry is durable once its parent is :meth:`fsync_dir`-ed)."""
        os.mkdir(path, mode)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def fsync_dir(self, directory: str) -> None:
        """Make the directory's entries (files created, renamed, removed) durable."""
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` all or nothing, durably: a temp file,
        written and fsynced, renamed over ``path``, then the directory fsynced."""
        tmp = path + ".tmp"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            view = memoryview(data)
            while view:
                view = view[self.write(fd, view):]
            self.fsync(fd)
        finally:
            self.close(fd)
        self.replace(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")


#: The shared default layer.
OS_FILES = Files()
