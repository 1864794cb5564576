"""GPU rows of the embed bench, driven by an injected device probe (no GPU needed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from flinkai.backends.base import BatchResult, ColdStart
from flinkai.config import OnnxConfig
from flinkai_bench.embed.gpu import GPU_ROWS, GpuRow, measure_gpu, plan_gpu_rows
from flinkai_bench.shared.devices import DeviceReport, GpuInfo, GpuMemorySampler

GPU = GpuInfo(0, "Fake GPU 80GB", 81920.0)
WITH_GPU = DeviceReport(
    ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"), (GPU,)
)
NO_GPU = DeviceReport(("CPUExecutionProvider",), (), "NVML: Driver Not Loaded")


class FakeProbe:
    """A probe with fixed answers; memory readings rise while the row runs."""

    def __init__(self, report: DeviceReport, context_s: float = 0.75) -> None:
        self._report = report
        self._context_s = context_s
        self.readings = iter([500.0, 900.0, 2500.0, 1800.0])
        self.last = 500.0

    def report(self) -> DeviceReport:
        return self._report

    def cuda_context_s(self, index: int = 0) -> float | None:
        return self._context_s if self._report.gpus else None

    def memory_used_mb(self, index: int = 0) -> float | None:
        self.last = next(self.readings, self.last)
        return self.last


class FakeBackend:
    """Stands in for the ONNX backend on the requested provider."""

    def __init__(self, onnx: OnnxConfig, batch_size: int, provider: str | None = None) -> None:
        self.onnx = onnx
        self.batch_size = batch_size
        self.cold_start = ColdStart()
        self._provider = (
            provider
            or {
                "cuda": "CUDAExecutionProvider",
                "tensorrt": "TensorrtExecutionProvider",
            }[onnx.provider]
        )
        self.calls = 0

    def load(self) -> None:
        self.cold_start.phases_s.update(
            artifacts_verify=0.1, session_create=1.5, tokenizer_load=0.05, warmup_first_batch=0.3
        )

    @property
    def providers(self) -> list[str]:
        return [self._provider, "CPUExecutionProvider"]

    def infer_batch(self, batch: Sequence[str]) -> BatchResult:
        self.calls += 1
        return BatchResult(np.zeros((len(batch), 384), dtype=np.float32), "fake")

    def close(self) -> None:
        pass


TEXTS = [f"text {i}" for i in range(10)]


def test_without_a_gpu_every_row_is_na_with_a_reason() -> None:
    plan = plan_gpu_rows(NO_GPU)
    assert [row for row, _ in plan] == list(GPU_ROWS)
    for _, reason in plan:
        assert reason is not None and reason.startswith("no GPU: NVML: Driver Not Loaded")


@pytest.mark.parametrize("row", GPU_ROWS, ids=lambda r: r.label)
def test_row_without_a_gpu_carries_no_number(row: GpuRow) -> None:
    result = measure_gpu(
        TEXTS,
        {"provider": row.provider, "variant": row.variant},
        probe=FakeProbe(NO_GPU),
        backend_factory=lambda *a: pytest.fail("no backend may be built without a GPU"),
    )
    assert result.note.startswith("n/a (no GPU")
    assert result.texts_per_s is None and result.p50_ms is None and result.p99_ms is None
    assert "cold_start_s" not in result.extra and "gpu_memory_mb" not in result.extra


def test_gpu_present_row_is_built_from_the_probe() -> None:
    built: list[FakeBackend] = []

    def factory(onnx: OnnxConfig, batch: int) -> FakeBackend:
        built.append(FakeBackend(onnx, batch))
        return built[-1]

    result = measure_gpu(
        TEXTS,
        {"provider": "cuda", "variant": "fp16", "batch_size": 8, "chunk": 4},
        probe=FakeProbe(WITH_GPU, context_s=0.75),
        backend_factory=factory,
    )
    assert result.name == "ORT CUDA fp16"
    (backend,) = built
    assert (backend.onnx.provider, backend.onnx.variant, backend.batch_size) == ("cuda", "fp16", 8)
    assert backend.calls == 3  # 10 texts in calls of 4
    assert result.texts == 10 and result.texts_per_s is not None and result.texts_per_s > 0
    assert result.extra["gpu"] == "Fake GPU 80GB"
    assert result.extra["cold_start_s"] == pytest.approx(
        {"cuda_context": 0.75, "model_load": 1.6, "tokenizer_load": 0.05, "first_inference": 0.3}
    )
    memory = result.extra["gpu_memory_mb"]
    assert memory["peak_used"] == 2500.0 and memory["baseline_used"] == 500.0
    assert memory["added"] == 2000.0 and memory["total"] == 81920.0
    assert "Fake GPU 80GB" in result.note and "2500 MB" in result.note


def test_session_that_falls_back_to_cpu_is_a_failure_not_a_figure() -> None:
    result = measure_gpu(
        TEXTS,
        {"provider": "tensorrt", "variant": "fp32"},
        probe=FakeProbe(WITH_GPU),
        backend_factory=lambda onnx, batch: FakeBackend(onnx, batch, "CPUExecutionProvider"),
    )
    assert result.note.startswith("failed: session runs on CPUExecutionProvider")
    assert result.texts_per_s is None


def test_gpu_without_the_gpu_build_of_onnxruntime_names_the_extra() -> None:
    report = DeviceReport(("CPUExecutionProvider",), (GPU,))
    reason = report.unavailable_reason("cuda")
    assert reason is not None and "onnxruntime-gpu" in reason
    assert report.unavailable_reason("cpu") is None


def test_memory_sampler_keeps_baseline_and_peak() -> None:
    probe: Any = FakeProbe(WITH_GPU)
    with GpuMemorySampler(probe, interval_s=60.0) as memory:
        memory.sample()
    # entry: baseline 500 then 900; in the block 2500; exit 1800
    assert (memory.baseline_mb, memory.peak_mb, memory.added_mb) == (500.0, 2500.0, 2000.0)
