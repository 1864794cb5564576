"""The GPU line of the kvcache, llm and rag benches: probed, with the true reason."""

from __future__ import annotations

from typing import Any

import pytest

from flinkai.config import load_config
from flinkai_bench import kvcache, llm, rag
from flinkai_bench.shared import devices
from flinkai_bench.shared.devices import DeviceReport, GpuInfo, gpu_status

GPU = GpuInfo(0, "Fake H200", 143_000.0)
CPU_EP = ("CPUExecutionProvider",)
GPU_EPS = ("CUDAExecutionProvider", "CPUExecutionProvider")
NO_GPU = DeviceReport(CPU_EP, (), "NVML: Driver Not Loaded")
GPU_NO_EP = DeviceReport(CPU_EP, (GPU,))
GPU_WITH_EP = DeviceReport(GPU_EPS, (GPU,))


def test_path_without_gpu_code_is_a_cpu_only_build_whatever_the_probe_saw() -> None:
    without = gpu_status(NO_GPU, None, "the decoder")
    with_gpu = gpu_status(GPU_WITH_EP, None, "the decoder")
    assert without.startswith("CPU-only build: the decoder has no GPU path")
    assert without.endswith("(the probe found no GPU either: NVML: Driver Not Loaded)")
    assert with_gpu.startswith("CPU-only build") and "Fake H200 present, unused" in with_gpu
    assert "n/a (no GPU" not in with_gpu


def test_no_gpu_only_when_the_probe_found_none() -> None:
    assert gpu_status(NO_GPU, "cpu", "the embedder") == "n/a (no GPU: NVML: Driver Not Loaded)"
    assert gpu_status(NO_GPU, "cuda", "the embedder").startswith("n/a (no GPU: NVML")
    configured_cpu = gpu_status(GPU_WITH_EP, "cpu", "the embedder")
    assert configured_cpu.startswith("not used: the embedder runs on the CPU provider")
    assert "Fake H200" in configured_cpu


def test_gpu_provider_that_cannot_run_names_the_reason_and_one_that_can_names_the_device() -> None:
    missing_ep = gpu_status(GPU_NO_EP, "cuda", "the embedder")
    assert missing_ep.startswith("n/a (onnxruntime has no CUDAExecutionProvider")
    assert "no GPU" not in missing_ep
    used = gpu_status(GPU_WITH_EP, "cuda", "the embedder")
    assert used == "Fake H200 (the embedder, CUDAExecutionProvider)"


@pytest.mark.parametrize("module", [kvcache, llm], ids=["kvcache", "llm"])
@pytest.mark.parametrize("report", [NO_GPU, GPU_WITH_EP], ids=["no-gpu", "gpu"])
def test_decoder_benches_probe_and_say_cpu_only_build(
    module: Any, report: DeviceReport, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def probed(self: devices.SystemProbe) -> DeviceReport:
        calls.append(1)
        return report

    monkeypatch.setattr(devices.SystemProbe, "report", probed)
    line = module._gpu_line()
    assert calls == [1]
    assert line.startswith("CPU-only build: the SmolLM2 decoder")
    assert ("Fake H200" in line) == bool(report.gpus)


def test_rag_line_follows_the_embedder_backend_and_provider() -> None:
    base = load_config()
    on_cpu = base.with_overrides(onnx={"provider": "cpu"})
    on_cuda = base.with_overrides(onnx={"provider": "cuda"})
    st = base.with_overrides(embedding={"backend": "sentence_transformers"})
    triton = base.with_overrides(embedding={"backend": "triton"})
    assert rag._gpu_status(on_cpu, NO_GPU).startswith("n/a (no GPU: NVML")
    assert rag._gpu_status(on_cpu, GPU_WITH_EP).startswith("not used: the embedder")
    assert rag._gpu_status(on_cuda, GPU_WITH_EP).startswith("Fake H200 (the embedder")
    assert rag._gpu_status(st, GPU_WITH_EP).startswith("CPU-only build: the embedder")
    assert rag._gpu_status(triton, NO_GPU).startswith("on the Triton server's device")
    for line in (rag._gpu_status(c, NO_GPU) for c in (on_cpu, st, triton)):
        assert line.endswith("the Chroma index searches on the CPU")
