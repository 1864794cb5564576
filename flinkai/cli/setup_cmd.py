"""``flinkai setup``: resolve jars (and, with ``--model``, export the model)."""

from __future__ import annotations

import argparse

from flinkai.runtime.jars import JAR_KINDS, resolve_jars

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "setup", help="fetch the connector, Kafka and SQL Gateway jars from Maven Central"
    )
    p.add_argument("--force", action="store_true", help="resolve again even if present")
    p.add_argument("--model", action="store_true", help="also export the ONNX model")
    p.set_defaults(handler=_setup)


def _setup(args: argparse.Namespace) -> int:
    for kind in JAR_KINDS:
        jars = resolve_jars(kind, force=args.force)
        print(f"{kind}: {len(jars)} jar(s) in {jars[0].parent}")
    if args.model:
        from flinkai.config import load_config
        from flinkai.models.export import export_model

        export_model(load_config(args.config).model)
    return 0
