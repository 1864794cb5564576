"""The Helm chart's autoscaling contract, read from the chart itself.

The HPA (``templates/taskmanager-hpa.yaml``) names metrics and targets; the
prometheus-adapter ConfigMap (``templates/prometheus-adapter-configmap.yaml``) says which
series serve each metric and with what PromQL. Tests and benchmarks evaluate that PromQL
on a real Prometheus, so it is taken from the rendered chart, never copied:

- with ``helm`` (built by ``.ci/deploy-check``, as in CI), :func:`render` runs ``helm
  template`` and reads the two objects from its output;
- without it, the same objects are rendered from ``values.yaml`` by filling the only
  template construct the rules hold, ``{{ .Values.a.b }}`` (anything else is refused),
  and the HPA's three fields from the same values. A unit test compares both renders
  where helm exists.

:meth:`AdapterRule.promql` then fills the adapter's own ``<<.Series>>``,
``<<.LabelMatchers>>`` and ``<<.GroupBy>>`` the way prometheus-adapter does.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from flinkai_bench.autoscaling.errors import ChartError
from flinkai_bench.autoscaling.hpa import MetricTarget

__all__ = [
    "AdapterRule",
    "ChartAutoscaling",
    "HpaMetric",
    "default_chart",
    "flink_label_value",
    "helm_command",
    "render",
]

_REPO = Path(__file__).resolve().parents[3]
#: A Go template action with the whitespace around it ("{{-" and "-}}" trim it, as helm
#: does); the rules may only use ``{{ .Values.path }}``.
_ACTION = re.compile(r"(\s*)\{\{(-?)\s*(.*?)\s*(-?)\}\}(\s*)")
_VALUES_REF = re.compile(r"^\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)$")
#: Flink's reporter writes label values with these characters as "_" (the HPA template).
_LABEL_UNSAFE = re.compile(r"[^a-zA-Z0-9:_]")


def flink_label_value(text: str) -> str:
    """``text`` as Flink's Prometheus reporter writes it in a label value."""
    return _LABEL_UNSAFE.sub("_", text)


def default_chart() -> Path:
    """``k8s/helm/flinkai`` of the source tree this package runs from."""
    return _REPO / "k8s" / "helm" / "flinkai"


def helm_command(repo: Path = _REPO) -> list[str] | None:
    """How to run helm as ``.ci/deploy-check`` set it up, or ``None`` when it is not set up."""
    script = repo / ".ci" / "deploy-check"
    if not script.is_file():
        return None
    ready = subprocess.run([str(script), "ready"], capture_output=True, timeout=60, cwd=repo)
    return [str(script), "tool", "helm"] if ready.returncode == 0 else None


@dataclass(frozen=True)
class AdapterRule:
    """One prometheus-adapter rule as the rendered ConfigMap holds it.

    Attributes:
        external: From ``externalRules`` (external.metrics.k8s.io), else ``rules``.
        series_query: The selector the adapter discovers series with.
        matches: Regex on the discovered series name.
        name_as: The metric name the HPA asks for.
        metrics_query: The query template (``<<.Series>>`` etc.).
        resources: Prometheus label -> Kubernetes resource it maps to.
    """

    external: bool
    series_query: str
    matches: str
    name_as: str
    metrics_query: str
    resources: Mapping[str, str]

    @classmethod
    def parse(cls, raw: Mapping[str, Any], external: bool) -> AdapterRule:
        overrides = (raw.get("resources") or {}).get("overrides") or {}
        return cls(
            external=external,
            series_query=str(raw["seriesQuery"]),
            matches=str(raw["name"]["matches"]),
            name_as=str(raw["name"]["as"]),
            metrics_query=str(raw["metricsQuery"]),
            resources={str(k): str(v["resource"]) for k, v in overrides.items()},
        )

    def metric_name(self, series: str) -> str | None:
        """The name the adapter serves ``series`` under, or ``None`` if the rule skips it."""
        return self.name_as if re.search(self.matches, series) else None

    def promql(self, series: str, matchers: Mapping[str, str], group_by: Sequence[str]) -> str:
        """The query the adapter sends for ``series``.

        Args:
            series: The discovered series name (``<<.Series>>``).
            matchers: Label -> value, rendered as exact matchers (``<<.LabelMatchers>>``):
                the namespace, and for an external metric the HPA's selector labels.
            group_by: Labels of ``<<.GroupBy>>`` (``pod`` for a Pods metric, the
                namespace for a namespaced external one).
        """
        label_matchers = ",".join(f'{k}="{v}"' for k, v in matchers.items())
        return (
            self.metrics_query.replace("<<.Series>>", series)
            .replace("<<.LabelMatchers>>", label_matchers)
            .replace("<<.GroupBy>>", ",".join(group_by))
        )


