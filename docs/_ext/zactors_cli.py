"""A Sphinx directive, ``zactors-cli``: the command line reference, generated from the argparse parsers.

Each command and subcommand gets a section with its ``--help`` text exactly as ``zactors ... --help``
prints it, so the reference cannot drift from the program.
"""
import argparse

from docutils import nodes
from docutils.parsers.rst import Directive


def _walk(parser, path):
    """Yield ``(path, parser)`` for the parser and every subcommand under it, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, path + [name])


class CliReference(Directive):
    has_content = False

    def run(self):
        from zactors.apps.cli import build_parser
        sections = []
        for path, parser in _walk(build_parser(), ["zactors"]):
            title = " ".join(path)
            section = nodes.section(ids=[nodes.make_id(title)], names=[nodes.fully_normalize_name(title)])
            section += nodes.title(text=title)
            parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100)
            text = parser.format_help()
            section += nodes.literal_block(text, text)
            sections.append(section)
        return sections


def setup(app):
    app.add_directive("zactors-cli", CliReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
