"""Entry point of the ``flinkai`` command.

Each command group lives in its own module under ``flinkai.cli`` and exposes
``register(subparsers)``; handlers return an exit code. Every
:class:`~flinkai.errors.FlinkAIError` becomes one readable line and exit status 1.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from flinkai import __version__
from flinkai.errors import FlinkAIError
from flinkai.security import redact

__all__ = ["main"]

#: Command-group modules, in help order.
COMMAND_MODULES = (
    "flinkai.cli.setup_cmd",
    "flinkai.cli.kafka_cmd",
    "flinkai.cli.chroma_cmd",
    "flinkai.cli.model_cmd",
    "flinkai.cli.registry_cmd",
    "flinkai.cli.run_cmd",
    "flinkai.cli.demo_cmd",
    "flinkai.cli.serve_cmd",
    "flinkai.cli.bench_cmd",
    "flinkai.cli.plan_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flinkai", description="flinkai: AI functions for Apache Flink SQL jobs"
    )
    parser.add_argument("--version", action="version", version=f"flinkai {__version__}")
    parser.add_argument("--config", help="YAML config file (default: configs/default.yaml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:  # a real import error inside the module
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    # Beam (PyFlink's Python runtime) logs internals at INFO; keep the CLI's output readable.
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.WARNING)
    try:
        code: int = args.handler(args)
    except FlinkAIError as e:
        print(f"flinkai: error: {redact(str(e))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("flinkai: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