@dataclass(frozen=True)
class HpaMetric:
    """One metric of the rendered HPA.

    Attributes:
        type: ``External`` or ``Pods``.
        name: The metric name (served by an adapter rule's ``name_as``).
        target: Its ``averageValue`` as a number (``750m`` -> 0.75).
        selector: An external metric's ``matchLabels``.
    """

    type: str
    name: str
    target: float
    selector: Mapping[str, str]


@dataclass(frozen=True)
class ChartAutoscaling:
    """What the chart renders for autoscaling.

    Attributes:
        rules: Every adapter rule (custom, then external).
        metrics: The HPA's metrics, by name.
        behavior: The HPA's ``behavior`` block as rendered.
        min_replicas / max_replicas: The HPA's bounds.
        rendered_by: ``helm`` or ``values``.
    """

    rules: tuple[AdapterRule, ...]
    metrics: Mapping[str, HpaMetric]
    behavior: Mapping[str, Any]
    min_replicas: int
    max_replicas: int
    rendered_by: str

    def targets(self) -> list[MetricTarget]:
        """Every HPA metric as :class:`~flinkai_bench.autoscaling.hpa.HorizontalPodAutoscaler` takes it."""
        return [MetricTarget(m.name, m.type, m.target) for m in self.metrics.values()]

    def rule(self, metric: str) -> AdapterRule:
        """The rule that serves ``metric`` to the HPA.

        Raises:
            ChartError: No rule does.
        """
        for rule in self.rules:
            if rule.name_as == metric:
                return rule
        raise ChartError(f"no prometheus-adapter rule serves {metric!r}")


def _quantity(text: str) -> float:
    """A Kubernetes quantity (``10``, ``750m``, ``1.5``) as a float."""
    text = str(text)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _set_path(values: dict[str, Any], dotted: str, value: Any) -> None:
    node = values
    *parents, last = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


def _get_path(values: Mapping[str, Any], dotted: str) -> Any:
    node: Any = values
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            raise ChartError(f"the chart's values have no {dotted}")
        node = node[key]
    return node


def _fill_values(text: str, values: Mapping[str, Any]) -> str:
    def one(match: re.Match[str]) -> str:
        before, trim_left, action, trim_right, after = match.groups()
        ref = _VALUES_REF.match(action)
        if ref is None:
            raise ChartError(
                f"template action {match.group(0)!r} needs helm (only {{{{ .Values.x }}}} "
                "is rendered without it): run .ci/deploy-check setup"
            )
        value = str(_get_path(values, ref.group(1)[1:]))
        return ("" if trim_left else before) + value + ("" if trim_right else after)

    return _ACTION.sub(one, text)


