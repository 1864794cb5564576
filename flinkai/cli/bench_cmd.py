"""``flinkai bench``: benchmark groups, one subcommand per module in :mod:`flinkai.bench`."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from flinkai.bench import BENCHMARKS

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add ``flinkai bench`` and one subcommand per available benchmark module."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="run benchmarks (drift detection, ...)",
        description="Benchmarks; each prints a table and can write JSON.",
    )
    sub = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name in BENCHMARKS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:  # a real import error inside the module
                raise
            continue
        module.register(sub)
