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
from typing import Any

from flinkai import __version__
from flinkai.errors import FlinkAIError
from flinkai.security import redact

__all__ = ["QUIET_LOGGERS", "configure_logging", "main", "register_modules"]

#: Command-group modules, in help order.
COMMAND_MODULES = (
    "flinkai.cli.setup_cmd",
    "flinkai.cli.kafka_cmd",
    "flinkai.cli.chroma_cmd",
    "flinkai.cli.model_cmd",
    "flinkai.cli.adapter_cmd",
    "flinkai.cli.agents_cmd",
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
    register_modules(sub, COMMAND_MODULES)
    return parser


def register_modules(subparsers: Any, names: Sequence[str]) -> None:
    """Call ``register(subparsers)`` of each named module; a module not present is skipped."""
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:  # a real import error inside the module
                raise
            continue
        module.register(subparsers)


#: Loggers of other libraries and the lowest level the CLI shows from each.
QUIET_LOGGERS = {
    # Beam (PyFlink's Python runtime) logs internals at INFO.
    "apache_beam": logging.WARNING,
    # Beam tries every cloud filesystem it knows when PyFlink first loads its coders and
    # warns for each one whose SDK is absent (GCS, S3, Azure). Flink jobs never read
    # through Beam's filesystems, so the warning says nothing to a flinkai user.
    "apache_beam.io.filesystems": logging.ERROR,
    "kafka": logging.WARNING,
}


def configure_logging(*, verbose: bool = False) -> None:
    """Set the CLI's log format and quiet other libraries' loggers.

    Runs before any command imports PyFlink, so Beam's import-time warnings are
    already filtered when they fire.
    """
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "takes_rest", False):
        args.bench_argv = rest  # `flinkai bench ...` hands its arguments to the bench package
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    configure_logging(verbose=args.verbose)
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
