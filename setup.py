"""Map the top-level folders under one import namespace and build the optional
C speedups; everything else is in setup.cfg.

The design card keeps ``actors/``, ``patterns/`` and ``apps/`` at the top of
the repository; they install as ``zactors.actors``, ``zactors.patterns`` and
``zactors.apps``, so no generic name such as ``apps`` reaches site-packages.
``zactors`` itself (its ``__init__``: ``__version__``) is ``toplevel/`` (a
folder named ``zactors`` at the top would shadow the installed package for
anything run from the repository).  The mapping holds for regular and
editable installs alike.
"""
from setuptools import Extension, find_packages, setup

FOLDERS = ("actors", "patterns", "apps")

packages = ["zactors"]
package_dir = {"zactors": "toplevel"}
for folder in FOLDERS:
    package_dir["zactors." + folder] = folder
    packages += ["zactors." + name for name in [folder] + [folder + "." + p for p in find_packages(folder)]]

setup(
    packages=packages,
    package_dir=package_dir,
    ext_modules=[
        # optional: without a compiler zactors installs and runs in pure Python
        Extension("zactors.actors._speedups", sources=["actors/_speedups.c"], optional=True),
        Extension("zactors.actors._journal", sources=["actors/_journal.c"], optional=True),
        Extension("zactors.patterns.zeps._deliver", sources=["patterns/zeps/_deliver.c"], optional=True),
    ],
)
