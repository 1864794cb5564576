"""The chart and Dockerfiles through the real tools of .ci/deploy-check.

helm renders the chart, kubeconform validates every object against the Kubernetes 1.31
schemas and prometheus-operator's CRD schemas (offline copies), hadolint lints
Dockerfiles. Broken inputs must fail: a validator that accepts everything would pass
the CI check too. Skipped when `.ci/deploy-check setup` has not built the tools.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from flinkai import gpu_metrics, metrics

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "deploy-check"
CHART = ROOT / "k8s" / "helm" / "flinkai"


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], input=stdin, capture_output=True, text=True, timeout=120, cwd=ROOT
    )


pytestmark = pytest.mark.skipif(
    _run("ready").returncode != 0,
    reason="helm/kubeconform/hadolint not set up: run `make deploy-check` (or .ci/deploy-check setup)",
)


# helm built from source assumes Kubernetes 1.20 unless told, below the chart's kubeVersion.
_HELM_TEMPLATE = ("tool", "helm", "template", "flinkai", str(CHART), "--kube-version", "1.31.0")


@functools.cache
def _render(*helm_args: str) -> str:
    result = _run(*_HELM_TEMPLATE, *helm_args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _objects(manifest: str) -> dict[str, dict[str, Any]]:
    """kind/name -> object."""
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


# -- positive control: what CI renders is valid ----------------------------------------------


@pytest.mark.parametrize(
    "values",
    [None, *sorted((CHART / "ci").glob("*-values.yaml"))],
    ids=lambda p: getattr(p, "stem", "default"),
)
def test_chart_renders_valid_objects(values: Path | None) -> None:
    manifest = _render(*(["-f", str(values)] if values else []))
    result = _run("validate", "-", stdin=manifest)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in result.stdout


# -- negative: broken objects are caught ------------------------------------------------------


@pytest.mark.parametrize(
    ("helm_args", "expected"),
    [
        # A string where Kubernetes wants an integer (core schema, Deployment).
        (
            ["--set", "taskmanager.terminationGracePeriodSeconds=soon"],
            "/spec/template/spec/terminationGracePeriodSeconds",
        ),
        # A Prometheus duration the CRD's pattern refuses (prometheus-operator's schema).
        (
            [
                "--set",
                "metrics.podMonitor.enabled=true",
                "--set",
                "metrics.podMonitor.interval=15 seconds",
            ],
            "/spec/podMetricsEndpoints/0/interval",
        ),
    ],
    ids=["core-type", "crd-pattern"],
)
def test_invalid_values_render_objects_the_validator_rejects(
    helm_args: list[str], expected: str
) -> None:
    result = _run("validate", "-", stdin=_render(*helm_args))
    assert result.returncode != 0
    assert expected in result.stdout, result.stdout


_UNKNOWN_FIELD = """\
apiVersion: v1
kind: Service
metadata:
  name: s
spec:
  ports: [{port: 80}]
  selctor: {app: x}
