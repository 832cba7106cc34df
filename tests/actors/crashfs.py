"""A file layer that simulates a power loss, for crash-consistency tests.

:class:`CrashFiles` works on real files in a test's directories and keeps,
per file, the content its last ``fsync`` covered and, per directory, the
entries its last directory fsync covered.  :meth:`CrashFiles.crash` (or the
``crash_at``-th file operation) kills the writer: every later call raises
:class:`SimulatedCrash` and the layer's descriptors are closed.
:meth:`CrashFiles.restore` then puts the directories in the state a power loss
leaves: files created (or renamed in) since the last directory fsync are gone,
files removed since come back, every file holds what its last fsync covered,
optionally plus a random prefix of the unsynced appended tail and some
garbage after it (a torn write).  As SQLite's crash tests and the Linux
crash-consistency tools do.

Directories made (``mkdir``) or removed (``rmdir``) through the layer are
entries of their parent like files: after a power loss a directory made
since its parent's last fsync is gone with everything in it, and one
removed since comes back with the files its last fsync covered.
Directories made outside the layer are taken as durable.

Only the journal's mutating calls go through the layer (reads use the
descriptors it opened), so a test can check that the journal syncs what it
must.  Thread-safe (one lock).
"""
import os
import shutil
import threading

from zactors.actors.journal import Files


class SimulatedCrash(BaseException):
    """The simulated power loss: not an ``Exception``, so no handler in the journal swallows it."""


class _Inode:
    __slots__ = ("durable",)

    def __init__(self, durable=b""):
        self.durable = durable      # the content the last fsync covered


def _under(path, top):
    return path == top or path.startswith(top + os.sep)


def _read_path(path):
    with open(path, "rb") as f:
        return f.read()


