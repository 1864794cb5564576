"""gpu_utilization_ratio: present per GPU with a (fake) NVML, absent without a GPU.

The exporter is served over real HTTP and read back with flinkai.metrics.scrape, the
same parser the autoscaling checks use; only NVML is faked, since CI has no GPU.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import start_http_server

from flinkai import gpu_metrics, metrics


class _NVMLError(Exception):
    pass


@dataclass
class _Rates:
    gpu: int
    memory: int = 0


class _FakeNvml:
    """The pynvml calls the collector makes, over a fixed list of utilisation percents."""

    NVMLError = _NVMLError

    def __init__(self, percents: list[int | None], init_error: bool = False) -> None:
        self.percents = percents
        self.init_error = init_error
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_error:
            raise _NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.percents)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> _Rates:
        percent = self.percents[handle]
        if percent is None:
            raise _NVMLError("Not Supported")
        return _Rates(gpu=percent)

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-{handle:04d}".encode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[Any] = []

    def _serve(nvml: Any | None) -> dict[str, list[tuple[dict[str, str], float]]]:
        port = _free_port()
        server, thread = start_http_server(port, "127.0.0.1", gpu_metrics.registry(nvml))
        servers.append((server, thread))
        return metrics.scrape(f"http://127.0.0.1:{port}/metrics")

    yield _serve
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_each_gpu_is_a_ratio_series(serve: Any) -> None:
    samples = serve(_FakeNvml([42, 100]))
    series = sorted(samples[gpu_metrics.GPU_UTILIZATION], key=lambda s: s[0]["gpu"])
    assert series == [
        ({"gpu": "0", "uuid": "GPU-0000"}, 0.42),
        ({"gpu": "1", "uuid": "GPU-0001"}, 1.0),
    ]


def test_a_device_without_a_reading_is_left_out_not_zeroed(serve: Any) -> None:
    samples = serve(_FakeNvml([None, 7]))
    assert samples[gpu_metrics.GPU_UTILIZATION] == [({"gpu": "1", "uuid": "GPU-0001"}, 0.07)]
    assert gpu_metrics.GPU_UTILIZATION not in serve(_FakeNvml([None]))


def test_no_gpu_means_no_series(serve: Any) -> None:
    assert serve(None) == {}


@pytest.mark.parametrize(
    ("nvml", "expect_loaded"),
    [
        (_FakeNvml([55]), True),
        (_FakeNvml([]), False),  # driver but no device visible to this container
        (_FakeNvml([55], init_error=True), False),  # no driver
    ],
    ids=["gpu", "no-device", "no-driver"],
)
def test_load_nvml(monkeypatch: pytest.MonkeyPatch, nvml: _FakeNvml, expect_loaded: bool) -> None:
    module = types.ModuleType("pynvml")
    for name in dir(nvml):
        if name.startswith("nvml") or name == "NVMLError":
            setattr(module, name, getattr(nvml, name))
    monkeypatch.setitem(sys.modules, "pynvml", module)
    loaded = gpu_metrics.load_nvml()
    assert (loaded is module) == expect_loaded
    if not expect_loaded:
        assert loaded is None


def test_load_nvml_without_the_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert gpu_metrics.load_nvml() is None


def test_real_binding_on_this_machine() -> None:
    """With nvidia-ml-py installed: None on a machine without a driver, a module with one."""
    pynvml = pytest.importorskip("pynvml")
    nvml = gpu_metrics.load_nvml()
    if nvml is None:
        collected = list(gpu_metrics.GpuUtilizationCollector(nvml).collect())
        assert collected == []
        return
    assert nvml is pynvml
    (family,) = gpu_metrics.GpuUtilizationCollector(nvml).collect()
    assert all(0.0 <= s.value <= 1.0 for s in family.samples)


def test_the_charts_command_serves_an_empty_endpoint_without_a_gpu() -> None:
    """`python -m flinkai.gpu_metrics --port P`, as the TaskManager container starts it."""
    if gpu_metrics.load_nvml() is not None:
        pytest.skip("this machine has a GPU")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flinkai.gpu_metrics", "--port", str(port), "--host", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                samples = metrics.scrape(f"http://127.0.0.1:{port}/metrics", timeout_s=2)
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "exporter did not start"
                time.sleep(0.2)
        assert samples == {}
    finally:
        proc.terminate()
        proc.wait(10)
