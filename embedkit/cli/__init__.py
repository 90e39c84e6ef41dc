"""The ``embedkit`` command: one module per verb, each a thin wrapper over a library call."""

from __future__ import annotations

import sys

import typer

from embedkit.errors import EmbedkitError

app = typer.Typer(
    name="embedkit",
    help="Dense retrieval: encode, index, search and evaluate on BEIR.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _register() -> None:
    from embedkit.cli import compare, encode, evaluate, index, mine, pretrain, reproduce, search, train

    for module in (encode, index, search, evaluate, mine, train, pretrain, compare, reproduce):
        module.register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: a user error prints one line and exits 2; anything else is a bug and keeps its traceback."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # weight-loading bars are noise on a command line
    _register()
    try:
        app(args=argv, prog_name="embedkit")
    except EmbedkitError as err:
        print(f"embedkit: error: {err}", file=sys.stderr)
        sys.exit(2)
