"""`mstta-bench`, the command line: each subcommand lives in `mstta/commands/<name>.py` and exposes
`add_arguments(parser)` and `run(args) -> int`; this file only dispatches (`python -m mstta.cli`)."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

from .errors import OneLineParser, UserError, run_cli

PROG = "mstta-bench"
SUBCOMMANDS = {
    "replay": "run a method over a precomputed feature file",
    "extract": "encode a dataset's test split into a feature file",
    "run": "the paper's benchmark: extract, replay every method, report beside the paper",
    "sweep": "an ablation over one hyperparameter",
    "field": "the field table: every method's accuracy, calibration, open-set and stability metrics",
    "tsne": "t-SNE of CLIP vs mean-shifted embeddings",
    "streams": "streams with scene cuts: forgetting arms, recovery, regret, stale share, the cut detector",
}


def _load(name: str):
    """The command's module, or the ImportError if a package it needs is missing (so one command's
    missing dependency never breaks the others)."""
    try:
        return importlib.import_module(f"mstta.commands.{name}")
    except ImportError as exc:
        return exc


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG, description="MS-TTA benchmark: replay, extract, run, sweep, field, tsne, streams."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name, help_text in SUBCOMMANDS.items():
        module = _load(name)
        if isinstance(module, ImportError):
            p = sub.add_parser(name, help=f"{help_text} (unavailable: {module})", description=help_text)
            p.set_defaults(_module=module, _name=name)
            continue
        p = sub.add_parser(name, help=help_text, description=module.__doc__ or help_text)
        module.add_arguments(p)
        p.set_defaults(_module=module, _name=name)
    return parser


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)  # = parse_args, except for a command that cannot run
    if isinstance(getattr(args, "_module", None), ImportError):
        raise UserError(f"'{args._name}' cannot run: {args._module}; install the missing package (make install)")
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    if args.command is None:
        raise UserError(f"no command given; choose one of: {', '.join(SUBCOMMANDS)} (see {PROG} --help)")
    return args._module.run(args)


RESUME = "; rerun the same command to continue (extract, run, field and sweep keep what finished and resume)"


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(PROG, _main, argv, RESUME)


if __name__ == "__main__":
    sys.exit(main())
