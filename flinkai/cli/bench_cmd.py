"""``flinkai bench``: a shim over the separately installed benchmark package.

The benchmarks live in ``flinkai-bench`` (``benchmarks/``), which registers itself
under the ``flinkai.commands`` entry-point group. The shim resolves it only when the
command runs, so the product never imports the lab.
"""

from __future__ import annotations

import argparse
from importlib.metadata import entry_points
from typing import Any

from flinkai.errors import ConfigError

__all__ = ["register"]

GROUP = "flinkai.commands"


def register(subparsers: Any) -> None:
    """Add ``flinkai bench`` (everything after it goes to the benchmark package)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="run benchmarks (installed with flinkai-bench: pip install -e benchmarks)",
        description="Benchmarks; `flinkai bench --help` lists them.",
        add_help=False,
    )
    # everything after ``bench`` is the benchmark package's (main() passes it on)
    parser.set_defaults(handler=_bench, bench_argv=[], takes_rest=True)


def _bench(args: argparse.Namespace) -> int:
    found = [ep for ep in entry_points(group=GROUP) if ep.name == "bench"]
    if not found:
        raise ConfigError(
            "flinkai bench needs the benchmark package: pip install -e benchmarks "
            "(make test and make demo install it)"
        )
    main = found[0].load()
    code: int = main(args.bench_argv, config=args.config, verbose=args.verbose)
    return code