class CrashFiles(Files):
    """Real files; tracks what fsyncs made durable; crashes on demand (see the module docstring)."""

    def __init__(self, *directories):
        self._lock = threading.RLock()
        self.ops = 0                # mutating operations so far
        self.crash_at = None        # crash instead of doing operation number ``crash_at``
        self.dead = False
        self._names = {}            # path -> _Inode: the files we know, by their current name
        self._dirs = {}             # directory -> {name: _Inode} covered by its last fsync
        self._fds = {}              # fd -> _Inode
        self._made = set()          # directories made through the layer, their entry not yet synced
        self._removed = set()       # directories removed through the layer, their removal not yet synced
        for directory in directories:
            self.adopt(directory)

    def adopt(self, directory):
        """Take ``directory`` as it is now as durable (its files and their contents, its
        subdirectories likewise)."""
        directory = os.fspath(directory)
        with self._lock:
            entries = {}
            for name in os.listdir(directory):
                path = os.path.join(directory, name)
                if os.path.isfile(path):
                    inode = self._names[path] = _Inode(_read_path(path))
                    entries[name] = inode
                elif os.path.isdir(path):
                    self.adopt(path)
            self._dirs[directory] = entries

    # -- the crash -------------------------------------------------------

    def _step(self):
        if self.dead:
            raise SimulatedCrash("the writer is dead")
        self.ops += 1
        if self.crash_at is not None and self.ops >= self.crash_at:
            self.crash()
            raise SimulatedCrash("power loss at file operation %d" % self.ops)

    def crash(self):
        """Kill the writer now: its descriptors are closed, every later call raises."""
        with self._lock:
            self.dead = True
            self.crash_at = None
            for fd in list(self._fds):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._fds.clear()

    def restore(self, rng=None, torn=True, revive=True):
        """Leave the directories as a power loss does (call after :meth:`crash`),
        then revive the layer with that state as durable.

        With ``rng`` and ``torn``, a file whose unsynced change was an append
        keeps a random prefix of it, sometimes followed by garbage.  With
        ``revive=False`` the layer stays dead: threads of the dead writer that
        are still running never write again (use a new layer to go on)."""
        with self._lock:
            if not self.dead:
                self.crash()
            current = {id(inode): _read_path(path) for path, inode in self._names.items()
                       if os.path.isfile(path)}
            for path in self._made:         # made since its parent's last fsync: gone, with its content
                shutil.rmtree(path, ignore_errors=True)
                self._forget(path)
            for path in sorted(self._removed):  # removed since its parent's last fsync: back
                if not any(_under(path, made) for made in self._made):
                    os.makedirs(path, exist_ok=True)
            self._made.clear()
            self._removed.clear()
            for directory in [d for d in self._dirs if not os.path.isdir(d)]:
                self._forget(directory)     # removed durably
            for directory, entries in self._dirs.items():
                for name in os.listdir(directory):
                    path = os.path.join(directory, name)
                    if name not in entries and os.path.isfile(path):
                        os.unlink(path)     # its directory entry was never synced
                for name, inode in entries.items():
                    data = inode.durable
                    now = current.get(id(inode))
                    if rng is not None and torn and now is not None and len(now) > len(data) \
                            and now.startswith(data) and rng.random() < 0.5:
                        data = now[:rng.randint(len(data), len(now))]
                        if rng.random() < 0.3:  # the file grew but the block holds junk
                            junk = rng.randint(1, 64)
                            data += bytes(rng.getrandbits(8) for _ in range(junk)) \
                                if rng.random() < 0.5 else bytes(junk)
                    if now != data or not os.path.isfile(os.path.join(directory, name)):
                        with open(os.path.join(directory, name), "wb") as f:
                            f.write(data)
            if not revive:
                return
            directories = list(self._dirs)
            self._names.clear()
            self._dirs.clear()
            self.dead = False
            for directory in directories:
                self.adopt(directory)

    def _forget(self, top):
        for directory in [d for d in self._dirs if _under(d, top)]:
            del self._dirs[directory]
        for path in [p for p in self._names if _under(p, top)]:
            del self._names[path]

    # -- the layer ------------------------------------------------------

    def open(self, path, flags, mode=0o600):
        with self._lock:
            self._step()
            fd = os.open(path, flags, mode)
            inode = self._names.get(path)
            if inode is None:
                inode = self._names[path] = _Inode()
            self._fds[fd] = inode
            return fd

    def close(self, fd):
        with self._lock:
            if self.dead:
                raise SimulatedCrash("the writer is dead")
            self._fds.pop(fd, None)
            os.close(fd)

    def dup(self, fd):
        with self._lock:
            self._step()
            new = os.dup(fd)
            self._fds[new] = self._fds[fd]
            return new

    def write(self, fd, data):
        with self._lock:
            self._step()
            return os.write(fd, data)

    def fsync(self, fd):
        with self._lock:
            self._step()
            self._fds[fd].durable = _read_path("/proc/self/fd/%d" % fd)

    def ftruncate(self, fd, size):
        with self._lock:
            self._step()
            os.ftruncate(fd, size)

    def replace(self, src, dst):
        with self._lock:
            self._step()
            os.replace(src, dst)
            self._names[dst] = self._names.pop(src, None) or _Inode()

    def unlink(self, path):
        with self._lock:
            self._step()
            os.unlink(path)
            self._names.pop(path, None)

    def listdir(self, directory):
        with self._lock:
            if self.dead:
                raise SimulatedCrash("the writer is dead")
            return os.listdir(directory)

    def mkdir(self, path, mode=0o700):
        with self._lock:
            self._step()
            path = os.fspath(path)
            os.mkdir(path, mode)
            self._made.add(path)
            self._dirs[path] = {}           # nothing in it is durable yet

    def rmdir(self, path):
        with self._lock:
            self._step()
            path = os.fspath(path)
            os.rmdir(path)
            if path in self._made:
                self._made.discard(path)    # made and removed, neither durable: as if never made
                self._forget(path)
            else:
                self._removed.add(path)

    def fsync_dir(self, directory):
        with self._lock:
            self._step()
            directory = os.fspath(directory)
            for path in [p for p in self._made | self._removed if os.path.dirname(p) == directory]:
                self._made.discard(path)
                self._removed.discard(path)
                if not os.path.isdir(path):
                    self._forget(path)      # its removal is durable now
            entries = {}
            for name in os.listdir(directory):
                inode = self._names.get(os.path.join(directory, name))
                if inode is not None:
                    entries[name] = inode
            self._dirs[directory] = entries
