"""The fairseq-free commands, one module each, installed as `attn-only-NAME` console scripts."""

import argparse

from ..guards.errors import install_excepthook


def command_parser(doc: str, example_paragraphs: int = 1) -> argparse.ArgumentParser:
    """A command's argument parser: its docstring's first paragraph is the description, the next
    `example_paragraphs` (the example command lines) the epilog of --help. Installs the one-line
    error hook first, so that an error that ends the command is one `error:` line."""
    install_excepthook()
    paragraphs = doc.split("\n\n")
    return argparse.ArgumentParser(
        description=paragraphs[0],
        epilog="examples:\n" + "\n\n".join(paragraphs[1 : 1 + example_paragraphs]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