def _from_values(
    chart: Path, overrides: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(adapter config, HPA) rendered from values.yaml alone."""
    values = yaml.safe_load((chart / "values.yaml").read_text(encoding="utf-8"))
    for key, value in overrides.items():
        _set_path(values, key, value)
    adapter = values["prometheusAdapter"]
    # The ConfigMap template passes each list through toYaml and tpl.
    config = {
        "rules": yaml.safe_load(_fill_values(yaml.safe_dump(adapter["rules"]["custom"]), values)),
        "externalRules": yaml.safe_load(
            _fill_values(yaml.safe_dump(adapter["rules"]["external"]), values)
        ),
    }
    a = values["autoscaling"]
    metrics: list[dict[str, Any]] = []
    if a["backlog"]["enabled"]:
        job = flink_label_value(values["job"]["pipelineName"])
        metrics.append(
            {
                "type": "External",
                "external": {
                    "metric": {
                        "name": a["backlog"]["metricName"],
                        "selector": {"matchLabels": {"job_name": job}},
                    },
                    "target": {"averageValue": a["backlog"]["averageValuePerReplica"]},
                },
            }
        )
    gpu = values["taskmanager"]["gpu"]["enabled"] and values["metrics"]["gpu"]["enabled"]
    for key, on in (
        ("gpuUtilization", a["gpuUtilization"]["enabled"] and gpu),
        ("embeddedRows", a["embeddedRows"]["enabled"]),
        ("embeddingBatchMs", a["embeddingBatchMs"]["enabled"]),
    ):
        if on:
            metrics.append(
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": a[key]["metricName"]},
                        "target": {"averageValue": a[key]["averageValue"]},
                    },
                }
            )
    hpa = {
        "spec": {
            "minReplicas": a["minReplicas"],
            "maxReplicas": a["maxReplicas"],
            "metrics": metrics,
            "behavior": a["behavior"],
        }
    }
    return config, hpa


def _from_helm(
    helm: list[str], chart: Path, overrides: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(adapter config, HPA) from ``helm template``."""
    args = [*helm, "template", "flinkai", str(chart), "--kube-version", "1.31.0"]
    for key, value in overrides.items():
        args += ["--set-string" if isinstance(value, str) else "--set", f"{key}={value}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=_REPO)
    if result.returncode != 0:
        raise ChartError(f"helm template failed: {result.stderr.strip()}")
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    configs = [
        d for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in (d.get("data") or {})
    ]
    hpas = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    if len(configs) != 1 or len(hpas) != 1:
        raise ChartError(
            f"expected one adapter ConfigMap and one HPA, rendered {len(configs)} and {len(hpas)}"
        )
    return yaml.safe_load(configs[0]["data"]["config.yaml"]), hpas[0]


def render(
    chart: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    use_helm: bool | None = None,
) -> ChartAutoscaling:
    """Render the chart's adapter rules and HPA.

    Args:
        chart: The chart folder (default :func:`default_chart`).
        overrides: ``--set`` values, by dotted path (``autoscaling.backlog.window``).
        use_helm: ``True`` requires helm, ``False`` renders from values; ``None``
            uses helm when ``.ci/deploy-check`` has set it up.

    Raises:
        ChartError: helm was required but is not set up, or rendering failed.
    """
    chart = chart or default_chart()
    overrides = dict(overrides or {})
    helm = helm_command() if use_helm is not False else None
    if use_helm and helm is None:
        raise ChartError("helm is not set up: run .ci/deploy-check setup (make deploy-check)")
    if helm is not None:
        config, hpa = _from_helm(helm, chart, overrides)
        by = "helm"
    else:
        config, hpa = _from_values(chart, overrides)
        by = "values"
    rules = tuple(AdapterRule.parse(r, external=False) for r in config.get("rules") or []) + tuple(
        AdapterRule.parse(r, external=True) for r in config.get("externalRules") or []
    )
    metrics: dict[str, HpaMetric] = {}
    for m in hpa["spec"]["metrics"]:
        body = m[m["type"].lower()]
        metric = body["metric"]
        metrics[metric["name"]] = HpaMetric(
            type=m["type"],
            name=metric["name"],
            target=_quantity(body["target"]["averageValue"]),
            selector=dict((metric.get("selector") or {}).get("matchLabels") or {}),
        )
    spec = hpa["spec"]
    return ChartAutoscaling(
        rules=rules,
        metrics=metrics,
        behavior=dict(spec.get("behavior") or {}),
        min_replicas=int(spec["minReplicas"]),
        max_replicas=int(spec["maxReplicas"]),
        rendered_by=by,
    )