"""
_UNKNOWN_KIND = """\
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w
"""


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        (_UNKNOWN_FIELD, "additional properties 'selctor' not allowed"),
        # No -ignore-missing-schemas: a kind without a schema is an error, not a skip.
        (_UNKNOWN_KIND, "could not find schema for Widget"),
    ],
    ids=["misspelt-field", "unknown-kind"],
)
def test_strict_validation(manifest: str, expected: str) -> None:
    result = _run("validate", "-", stdin=manifest)
    assert result.returncode != 0
    assert expected in result.stdout, result.stdout


def test_chart_refuses_more_source_subtasks_than_partitions() -> None:
    result = _run(*_HELM_TEMPLATE, "--set", "autoscaling.maxReplicas=13")
    assert result.returncode != 0
    assert "exceeds kafka.sourcePartitions" in result.stderr, result.stderr


def test_hadolint_flags_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN cd /tmp && apt-get install -y curl\n")
    result = _run("tool", "hadolint", str(bad))
    assert result.returncode != 0
    for rule in ("DL3006", "DL3003", "DL3008", "DL3015"):  # untagged, cd, unpinned, recommends
        assert rule in result.stdout, result.stdout


# -- the autoscaling signals as rendered -------------------------------------------------------


def test_hpa_targets_and_windows() -> None:
    objects = _objects(_render())
    hpa = objects["HorizontalPodAutoscaler/flinkai-taskmanager"]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "flinkai-taskmanager",
    }
    targets = {
        m[m["type"].lower()]["metric"]["name"]: m[m["type"].lower()]["target"]
        for m in hpa["spec"]["metrics"]
    }
    assert targets[metrics.BACKLOG_DEPTH] == {"type": "AverageValue", "averageValue": "10"}
    assert targets[gpu_metrics.GPU_UTILIZATION] == {"type": "AverageValue", "averageValue": "750m"}
    assert hpa["spec"]["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 30

    adapter = yaml.safe_load(objects["ConfigMap/flinkai-prometheus-adapter"]["data"]["config.yaml"])
    queries = {
        r["name"]["as"]: r["metricsQuery"] for r in adapter["rules"] + adapter["externalRules"]
    }
    assert "[30s]" in queries[metrics.BACKLOG_DEPTH]
    assert queries[metrics.BACKLOG_DEPTH].endswith("/ 64")  # in batches of embedding.batch_size
    assert "[60s]" in queries[gpu_metrics.GPU_UTILIZATION]

    tm = objects["Deployment/flinkai-taskmanager"]["spec"]["template"]["spec"]["containers"][0]
    assert f"python -m flinkai.gpu_metrics --port {gpu_metrics.DEFAULT_PORT}" in tm["args"][0]
    assert "exec /docker-entrypoint.sh taskmanager" in tm["args"][0]
    assert {"name": "gpu-metrics", "containerPort": gpu_metrics.DEFAULT_PORT} in tm["ports"]


def test_no_gpu_metric_when_taskmanagers_have_no_gpu() -> None:
    objects = _objects(_render("-f", str(CHART / "ci" / "triton-values.yaml")))
    hpa = objects["HorizontalPodAutoscaler/flinkai-taskmanager"]
    names = {m[m["type"].lower()]["metric"]["name"] for m in hpa["spec"]["metrics"]}
    # An HPA metric no pod reports would block every scale-down.
    assert gpu_metrics.GPU_UTILIZATION not in names
    assert metrics.BACKLOG_DEPTH in names
    tm = objects["Deployment/flinkai-taskmanager"]["spec"]["template"]["spec"]["containers"][0]
    assert tm["args"] == ["taskmanager"] and "command" not in tm


# -- values out of range fail helm template, naming the value -----------------------------------


@pytest.mark.parametrize(
    ("helm_args", "expected"),
    [
        (["--set", "autoscaling.minReplicas=0"], "at '/autoscaling/minReplicas': minimum"),
        # values.schema.json refuses a wrong type before anything renders.
        (
            ["--set-string", "autoscaling.minReplicas=one"],
            "at '/autoscaling/minReplicas': got string, want integer",
        ),
        (
            ["--set-string", "autoscaling.backlog.averageValuePerReplica=0"],
            "at '/autoscaling/backlog/averageValuePerReplica'",
        ),
        (
            ["--set-string", "autoscaling.embeddedRows.averageValue=-5"],
            "at '/autoscaling/embeddedRows/averageValue'",
        ),
        (
            ["--set", "autoscaling.behavior.scaleDown.stabilizationWindowSeconds=4000"],
            "at '/autoscaling/behavior/scaleDown/stabilizationWindowSeconds': maximum",
        ),
        (
            ["--set", "autoscaling.behavior.scaleUp.policies[0].periodSeconds=0"],
            "at '/autoscaling/behavior/scaleUp/policies/0/periodSeconds': minimum",
        ),
        (["--set-string", "flink.rescale.cooldown=30 s"], "at '/flink/rescale/cooldown'"),
        (
            ["--set", "flink.resourceStabilizationTimeout=20s"],
            "flink.resourceStabilizationTimeout is gone",
        ),
        (
            ["--set-string", "autoscaling.backlog.endOffsetMatchers={namespace=kafka}"],
            "at '/autoscaling/backlog/endOffsetMatchers'",
        ),
        (
            ["--set-string", "autoscaling.backlog.endOffsetSeries=kafka-log-end"],
            "at '/autoscaling/backlog/endOffsetSeries'",
        ),
        (
            ["--set-string", "autoscaling.backlog.resolution=0s"],
            "at '/autoscaling/backlog/resolution'",
        ),
    ],
    ids=[
        "min-replicas-0",
        "hpa-type",
        "backlog-target-0",
        "rows-target-negative",
        "down-window-too-long",
        "policy-period-0",
        "duration-with-space",
        "deprecated-key",
        "end-offset-matchers-braces",
        "end-offset-series-name",
        "lag-resolution-0",
    ],
)
def test_out_of_range_values_fail_helm_template(helm_args: list[str], expected: str) -> None:
    result = _run(*_HELM_TEMPLATE, *helm_args)
    assert result.returncode != 0, result.stdout[:500]
    assert expected in result.stderr, result.stderr


def test_flink_rescale_keys_are_flink_2_executing_phase() -> None:
    conf = _objects(_render())["ConfigMap/flinkai-flink"]["data"]["flink-properties"]
    lines = dict(line.strip().split(": ", 1) for line in conf.strip().splitlines())
    assert lines["jobmanager.adaptive-scheduler.executing.resource-stabilization-timeout"] == "30s"
    assert lines["jobmanager.adaptive-scheduler.executing.cooldown-after-rescaling"] == "30s"
    assert lines["jobmanager.adaptive-scheduler.submission.resource-stabilization-timeout"] == "10s"
    # The deprecated alias (of the submission timeout) is not set under its old name.
    assert "jobmanager.adaptive-scheduler.resource-stabilization-timeout" not in lines
    # The values a CPU-only machine renders with, as the scaling bench states them.
    cpu = _objects(_render("--set", "taskmanager.gpu.enabled=false"))
    hpa = cpu["HorizontalPodAutoscaler/flinkai-taskmanager"]
    names = [m[m["type"].lower()]["metric"]["name"] for m in hpa["spec"]["metrics"]]
    assert names == [metrics.BACKLOG_DEPTH, "flinkai_embedded_rows_per_second"]
