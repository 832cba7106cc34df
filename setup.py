"""Build the optional C speedups; everything else is in setup.cfg."""
from setuptools import Extension, setup

setup(ext_modules=[
    # optional: without a compiler zactors installs and runs in pure Python
    Extension("_zactors_speedups", sources=["actors/_speedups.c"], optional=True),
])
