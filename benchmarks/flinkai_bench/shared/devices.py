"""What accelerators a benchmark can use: ORT providers, NVML devices, CUDA start-up.

Benchmarks never guess a GPU figure. A row that needs a device asks a
:class:`DeviceProbe` first; when the probe finds none, the row is ``n/a`` with the
reason (:meth:`DeviceReport.unavailable_reason`) and carries no number. The probe is
a protocol so tests inject a fake one and exercise the GPU path on a CPU machine.
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "PROVIDER_NAMES",
    "DeviceProbe",
    "DeviceReport",
    "GpuInfo",
    "GpuMemorySampler",
    "SystemProbe",
    "gpu_status",
]

#: ``OnnxConfig.provider`` -> the ONNX Runtime execution provider it needs.
PROVIDER_NAMES: dict[str, str] = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}


@dataclass(frozen=True)
class GpuInfo:
    """One device as NVML reports it."""

    index: int
    name: str
    memory_total_mb: float


@dataclass(frozen=True)
class DeviceReport:
    """The devices a run can use.

    Attributes:
        ort_providers: ``onnxruntime.get_available_providers()``.
        gpus: Devices NVML sees (empty without a driver or ``nvidia-ml-py``).
        nvml_note: Why NVML saw nothing, when it did not.
    """

    ort_providers: tuple[str, ...] = ()
    gpus: tuple[GpuInfo, ...] = ()
    nvml_note: str = ""

    def unavailable_reason(self, provider: str) -> str | None:
        """None when ``provider`` (``cuda``, ``tensorrt``) can run here, else why not.

        The reason starts with ``no GPU`` when there is no device at all, so a table
        prints ``n/a (no GPU: ...)``.
        """
        needed = PROVIDER_NAMES.get(provider)
        if needed is None:
            return f"unknown provider {provider!r}"
        if provider == "cpu":
            return None
        has_ep = needed in self.ort_providers
        if not self.gpus:
            why = [self.nvml_note or "NVML sees no device"]
            if not has_ep:
                why.append(f"onnxruntime has no {needed}")
            return "no GPU: " + "; ".join(why)
        if not has_ep:
            return f"onnxruntime has no {needed} (install the [gpu] extra: onnxruntime-gpu)"
        return None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for results files."""
        return {
            "ort_providers": list(self.ort_providers),
            "gpus": [
                {"index": g.index, "name": g.name, "memory_total_mb": g.memory_total_mb}
                for g in self.gpus
            ],
            "nvml_note": self.nvml_note,
        }


def gpu_status(report: DeviceReport, provider: str | None, what: str) -> str:
    """A bench's GPU line: which device its measured path used, or the true reason it used none.

    Args:
        report: What the probe found (:meth:`DeviceProbe.report`).
        provider: The ORT provider the path ran on (``cpu``, ``cuda``, ``tensorrt``), or
            None when the path has no GPU code at all.
        what: The path, e.g. ``"the SmolLM2 decoder (ONNX Runtime)"``.

    Returns:
        ``CPU-only build: ...`` when the path cannot use a GPU (whatever the probe saw),
        ``n/a (no GPU: ...)`` only when the probe found no device, ``not used: ...`` for
        a GPU-capable path configured for the CPU on a machine with a GPU, the device
        name when it ran there, and ``n/a (<reason>)`` when a GPU provider cannot run.
    """
    names = ", ".join(g.name for g in report.gpus)
    if provider is None:
        note = report.nvml_note or "NVML sees no device"
        seen = f"{names} present, unused" if names else f"the probe found no GPU either: {note}"
        return f"CPU-only build: {what} has no GPU path ({seen})"
    if provider == "cpu":
        if not report.gpus:
            return f"n/a (no GPU: {report.nvml_note or 'NVML sees no device'})"
        return f"not used: {what} runs on the CPU provider by configuration; {names} present"
    reason = report.unavailable_reason(provider)
    if reason is not None:
        return f"n/a ({reason})"
    return f"{names} ({what}, {PROVIDER_NAMES[provider]})"


class DeviceProbe(Protocol):
    """Where a benchmark learns about devices; :class:`SystemProbe` asks the real machine."""

    def report(self) -> DeviceReport:
        """Providers and devices, without creating a CUDA context."""
        ...

    def cuda_context_s(self, index: int = 0) -> float | None:
        """Seconds to create (retain) the primary CUDA context of a device; None without one."""
        ...

    def memory_used_mb(self, index: int = 0) -> float | None:
        """Device memory in use now (all processes), or None when it cannot be read."""
        ...


class SystemProbe:
    """The real machine: onnxruntime, NVML (``nvidia-ml-py``) and ``libcuda`` via ctypes."""

    def __init__(self) -> None:
        self._nvml: Any | None = None
        self._nvml_note = ""
        self._nvml_tried = False

    def _load_nvml(self) -> Any | None:
        if self._nvml_tried:
            return self._nvml
        self._nvml_tried = True
        try:
            import pynvml
        except ImportError:
            self._nvml_note = "nvidia-ml-py not installed"
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:  # no driver: the normal case on CPU machines
            self._nvml_note = f"NVML: {e}"
            return None
        self._nvml = pynvml
        return pynvml

    def report(self) -> DeviceReport:
        import onnxruntime as ort

        providers = tuple(ort.get_available_providers())
        nvml = self._load_nvml()
        gpus: list[GpuInfo] = []
        if nvml is not None:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name = nvml.nvmlDeviceGetName(handle)
                total = nvml.nvmlDeviceGetMemoryInfo(handle).total
                gpus.append(
                    GpuInfo(
                        index,
                        name.decode() if isinstance(name, bytes) else str(name),
                        total / 2**20,
                    )
                )
            if not gpus:
                self._nvml_note = "NVML sees no device"
        return DeviceReport(providers, tuple(gpus), self._nvml_note)

    def cuda_context_s(self, index: int = 0) -> float | None:
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
        except OSError:
            return None
        # The primary context is the one the CUDA runtime (and so ORT) will reuse, so
        # retaining it here takes the context cost out of the session-create phase.
        t0 = time.perf_counter()
        device = ctypes.c_int()
        context = ctypes.c_void_p()
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(device), index) != 0:
            return None
        if cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) != 0:
            return None
        return time.perf_counter() - t0

    def memory_used_mb(self, index: int = 0) -> float | None:
        nvml = self._load_nvml()
        if nvml is None:
            return None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            return float(nvml.nvmlDeviceGetMemoryInfo(handle).used) / 2**20
        except nvml.NVMLError:
            return None


@dataclass
class GpuMemorySampler:
    """Peak device memory in use while a block runs, polled from a probe.

    NVML reports the whole device, so the baseline read on entry is kept too: the
    difference is what the block added, when nothing else runs on the device.
    """

    probe: DeviceProbe
    index: int = 0
    interval_s: float = 0.05
    baseline_mb: float | None = None
    peak_mb: float | None = None
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def __enter__(self) -> GpuMemorySampler:
        self.baseline_mb = self.probe.memory_used_mb(self.index)
        self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        used = self.probe.memory_used_mb(self.index)
        if used is not None:
            self.peak_mb = used if self.peak_mb is None else max(self.peak_mb, used)

    @property
    def added_mb(self) -> float | None:
        """Peak minus the baseline; None when either was never read."""
        if self.peak_mb is None or self.baseline_mb is None:
            return None
        return self.peak_mb - self.baseline_mb
