"""The fairseq-free commands, one module each, installed as `attn-only-NAME` console scripts."""

import argparse

from ..guards.errors import install_excepthook


def command_parser(doc: str) -> argparse.ArgumentParser:
    """A command's argument parser: its docstring's first paragraph is the description, its second
    (the example command lines) the epilog of --help. Installs the one-line error hook first, so
    that an error that ends the command is one `error:` line."""
    install_excepthook()
    paragraphs = doc.split("\n\n")
    return argparse.ArgumentParser(
        description=paragraphs[0],
        epilog="examples:\n" + paragraphs[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
