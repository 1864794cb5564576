"""Train the forecaster offline and export its streaming step to ONNX.

Training data follows NAB's rules: only each series' probationary part (the first
``min(floor(0.15 n), 750)`` rows, :func:`flinkai.anomaly.nab.probationary_length`)
is used, labels are never read, and inputs and targets are normalised exactly as
the operator does online (:mod:`flinkai.anomaly.features`), so a step sees the
same numbers in training and in the job.

One model is trained for all series (each sequence is one series' probationary
part), with a Huber loss on the next normalised value. With ``val_fraction`` the
last part of each probationary part is held out: its targets are not trained on
(the model is causal, so the training rows' forecasts never see them), their loss
is the validation loss, and the weights of the epoch with the lowest validation
loss are kept (early stopping after ``patience`` epochs without a new best). Model
settings are chosen by that loss (:mod:`flinkai_bench.research.anomaly.search`), never by a NAB
score. After export, the ONNX
step is run over a probationary sequence and compared with the torch full-window
forward; a mismatch above ``tolerance`` fails the command.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from flinkai.anomaly.errors import AnomalyModelError
from flinkai.anomaly.features import CLIP, InputNormalizer, feature_row
from flinkai.anomaly.nab import NabSeries, load_nab_folder, probationary_length
from flinkai.anomaly.spec import (
    META_FILE,
    ONNX_FILE,
    TORCH_FILE,
    ModelKind,
    ModelMeta,
    ModelSpec,
    anomaly_models_dir,
)
from flinkai.staging import staged_dir

__all__ = [
    "DEFAULTS",
    "OPSET",
    "TrainOptions",
    "TrainResult",
    "probation_sequences",
    "series_inputs",
    "timestamps_ms",
    "train_model",
]

OPSET = 17

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class TrainOptions:
    """Training settings.

    Attributes:
        epochs: Passes over the training sequences.
        lr: Adam learning rate.
        seed: Torch seed (weights and nothing else are random).
        threads: Torch threads.
        max_rows: Rows per series at most (NAB's probationary cap is 750).
        tolerance: Largest ONNX-vs-torch forecast difference accepted after export.
        val_fraction: Share of each series' probationary targets held out for
            validation, taken from its end (0: train on all, no validation).
        patience: Stop after this many epochs without a lower validation loss
            (0: run all ``epochs``); needs ``val_fraction``.
    """

    epochs: int = 40
    lr: float = 3e-3
    seed: int = 0
    threads: int = 2
    max_rows: int = 750
    tolerance: float = 1e-4
    val_fraction: float = 0.0
    patience: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.val_fraction < 1.0:
            raise AnomalyModelError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.epochs < 1 or self.patience < 0 or self.lr <= 0:
            raise AnomalyModelError(f"bad training options: {self}")


_SELECTED = TrainOptions(epochs=200, lr=1e-2, threads=1, val_fraction=0.2, patience=20)

#: Each variant's default settings for ``flinkai model train-anomaly``: the ones
#: :mod:`flinkai_bench.research.anomaly.search` chose by validation loss (every candidate's
#: curve: benchmarks/results/2026-12-03-2vcpu-epyc/anomaly-search200-{hybrid,lstm}.json).
#: One thread, as in the search, so the defaults rebuild its models exactly.
DEFAULTS: dict[ModelKind, tuple[ModelSpec, TrainOptions]] = {
    "hybrid": (ModelSpec(kind="hybrid", hidden=64, gate=True), _SELECTED),
    "lstm": (ModelSpec(kind="lstm", hidden=128), _SELECTED),
}


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train_model` built.

    Attributes:
        losses: Training loss per epoch.
        val_losses: Validation loss per epoch, of the weights at the epoch's start,
            plus one for the final weights (empty without validation).
        best_epoch: Optimiser steps taken by the kept weights.
        best_val_loss: Their validation loss (None without validation).
    """

    folder: Path
    meta: ModelMeta
    seconds: float
    losses: list[float] = field(default_factory=list)
    val_losses: list[float] = field(default_factory=list)
    best_epoch: int = 0
    best_val_loss: float | None = None


@dataclass
class _Fit:
    losses: list[float]
    val_losses: list[float]
    best_epoch: int
    best_val_loss: float | None


def timestamps_ms(series: NabSeries) -> npt.NDArray[np.int64]:
    """Row timestamps as epoch milliseconds."""
    return series.timestamps.astype("datetime64[ms]").astype(np.int64)


def series_inputs(values: Sequence[float], ts_ms: Sequence[int]) -> tuple[F32, F32]:
    """Model inputs ``[T, F]`` and targets ``[T - 1]`` as the operator computes them.

    The target of step ``t`` is value ``t + 1`` scaled by the normaliser as it stood
    after value ``t``: the number the operator compares that forecast with.
    """
    norm = InputNormalizer()
    rows: list[F32] = []
    targets: list[float] = []
    for i, (v, ts) in enumerate(zip(values, ts_ms, strict=True)):
        if i > 0:
            targets.append(norm.scale(float(v)))
        norm.update(float(v))
        rows.append(feature_row(norm.scale(float(v)), int(ts)))
    return np.stack(rows), np.clip(np.asarray(targets, np.float32), -CLIP, CLIP)


def probation_sequences(
    data: Mapping[str, NabSeries], max_rows: int = 750
) -> list[tuple[str, F32, F32]]:
    """``(name, inputs, targets)`` of each series' probationary part, by name."""
    out = []
    for name in sorted(data):
        s = data[name]
        n = min(probationary_length(len(s.values)), max_rows)
        if n < 3:
            continue
        x, y = series_inputs(s.values[:n].tolist(), timestamps_ms(s)[:n].tolist())
        out.append((name, x, y))
    return out


def _fit(
    torch: Any, model: Any, seqs: list[tuple[str, F32, F32]], opts: TrainOptions,
    say: Callable[[str], None],
) -> _Fit:  # fmt: skip
    t_max = max(len(x) for _, x, _ in seqs)
    n_feat = seqs[0][1].shape[1]
    xb = np.zeros((len(seqs), t_max, n_feat), np.float32)
    yb = np.zeros((len(seqs), t_max), np.float32)
    wb = np.zeros((len(seqs), t_max), np.float32)  # training rows
    vb = np.zeros((len(seqs), t_max), np.float32)  # validation rows
    for i, (_, x, y) in enumerate(seqs):
        xb[i, : len(x)] = x
        yb[i, : len(y)] = y  # the last input has no target
        n_val = round(opts.val_fraction * len(y))
        wb[i, : len(y) - n_val] = 1.0
        vb[i, len(y) - n_val : len(y)] = 1.0
    xt, yt, wt, vt = (torch.from_numpy(a) for a in (xb, yb, wb, vb))
    validate = float(vb.sum()) > 0
    optim = torch.optim.Adam(model.parameters(), lr=opts.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optim, T_max=max(opts.epochs, 1))
    losses: list[float] = []
    val_losses: list[float] = []
    best: tuple[float, int, dict[str, Any]] | None = None

    def val_loss(pred: Any, epoch: int) -> None:
        # No dropout or batch statistics: the training forward's forecasts are the
        # eval forecasts, so validation costs no extra pass.
        nonlocal best
        rows = torch.nn.functional.smooth_l1_loss(pred.detach(), yt, reduction="none")
        v = float(((rows * vt).sum() / vt.sum()).item())
        val_losses.append(v)
        if best is None or v < best[0]:
            best = (v, epoch, {k: t.detach().clone() for k, t in model.state_dict().items()})

    model.train()
    for epoch in range(opts.epochs):
        optim.zero_grad()
        pred = model(xt)
        if validate:
            val_loss(pred, epoch)
            assert best is not None
            if opts.patience and epoch - best[1] > opts.patience:
                say(f"  early stop at epoch {epoch + 1}: best val {best[0]:.4f} at {best[1]}")
                break
        loss_rows = torch.nn.functional.smooth_l1_loss(pred, yt, reduction="none")
        loss = (loss_rows * wt).sum() / wt.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        losses.append(float(loss.item()))
        if epoch % 10 == 0 or epoch == opts.epochs - 1:
            extra = f" val {val_losses[-1]:.4f}" if validate else ""
            say(f"  epoch {epoch + 1}/{opts.epochs} loss {losses[-1]:.4f}{extra}")
    model.eval()
    if not validate:
        return _Fit(losses, [], len(losses), None)
    if len(losses) == opts.epochs:  # ran to the end: the final weights are a candidate too
        with torch.no_grad():
            val_loss(model(xt), opts.epochs)
    assert best is not None
    model.load_state_dict(best[2])
    return _Fit(losses, val_losses, best[1], best[0])


def _export(torch: Any, model: Any, path: Path) -> None:
    import warnings

    from flinkai.anomaly.forecaster import StepModule, step_input_names, step_output_names
    from flinkai.anomaly.step import RecurrentState

    spec: ModelSpec = model.spec
    zero = RecurrentState.zeros(spec)
    args: list[Any] = [torch.zeros(1, spec.n_features), torch.from_numpy(zero.h),
                       torch.from_numpy(zero.c)]  # fmt: skip
    if spec.has_attention:
        assert zero.k is not None and zero.v is not None
        args += [torch.from_numpy(zero.k), torch.from_numpy(zero.v), torch.zeros(spec.window)]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        # The TorchScript exporter (dynamo=False) needs no onnxscript and yields plain opset 17.
        torch.onnx.export(
            StepModule(model).eval(),
            tuple(args),
            str(path),
            dynamo=False,
            opset_version=OPSET,
            input_names=step_input_names(spec),
            output_names=step_output_names(spec),
            do_constant_folding=True,
        )


def _verify(torch: Any, model: Any, folder: Path, x: F32, tolerance: float) -> float:
    """Largest difference between the ONNX step and the torch full-window forward."""
    from flinkai.anomaly.step import RecurrentState, StepModel

    with torch.no_grad():
        full = model(torch.from_numpy(x[None]))[0].numpy()
    step = StepModel(folder)
    state = RecurrentState.zeros(step.spec)
    worst = 0.0
    for t in range(len(x)):
        y, state = step.step(x[t], state)
        worst = max(worst, abs(y - float(full[t])))
    if worst > tolerance:
        raise AnomalyModelError(
            f"ONNX step differs from the torch forward by {worst:.2e} (> {tolerance:.0e})"
        )
    return worst


def train_model(
    spec: ModelSpec,
    data_dir: Path,
    out: Path | None = None,
    options: TrainOptions | None = None,
    groups: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train a forecaster on the probationary parts of a NAB-layout folder and export it.

    Args:
        spec: Model shape.
        data_dir: NAB-layout folder (``data/<group>/*.csv``, ``combined_windows.json``).
        out: Model folder (default ``$FLINKAI_HOME/models/anomaly/<kind>``); replaced
            atomically.
        options: Training settings.
        groups: Only these NAB groups (default all).
        progress: Called with progress lines.

    Returns:
        The folder, its metadata and the loss curve.

    Raises:
        AnomalyModelError: torch is missing, no series is long enough, or the
            exported step does not match the torch model.
    """
    try:
        import torch
    except ModuleNotFoundError as e:
        raise AnomalyModelError("training needs torch: pip install 'flinkai[torch]'") from e
    from flinkai.anomaly.forecaster import Forecaster

    opts = options or TrainOptions()
    say = progress or (lambda _line: None)
    folder = out or anomaly_models_dir() / spec.kind
    t0 = time.perf_counter()
    seqs = probation_sequences(load_nab_folder(data_dir, groups), opts.max_rows)
    if not seqs:
        raise AnomalyModelError(f"no series with a probationary part in {data_dir}")
    rows = sum(len(x) for _, x, _ in seqs)
    say(f"training {spec.kind} on {len(seqs)} series, {rows} probationary rows")
    torch.manual_seed(opts.seed)
    torch.set_num_threads(opts.threads)
    model = Forecaster(spec)
    fit = _fit(torch, model, seqs, opts, say)
    losses = fit.losses
    # built beside its target and renamed into place: a reader never sees half a model
    with staged_dir(folder) as stage:
        work = stage.path
        _export(torch, model, work / ONNX_FILE)
        torch.save(model.state_dict(), work / TORCH_FILE)
        digest = hashlib.sha256((work / ONNX_FILE).read_bytes()).hexdigest()[:12]
        training = {
            "data": str(data_dir), "series": len(seqs), "rows": rows,
            "options": asdict(opts), "final_loss": losses[-1] if losses else None,
            "best_epoch": fit.best_epoch, "best_val_loss": fit.best_val_loss,
        }  # fmt: skip
        meta = ModelMeta(spec, f"anomaly-{spec.kind}-{digest}", training)
        (work / META_FILE).write_text(meta.to_json(), encoding="utf-8")
        longest = max(seqs, key=lambda s: len(s[1]))[1]
        diff = _verify(torch, model, work, longest, opts.tolerance)
        say(f"  ONNX step vs torch forward over {len(longest)} steps: max |diff| {diff:.1e}")
    return TrainResult(
        folder, meta, time.perf_counter() - t0, losses, fit.val_losses, fit.best_epoch,
        fit.best_val_loss,
    )  # fmt: skip
