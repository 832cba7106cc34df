"""Whether this machine could have built zactors' C extensions: a C compiler and the Python headers.

setup.py builds them as optional extensions, so without a toolchain zactors installs in pure Python
(the README's promise). The tests that check the C versions are built and used skip, with the reason,
where nothing could have built them; with a toolchain, a missing extension is a failure.
"""
import os
import shlex
import shutil
import sysconfig


def missing():
    """What is missing to build the C extensions ('' when nothing): the compiler or the Python headers."""
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[:1]
    if not compiler or not shutil.which(compiler[0]):
        return "no C compiler (%s) here: apt-get install gcc" % " ".join(compiler)
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        return "no Python headers (Python.h) here: apt-get install python3-dev"
    return ""
