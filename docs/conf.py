"""Sphinx configuration of the zactors documentation (build: ``python -m sphinx -W -b html docs docs/_build``).

Why Sphinx: it is what pyzmq and gevent publish with, its autodoc reads the docstrings the code already
has, and MyST lets the pages be written in the same Markdown as the README.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_ext"))

project = "zactors"
author = "the zactors developers"
try:
    from zactors import __version__ as release
except ImportError:  # building from a checkout that was not installed
    release = "unknown"
version = release

extensions = [
    "myst_parser",           # Markdown pages
    "sphinx.ext.autodoc",    # the API reference, from docstrings
    "sphinx.ext.viewcode",
    "zactors_docs",          # every public name documented (docs/_ext/zactors_docs.py)
    "zactors_cli",           # the CLI reference, from the argparse parsers (docs/_ext/zactors_cli.py)
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
# the classes' own docstrings; __init__'s, when it has one, follows
autoclass_content = "both"

html_theme = "alabaster"
html_title = "zactors %s" % release
html_theme_options = {"description": "gevent actors for the classic ZeroMQ patterns"}
