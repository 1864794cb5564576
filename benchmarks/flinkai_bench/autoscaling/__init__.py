"""Autoscaling as the Helm chart defines it, made checkable on real series.

:mod:`.chart` reads the chart's prometheus-adapter rules and HPA (helm-rendered, or from
its values), and fills the adapter's query templates; :mod:`.hpa` is the HPA's own
replica calculation (ratio, tolerance, stabilisation windows, policies), used by the
harness that adds and removes TaskManagers; :mod:`.adapter` reads each HPA metric
through the adapter's query. The series come from a real Prometheus
(:mod:`flinkai.local.prometheus`).
"""

from flinkai_bench.autoscaling.chart import (
    AdapterRule,
    ChartAutoscaling,
    HpaMetric,
    default_chart,
    helm_command,
    render,
)
from flinkai_bench.autoscaling.errors import ChartError
from flinkai_bench.autoscaling.hpa import (
    HorizontalPodAutoscaler,
    MetricReading,
    MetricTarget,
)

__all__ = [
    "AdapterRule",
    "ChartAutoscaling",
    "ChartError",
    "HorizontalPodAutoscaler",
    "HpaMetric",
    "MetricReading",
    "MetricTarget",
    "default_chart",
    "helm_command",
    "render",
]
