"""GPU utilisation for the autoscaler: ``gpu_utilization_ratio``, read from NVML per scrape.

A small Prometheus endpoint that runs in the TaskManager container next to Flink (the
Helm chart starts it with ``python -m flinkai.gpu_metrics``). It is not a Flink operator
metric (:mod:`flinkai.metrics`) because:

- utilisation belongs to the device, not to an operator or subtask, and the pod owns the
  device: one series per GPU of the pod is what the HPA averages;
- Python operator metrics reach the JVM only when a bundle finishes, so on an idle
  TaskManager they would keep the last busy value and block scale-down; this endpoint
  asks NVML at scrape time, so the value is never older than the scrape;
- PyFlink counters carry integers, a ratio does not fit.

The series is **absent** when NVML cannot be loaded (no ``nvidia-ml-py``, no driver) or
sees no device, and for a device whose reading fails. It is never written as 0 in place
of "unknown": an HPA must not read a missing GPU as an idle one.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = [
    "DEFAULT_PORT",
    "GPU_UTILIZATION",
    "GpuUtilizationCollector",
    "load_nvml",
    "main",
    "registry",
]

#: Exported name; the chart's prometheus-adapter rule serves it to the HPA as is.
GPU_UTILIZATION = "gpu_utilization_ratio"
#: Next to Flink's reporter port (9249) in the chart.
DEFAULT_PORT = 9250

log = logging.getLogger(__name__)


def load_nvml() -> Any | None:
    """The initialised ``pynvml`` module (nvidia-ml-py), or None when there is no usable GPU."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() < 1:
            pynvml.nvmlShutdown()
            return None
    except pynvml.NVMLError as e:  # no driver / library: the normal case on CPU nodes
        log.info("NVML unavailable (%s): %s is not exported", e, GPU_UTILIZATION)
        return None
    return pynvml


class GpuUtilizationCollector(Collector):
    """Samples every visible GPU when Prometheus scrapes.

    Args:
        nvml: An initialised NVML binding (:func:`load_nvml`), or None for no GPU.
    """

    def __init__(self, nvml: Any | None) -> None:
        self._nvml = nvml

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Registration must not call NVML: describe without sampling.
        if self._nvml is not None:
            yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        nvml = self._nvml
        if nvml is None:
            return
        family = self._family()
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                # Percent of the last sample period (1/6 s to 1 s) a kernel was running.
                percent = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                uuid = nvml.nvmlDeviceGetUUID(handle)
            except nvml.NVMLError as e:
                log.warning("GPU %d: no utilisation reading (%s)", index, e)
                continue
            family.add_metric([str(index), _text(uuid)], percent / 100.0)
        if family.samples:
            yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            GPU_UTILIZATION,
            "fraction of the last NVML sample period a kernel ran on the GPU (0-1)",
            labels=["gpu", "uuid"],
        )


def _text(value: str | bytes) -> str:
    # Older NVML bindings return bytes.
    return value.decode() if isinstance(value, bytes) else value


def registry(nvml: Any | None) -> CollectorRegistry:
    """A registry with only the GPU collector (no process or platform metrics)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(GpuUtilizationCollector(nvml))
    return reg


def main(argv: Sequence[str] | None = None) -> int:
    """Serve ``/metrics`` until killed; with no GPU the endpoint stays up and empty."""
    parser = argparse.ArgumentParser(prog="python -m flinkai.gpu_metrics", description=__doc__)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--host", default="0.0.0.0")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    nvml = load_nvml()
    if nvml is None:
        log.info("no GPU visible: %s is not exported", GPU_UTILIZATION)
    start_http_server(args.port, args.host, registry(nvml))
    log.info("serving %s on %s:%d/metrics", GPU_UTILIZATION, args.host, args.port)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
