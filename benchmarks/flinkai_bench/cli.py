"""``flinkai bench``: the benchmark groups, one subcommand per module in :data:`BENCHMARKS`.

The product's CLI knows only the name ``bench``; it finds this module through the
``flinkai.commands`` entry point when the command runs, so ``flinkai --help`` and every
other command never import the benchmarks.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from flinkai.cli.main import register_modules
from flinkai_bench import BENCHMARKS

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """``flinkai bench`` with one subcommand per available benchmark module."""
    parser = argparse.ArgumentParser(
        prog="flinkai bench",
        description="Benchmarks; each prints a table and can write JSON.",
    )
    sub = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    register_modules(sub, BENCHMARKS)
    return parser


def main(argv: Sequence[str], *, config: str | None = None, verbose: bool = False) -> int:
    """Run ``flinkai bench ARGV``; the product CLI passes its global options through."""
    args = build_parser().parse_args(list(argv))
    # the benchmark handlers read the global options the product CLI parsed
    args.config = config
    args.verbose = verbose
    code: int = args.handler(args)
    return code
