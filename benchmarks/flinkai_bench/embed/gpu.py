"""The GPU rows of the embed matrix: ONNX Runtime on CUDA or TensorRT, fp32 and fp16.

Each row runs the ONNX backend with ``onnx.provider`` and ``onnx.variant`` set, so it
measures the code path a job would use. Where the device probe finds no GPU (or the
CPU build of onnxruntime), the row is ``n/a`` with the reason and carries no figure.
A session that silently falls back to the CPU provider is reported as failed, not as
a GPU number.

Cold start is split by phase: CUDA context (retained before the session, so it is
not hidden in the model load), model load (artifact check plus session create),
tokenizer load, and the first inference (the backend's warm-up batch). Peak device
memory comes from NVML, polled while the row runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from flinkai.config import OnnxConfig
from flinkai_bench.embed.results import VariantResult
from flinkai_bench.embed.stats import percentiles
from flinkai_bench.shared.devices import (
    PROVIDER_NAMES,
    DeviceProbe,
    DeviceReport,
    GpuMemorySampler,
    SystemProbe,
)

__all__ = ["GPU_ROWS", "GPU_VARIANTS", "GpuRow", "measure_gpu", "plan_gpu_rows"]

Provider = Literal["cuda", "tensorrt"]
Precision = Literal["fp32", "fp16"]

#: Builds a backend (``load``, ``infer_batch``, ``providers``, ``cold_start``, ``close``)
#: from the session options and the sub-batch size.
BackendFactory = Callable[[OnnxConfig, int], Any]


@dataclass(frozen=True)
class GpuRow:
    """One GPU row: an execution provider and a model variant."""

    provider: Provider
    variant: Precision

    @property
    def label(self) -> str:
        kind = {"cuda": "CUDA", "tensorrt": "TensorRT"}[self.provider]
        return f"ORT {kind} {self.variant}"


GPU_ROWS: tuple[GpuRow, ...] = (
    GpuRow("cuda", "fp32"),
    GpuRow("cuda", "fp16"),
    GpuRow("tensorrt", "fp32"),
    GpuRow("tensorrt", "fp16"),
)


def plan_gpu_rows(
    report: DeviceReport, rows: Sequence[GpuRow] = GPU_ROWS
) -> list[tuple[GpuRow, str | None]]:
    """Each row with the reason it cannot run here (None: it can)."""
    return [(row, report.unavailable_reason(row.provider)) for row in rows]


def _default_factory(onnx: OnnxConfig, batch_size: int) -> Any:
    from flinkai.backends.onnx import OnnxEmbeddingBackend
    from flinkai.config import load_config

    config = load_config()
    return OnnxEmbeddingBackend(
        config, onnx=onnx, embedding=replace(config.embedding, batch_size=batch_size)
    )


def measure_gpu(
    texts: list[str],
    args: dict[str, Any],
    *,
    probe: DeviceProbe | None = None,
    backend_factory: BackendFactory | None = None,
) -> VariantResult:
    """Embed ``texts`` on the GPU row ``args`` names; n/a with a reason where it cannot run.

    Args:
        texts: The texts, embedded in calls of ``args["chunk"]`` (default 1024).
        args: ``provider`` (cuda, tensorrt), ``variant`` (fp32, fp16), optional
            ``name``, ``batch_size`` (sub-batch, default 64), ``chunk`` and ``device``.
        probe: Where devices are read from (the real machine by default).
        backend_factory: Builds the backend (the ONNX backend by default).

    Returns:
        The row; its ``extra`` holds the device, cold start by phase and peak memory.
    """
    from flinkai.backends.errors import BackendError
    from flinkai.models.errors import ArtifactError

    row = GpuRow(args["provider"], args["variant"])
    name = str(args.get("name") or row.label)
    probe = probe or SystemProbe()
    report = probe.report()
    reason = report.unavailable_reason(row.provider)
    if reason:
        return VariantResult(name, note=f"n/a ({reason})", extra={"devices": report.as_dict()})
    index = int(args.get("device", 0))
    gpu = next((g for g in report.gpus if g.index == index), report.gpus[0])
    batch = int(args.get("batch_size", 64))
    chunk = int(args.get("chunk", 1024))
    extra: dict[str, Any] = {"devices": report.as_dict(), "gpu": gpu.name}
    context_s = probe.cuda_context_s(gpu.index)
    onnx = OnnxConfig(provider=row.provider, variant=row.variant)
    latencies: list[float] = []
    with GpuMemorySampler(probe, gpu.index) as memory:
        backend = backend_factory(onnx, batch) if backend_factory else _default_factory(onnx, batch)
        try:
            backend.load()
        except ArtifactError as e:  # e.g. model.fp16.onnx not built yet
            return VariantResult(name, note=f"n/a ({e})", extra=extra)
        except BackendError as e:
            return VariantResult(name, note=f"failed: {e}", extra=extra)
        try:
            used = list(backend.providers)
            wanted = PROVIDER_NAMES[row.provider]
            if not used or used[0] != wanted:
                return VariantResult(
                    name,
                    note=f"failed: session runs on {used[0] if used else 'nothing'}, not {wanted}",
                    extra=extra,
                )
            start = time.perf_counter()
            for lo in range(0, len(texts), chunk):
                c0 = time.perf_counter()
                backend.infer_batch(texts[lo : lo + chunk])
                latencies.append((time.perf_counter() - c0) * 1000)
            seconds = time.perf_counter() - start
            phases = dict(backend.cold_start.phases_s)
        finally:
            backend.close()
    load_parts = [phases.get(k) for k in ("artifacts_verify", "session_create")]
    extra["cold_start_s"] = {
        "cuda_context": context_s,
        "model_load": sum(p for p in load_parts if p is not None) if any(load_parts) else None,
        "tokenizer_load": phases.get("tokenizer_load"),
        "first_inference": phases.get("warmup_first_batch"),
    }
    extra["gpu_memory_mb"] = {
        "peak_used": memory.peak_mb,
        "baseline_used": memory.baseline_mb,
        "added": memory.added_mb,
        "total": gpu.memory_total_mb,
    }
    extra["providers"] = used
    p50, p99 = percentiles(latencies)
    peak = f"{memory.peak_mb:.0f} MB" if memory.peak_mb is not None else "n/a"
    return VariantResult(
        name,
        len(texts),
        len(texts) / seconds if seconds > 0 else None,
        p50,
        p99,
        note=f"{gpu.name}; latency per {chunk}-text call, sub-batch {batch}; GPU mem peak {peak}",
        extra=extra,
    )


#: Variants the harness child runs, next to :data:`flinkai_bench.embed.variants.VARIANTS`.
GPU_VARIANTS: dict[str, Callable[[list[str], dict[str, Any]], VariantResult]] = {
    "raw_ort_gpu": measure_gpu,
}
