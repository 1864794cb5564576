"""Choose each forecaster's settings by validation forecast loss, never by a NAB score.

Each variant (``hybrid``, ``lstm``) gets the same budget: :data:`GRIDS` holds eight
settings per variant, each trained with the same epoch cap, early stopping and
held-out split (:data:`BASE`: the last 20% of every series' probationary part).
The setting with the lowest validation loss wins and its model (the weights of its
best validation epoch) is copied to ``<out>/<kind>``. Labels and the data after the
probationary part are never read, so the NAB bench that follows is run once, on
models chosen without it.

Run: ``python -m flinkai_bench.research.anomaly.search --out DIR --json PATH [--kind hybrid|lstm]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from flinkai.anomaly.spec import ModelKind, ModelSpec
from flinkai.anomaly.train import TrainOptions, train_model

__all__ = ["BASE", "GRIDS", "Candidate", "search"]

#: Shared by every candidate: the epoch cap, early stopping, the held-out share.
BASE = TrainOptions(epochs=60, patience=10, val_fraction=0.2, threads=1)

_LRS = (3e-3, 1e-2)


@dataclass(frozen=True)
class Candidate:
    """One setting to train: the model shape and the training options."""

    spec: ModelSpec
    options: TrainOptions

    def label(self) -> str:
        s, o = self.spec, self.options
        gate = " gate" if s.gate else ""
        attn = f" attn {s.attn_dim}x{s.heads}h w{s.window}{gate}" if s.has_attention else ""
        return f"{s.kind} hidden {s.hidden}{attn} lr {o.lr:g}"


#: Eight per variant: LSTM width x learning rate for both, crossed with the
#: variant's own choice: the residual gate for ``hybrid``, two wider LSTMs for
#: ``lstm``. Attention width and window stay at 16 and 288: the KV cache is then
#: already 37 KB of the 64 KB state budget per key.
GRIDS: dict[ModelKind, list[Candidate]] = {
    "hybrid": [
        Candidate(ModelSpec(kind="hybrid", hidden=hidden, gate=gate), replace(BASE, lr=lr))
        for gate in (False, True)
        for hidden in (32, 64)
        for lr in _LRS
    ],
    "lstm": [
        Candidate(ModelSpec(kind="lstm", hidden=hidden), replace(BASE, lr=lr))
        for hidden in (32, 64, 96, 128)
        for lr in _LRS
    ],
}


def search(
    kind: ModelKind,
    data_dir: Path,
    out: Path,
    candidates: Sequence[Candidate] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train every candidate of ``kind``, keep the one with the lowest validation loss.

    Returns:
        ``{"kind", "chosen", "rows": [{label, spec, options, best_val_loss,
        best_epoch, epochs_run, seconds, model_version}]}``.
    """
    say = progress or (lambda _line: None)
    rows: list[dict[str, Any]] = []
    for i, cand in enumerate(candidates if candidates is not None else GRIDS[kind]):
        say(f"[{kind} {i}] {cand.label()}")
        t0 = time.perf_counter()
        result = train_model(cand.spec, data_dir, out / f"{kind}-{i}", cand.options, progress=say)
        rows.append(
            {
                "label": cand.label(),
                "folder": str(result.folder),
                "spec": asdict(cand.spec),
                "options": asdict(cand.options),
                "best_val_loss": result.best_val_loss,
                "best_epoch": result.best_epoch,
                "epochs_run": len(result.losses),
                "val_losses": result.val_losses,
                "seconds": round(time.perf_counter() - t0, 1),
                "model_version": result.meta.model_version,
            }
        )
        say(f"  val {result.best_val_loss:.5f} at epoch {result.best_epoch}")
    best = min(rows, key=lambda r: r["best_val_loss"])
    target = out / kind
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(best["folder"], target)
    return {"kind": kind, "chosen": best["label"], "rows": rows}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", metavar="DIR", help="NAB-layout folder (default: ../shared/datasets/nab)"
    )
    parser.add_argument("--out", metavar="DIR", required=True, help="parent of model folders")
    parser.add_argument("--kind", choices=("hybrid", "lstm", "both"), default="both")
    parser.add_argument("--json", metavar="PATH", help="write the validation table here")
    parser.add_argument(
        "--epochs", type=int, default=BASE.epochs, help=f"epoch cap (default {BASE.epochs})"
    )
    parser.add_argument(
        "--patience", type=int, default=BASE.patience,
        help=f"early-stopping patience (default {BASE.patience})",
    )  # fmt: skip
    args = parser.parse_args(argv)
    from flinkai.paths import repo_root

    # As `flinkai bench anomaly`: ../shared/datasets/nab next to the checkout.
    default = (repo_root() or Path.cwd()).parent / "shared" / "datasets" / "nab"
    data = Path(args.data) if args.data else default
    kinds: tuple[ModelKind, ...] = ("hybrid", "lstm") if args.kind == "both" else (args.kind,)
    out = Path(args.out).expanduser().resolve()
    # The cap and patience change for every candidate of every variant alike.
    grids = {
        k: [replace(c, options=replace(c.options, epochs=args.epochs, patience=args.patience))
            for c in GRIDS[k]]
        for k in kinds
    }  # fmt: skip
    results = [
        search(k, data, out, grids[k], progress=lambda s: print(s, flush=True)) for k in kinds
    ]
    for res in results:
        for row in res["rows"]:
            mark = "*" if row["label"] == res["chosen"] else " "
            print(f"{mark} {row['label']:<48} val {row['best_val_loss']:.5f} "
                  f"epoch {row['best_epoch']:>3}/{row['epochs_run']}")  # fmt: skip
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
