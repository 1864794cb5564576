"""The HPA's metric reads, as prometheus-adapter serves them, from a real Prometheus.

For each metric of the rendered HPA the adapter rule that serves it is found, its
series discovered with the rule's ``seriesQuery``, and its ``metricsQuery`` filled and
evaluated the way the adapter does: an External metric with the namespace and the
HPA's selector as matchers, grouped by namespace; a Pods metric with the namespace and
``pod=~"<the pods>"``, grouped by pod. A read that fails or returns nothing is an
unavailable metric (:class:`~flinkai_bench.autoscaling.hpa.MetricReading` empty), never
an exception: the controller then holds, as Kubernetes does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flinkai_bench.autoscaling.chart import ChartAutoscaling
from flinkai_bench.autoscaling.hpa import MetricReading

__all__ = ["AdapterReader"]

log = logging.getLogger(__name__)


@dataclass
class AdapterReader:
    """Reads every HPA metric of ``chart`` from ``prometheus`` (``.query``, ``.series``).

    Args:
        chart: The rendered chart.
        prometheus: A :class:`flinkai.local.prometheus.LocalPrometheus` (or alike).
        namespace: The ``namespace`` label the scrape adds (a PodMonitor's).
    """

    chart: ChartAutoscaling
    prometheus: Any
    namespace: str
    errors: int = 0
    _series: dict[str, str] = field(default_factory=dict)

    def _discover(self, metric: str) -> str | None:
        if metric in self._series:
            return self._series[metric]
        rule = self.chart.rule(metric)
        for s in self.prometheus.series(rule.series_query):
            if rule.metric_name(s["__name__"]):
                self._series[metric] = s["__name__"]
                return s["__name__"]
        return None

    def queries(self, pods: Sequence[str]) -> dict[str, str | None]:
        """Metric -> the PromQL the adapter would send now (None: no series yet)."""
        out: dict[str, str | None] = {}
        for name, m in self.chart.metrics.items():
            series = self._discover(name)
            if series is None:
                out[name] = None
                continue
            rule = self.chart.rule(name)
            if m.type == "External":
                q = rule.promql(series, {"namespace": self.namespace, **m.selector}, ["namespace"])
            else:
                # As the adapter does: names joined with "|" (pod names need no escaping,
                # and a PromQL string would refuse a backslash escape like "\-").
                regex = "|".join(pods)
                q = rule.promql(series, {"namespace": self.namespace}, ["pod"]).replace(
                    f'namespace="{self.namespace}"',
                    f'namespace="{self.namespace}",pod=~"{regex}"',
                    1,
                )
            out[name] = q
        return out

    def read(self, pods: Sequence[str]) -> dict[str, MetricReading]:
        """Every metric's reading now; failures and empty results read as unavailable."""
        readings: dict[str, MetricReading] = {}
        try:
            queries = self.queries(pods)
        except Exception as e:  # Prometheus briefly unreachable: every metric missing
            self.errors += 1
            log.warning("series discovery failed: %s: %s", type(e).__name__, e)
            return {name: MetricReading() for name in self.chart.metrics}
        for name, q in queries.items():
            readings[name] = self._one(name, q)
        return readings

    def _one(self, name: str, q: str | None) -> MetricReading:
        if q is None:
            return MetricReading()
        try:
            samples = self.prometheus.query(q)
        except Exception as e:
            self.errors += 1
            log.warning("query for %s failed: %s: %s", name, type(e).__name__, e)
            return MetricReading()
        if self.chart.metrics[name].type == "External":
            return MetricReading(total=samples[0].value) if samples else MetricReading()
        per_pod: Mapping[str, float] = {
            s.labels["pod"]: s.value for s in samples if "pod" in s.labels
        }
        return MetricReading(per_pod=dict(per_pod))
