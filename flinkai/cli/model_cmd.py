"""``flinkai model``: export the embedding model to ONNX and inspect the artifacts."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from flinkai.config import ModelConfig, load_config
from flinkai.models.artifacts import (
    TRITON_DIR,
    ArtifactError,
    artifacts_dir,
    read_manifest,
    verify_files,
)

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``model`` command group."""
    p = sub.add_parser("model", help="export and inspect the ONNX embedding model")
    group = p.add_subparsers(dest="model_command", metavar="SUBCOMMAND", required=True)

    export = group.add_parser(
        "export",
        help="export the packaged all-MiniLM-L6-v2 to ONNX (needs the torch extra)",
        description="Export to ONNX, write tokenizer, Triton repository and manifest, "
        "then verify the output against sentence-transformers.",
    )
    export.add_argument("--out", metavar="DIR", help="artifact folder (default: model.dir or "
                        "$FLINKAI_HOME/models/<name>)")  # fmt: skip
    export.add_argument("--force", action="store_true", help="export even if valid artifacts exist")
    export.add_argument(
        "--no-verify", action="store_true", help="skip the comparison with sentence-transformers"
    )
    export.add_argument(
        "--triton-instance-kind",
        choices=("gpu", "cpu"),
        default="gpu",
        help="instance_group kind in the Triton config.pbtxt (default: gpu)",
    )
    export.set_defaults(handler=_export)

    info = group.add_parser("info", help="print the manifest of the exported model")
    info.add_argument("--dir", metavar="DIR", help="artifact folder (default: from the config)")
    info.add_argument("--json", action="store_true", help="print manifest.json as is")
    info.add_argument("--no-verify", action="store_true", help="do not check file checksums")
    info.set_defaults(handler=_info)


def _model_config(args: argparse.Namespace, folder: str | None) -> ModelConfig:
    model = load_config(args.config).model
    return replace(model, dir=str(Path(folder).expanduser().resolve())) if folder else model


def _export(args: argparse.Namespace) -> int:
    from flinkai.models.export import export_model

    result = export_model(
        _model_config(args, args.out),
        force=args.force,
        verify=not args.no_verify,
        triton_instance_kind=args.triton_instance_kind,
        progress=lambda line: print(line, flush=True),
    )
    if result.exported:
        steps = ", ".join(f"{k} {v:.1f}s" for k, v in result.timings_s.items())
        print(f"done: {result.artifacts.model_version} in {result.seconds:.1f}s ({steps})")
    return 0


def _info(args: argparse.Namespace) -> int:
    root = artifacts_dir(_model_config(args, args.dir))
    manifest = read_manifest(root)
    if args.json:
        print(json.dumps(manifest.to_dict(), indent=2))
        return 0
    checks = "not checked"
    if not args.no_verify:
        try:
            verify_files(root, manifest, checksums=True)
        except ArtifactError as e:
            print(f"checksums: FAILED: {e}")
            return 1
        checks = "ok"
    rows = [
        ("folder", str(root)),
        ("model", f"{manifest.name}@{manifest.version}"),
        ("dim", str(manifest.dim)),
        ("max_seq_length", str(manifest.max_seq_length)),
        ("opset", str(manifest.opset)),
        ("inputs", ", ".join(f"{t.name} {t.dtype}{list(t.shape)}" for t in manifest.inputs)),
        ("outputs", ", ".join(f"{t.name} {t.dtype}{list(t.shape)}" for t in manifest.outputs)),
        ("source", ", ".join(f"{k}={v}" for k, v in manifest.source.items())),
        ("created_at", manifest.created_at),
        ("triton repository", str(root / TRITON_DIR)),
        ("checksums", checks),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    print()
    path_width = max(len(f.path) for f in manifest.files)
    print(f"{'file':<{path_width}}  {'size':>12}  sha256")
    for f in manifest.files:
        print(f"{f.path:<{path_width}}  {f.size:>12,}  {f.sha256[:16]}")
    return 0
