"""A Sphinx extension: the build warns (so ``-W`` fails) on a public name without a docstring.

Public means listed in the ``__all__`` of a module the API reference documents with ``automodule``.
Constants (not classes, functions or modules) are exempt: a value has no docstring of its own.
"""
import inspect

from sphinx.util import logging

log = logging.getLogger(__name__)


def _check(app, what, name, obj, options, lines):
    if what not in ("class", "function", "method", "exception"):
        return
    if name.rsplit(".", 1)[-1].startswith("_"):
        return
    if not any(line.strip() for line in lines) and not inspect.getdoc(obj):
        log.warning("public %s %s has no docstring", what, name, type="zactors", subtype="undocumented")


def setup(app):
    app.connect("autodoc-process-docstring", _check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
