"""Static checks of the deployment assets (docker/, k8s/helm/flinkai/) that need no helm.

The chart and the images name things the code defines elsewhere: metric names,
config keys, the job script, the Flink version, Maven profiles. These tests read
both sides so a rename on one side fails here instead of on a cluster. Rendering and
schema validation with the real tools: test_deploy_validation.py and .ci/deploy-check.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from flinkai import gpu_metrics, metrics
from flinkai.config import load_config
from flinkai.runtime.environment import Target, flink_settings
from flinkai.runtime.guarantees import check_delivery
from flinkai.runtime.runner import load_script

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "k8s" / "helm" / "flinkai"
DOCKERFILES = (ROOT / "docker" / "Dockerfile", ROOT / "docker" / "Dockerfile.gpu")

#: Flink metrics (not flinkai's) the adapter rules may use, with why.
FLINK_BUILTIN_METRICS = {
    # FLIP-33 source metric: records in the Kafka partitions not yet read (per subtask).
    "flink_taskmanager_job_task_operator_pendingRecords",
    # The Kafka source's position per partition (KafkaSourceReaderMetrics, topic and
    # partition as labels): the backlog rule joins it with the brokers' log end offsets.
    "flink_taskmanager_job_task_operator_KafkaSourceReader_topic_partition_currentOffset",
}
_METRIC_RE = re.compile(r"\bflink_(?:taskmanager|jobmanager)_[A-Za-z0-9_]+")
#: Series a rule may select: Flink's reporter or flinkai.gpu_metrics.
_SERIES_RE = re.compile(rf"{_METRIC_RE.pattern}|\b{gpu_metrics.GPU_UTILIZATION}\b")


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    loaded = yaml.safe_load((CHART / "values.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _pin(package: str) -> str:
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(rf'"{re.escape(package)}==([^"]+)"', text)
    assert m, f"{package} is not pinned in pyproject.toml"
    return m.group(1)


def _rules(values: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    rules = values["prometheusAdapter"]["rules"]
    return [("custom", r) for r in rules["custom"]] + [("external", r) for r in rules["external"]]


def _chart_texts() -> dict[str, str]:
    files = [CHART / "values.yaml", *sorted((CHART / "templates").iterdir())]
    return {p.name: p.read_text() for p in files if p.is_file()}


# -- metrics: adapter rules, HPA ----------------------------------------------------------------


def test_every_metric_the_chart_names_is_flinkai_or_a_listed_flink_builtin() -> None:
    known = {metrics.prometheus_name(m) for m in metrics.METRICS.values()} | FLINK_BUILTIN_METRICS
    seen: set[str] = set()
    for name, text in _chart_texts().items():
        for metric in _METRIC_RE.findall(text):
            assert metric in known, f"{name}: {metric} is not in flinkai.metrics.METRICS"
            seen.add(metric)
    # The rules must read flinkai's own metrics, not only Flink's.
    assert metrics.prometheus_name(metrics.EMBEDDED_ROWS) in seen
    assert metrics.prometheus_name(metrics.EMBEDDING_BATCH_MS) in seen
    assert "flink_taskmanager_job_task_operator_pendingRecords" in seen
    assert (
        "flink_taskmanager_job_task_operator_KafkaSourceReader_topic_partition_currentOffset"
        in seen
    )
    assert gpu_metrics.GPU_UTILIZATION in _chart_texts()["values.yaml"]


def test_each_adapter_rule_selects_exactly_the_series_it_renames(values: dict[str, Any]) -> None:
    for kind, rule in _rules(values):
        pattern = re.compile(rule["name"]["matches"])
        assert pattern.fullmatch(_series(rule)), (kind, rule["name"]["matches"])
        overrides = rule["resources"]["overrides"]
        assert overrides["namespace"] == {"resource": "namespace"}
        if kind == "custom":
            # Pods metrics: the HPA asks per pod, so the rule must map the pod label.
            assert overrides["pod"] == {"resource": "pod"}
            assert "pod!=" in rule["seriesQuery"]
        assert "<<.LabelMatchers>>" in rule["metricsQuery"]


def _series(rule: dict[str, Any]) -> str:
    m = _SERIES_RE.match(rule["seriesQuery"].strip("'\""))
    assert m, f"rule without a metric name: {rule['seriesQuery']}"
    return m.group(0)


def test_counters_are_rates_and_gauges_are_not(values: dict[str, Any]) -> None:
    by_name = {metrics.prometheus_name(m): m for m in metrics.METRICS.values()}
    for _, rule in _rules(values):
        spec = by_name.get(_series(rule))
        if spec is None:
            continue
        uses_rate = "rate(" in rule["metricsQuery"]
        assert uses_rate == (spec.kind == "counter"), (spec.name, spec.kind, rule["metricsQuery"])


def test_hpa_metrics_are_served_by_the_adapter_rules(values: dict[str, Any]) -> None:
    rules = values["prometheusAdapter"]["rules"]
    served = {
        "Pods": {r["name"]["as"] for r in rules["custom"]},
        "External": {r["name"]["as"] for r in rules["external"]},
    }
    a = values["autoscaling"]
    assert a["backlog"]["metricName"] == metrics.BACKLOG_DEPTH
    assert a["backlog"]["metricName"] in served["External"]
    assert a["gpuUtilization"]["metricName"] == gpu_metrics.GPU_UTILIZATION
    assert a["gpuUtilization"]["metricName"] in served["Pods"]
    assert a["embeddedRows"]["metricName"] in served["Pods"]
    assert a["embeddingBatchMs"]["metricName"] in served["Pods"]
    assert values["metrics"]["gpu"]["port"] == gpu_metrics.DEFAULT_PORT
    hpa = (CHART / "templates" / "taskmanager-hpa.yaml").read_text()
    assert "apiVersion: autoscaling/v2" in hpa
    for block in ("backlog", "gpuUtilization", "embeddedRows", "embeddingBatchMs"):
        # Names come from values, so the checks above cover what the HPA asks for.
        assert f"$a.{block}.metricName" in hpa


def test_hpa_behaviour_scales_down_slower_than_up(values: dict[str, Any]) -> None:
    behavior = values["autoscaling"]["behavior"]
    up = behavior["scaleUp"]["stabilizationWindowSeconds"]
    down = behavior["scaleDown"]["stabilizationWindowSeconds"]
    assert 0 < up < down
    # Each scale-down is a failover; the restart budget per interval must absorb them.
    flink_conf = values["flinkai"]["config"]["runtime"]["flink_conf"]
    assert flink_conf["restart-strategy.type"] == "failure-rate"
    interval_s = _seconds(flink_conf["restart-strategy.failure-rate.failure-rate-interval"])
    (policy,) = behavior["scaleDown"]["policies"]
    downs_per_interval = policy["value"] * -(-interval_s // policy["periodSeconds"])
    assert downs_per_interval < int(
        flink_conf["restart-strategy.failure-rate.max-failures-per-interval"]
    )


def _seconds(duration: str) -> int:
    m = re.fullmatch(r"(\d+)\s*(s|min|h)", duration.strip())
    assert m, duration
    return int(m.group(1)) * {"s": 1, "min": 60, "h": 3600}[m.group(2)]


def test_max_replicas_fit_the_kafka_partitions(values: dict[str, Any]) -> None:
    slots = values["taskmanager"]["numberOfTaskSlots"]
    a = values["autoscaling"]
    assert 1 <= a["minReplicas"] <= a["maxReplicas"]
    assert a["maxReplicas"] * slots <= values["kafka"]["sourcePartitions"]
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert "kafka.sourcePartitions" in helpers and "fail" in helpers


def test_prometheus_reporter_matches_flinkai_metrics(values: dict[str, Any]) -> None:
    settings = metrics.reporter_settings(values["metrics"]["port"])
    flink_cm = (CHART / "templates" / "configmap-flink.yaml").read_text()
    assert f'"{settings["metrics.reporter.prom.factory.class"]}"' in flink_cm
    assert values["metrics"]["port"] == 9249
    assert '"scheduler-mode" "reactive"' in flink_cm
    # The cluster config turns the reporter on; the job must not set its own port.
    assert values["flinkai"]["config"]["runtime"]["prometheus_port"] == 0


# -- the flinkai config and the job ------------------------------------------------------------


def test_chart_flinkai_config_loads_and_the_job_passes_its_preflight_checks(
    values: dict[str, Any], tmp_path: Path
) -> None:
    raw = dict(values["flinkai"]["config"])
    raw["kafka"] = {"bootstrap_servers": values["kafka"]["bootstrapServers"]}
    path = tmp_path / "flinkai.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_config(path, env={})  # unknown keys or bad values raise ConfigError
    assert config.kafka.bootstrap_servers == values["kafka"]["bootstrapServers"]

    script_path = ROOT / "jobs" / Path(values["job"]["script"]).name
    assert values["job"]["script"] == f"/opt/flinkai/jobs/{script_path.name}"
    script = load_script(script_path, config, {})  # every placeholder must resolve
    settings = flink_settings(config, [], [], Target())
    errors = [f.message for f in check_delivery(script.statements, settings) if f.level == "error"]
    assert errors == []
    assert f"SET 'pipeline.name' = '{values['job']['pipelineName']}'" in script_path.read_text()


def test_triton_switch_points_at_the_exported_repository(values: dict[str, Any]) -> None:
    triton = (CHART / "templates" / "triton.yaml").read_text()
    assert "/triton" in triton and "--model-repository=" in triton
    assert values["triton"]["ports"]["grpc"] == 8001
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert '"url"' in helpers and "flinkai.triton" in helpers


# -- images ------------------------------------------------------------------------------------


def _stages(path: Path) -> dict[str, tuple[str, str]]:
    """Stage name -> (base, body) of a multi-stage Dockerfile."""
    stages: dict[str, tuple[str, str]] = {}
    current: str | None = None
    base = ""
    body: list[str] = []
    for line in path.read_text().splitlines():
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            if current:
                stages[current] = (base, "\n".join(body))
            base, current, body = m.group(1), (m.group(2) or f"stage{len(stages)}"), []
        else:
            body.append(line)
    if current:
        stages[current] = (base, "\n".join(body))
    return stages


def _chain(stages: dict[str, tuple[str, str]], name: str) -> list[str]:
    out = [name]
    while stages[out[-1]][0] in stages:
        out.append(stages[out[-1]][0])
    return out


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_installs_the_pinned_set_without_torch(dockerfile: Path) -> None:
    stages = _stages(dockerfile)
    final = list(stages)[-1]
    assert final == "runtime"
    runtime_chain = _chain(stages, final)
    copied_from = set(re.findall(r"COPY\s+--from=(\S+)", stages[final][1]))
    for name in {*runtime_chain, *copied_from}:
        for up in _chain(stages, name) if name in stages else []:
            body = stages[up][1]
            assert "[torch]" not in body and not re.search(r"pip install[^\n]*\btorch\b", body), up
    installs = [
        line for _, body in stages.values() for line in body.splitlines() if "pip install" in line
    ]
    project_installs = [line for line in installs if '".[' in line]
    assert project_installs, "the project is never installed"
    for line in project_installs:
        assert "-c constraints.txt" in line, line
    assert any('".[triton]"' in line or '".[gpu,triton]"' in line for line in project_installs)
    assert "COPY --from=venv /opt/flinkai/venv" in stages[final][1]


def test_gpu_image_takes_onnxruntime_gpu_from_the_gpu_extra() -> None:
    text = (ROOT / "docker" / "Dockerfile.gpu").read_text()
    assert '".[gpu,triton]"' in text
    assert "CUDAExecutionProvider" in text
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^gpu = \["onnxruntime-gpu==', pyproject, re.M)


def test_model_export_is_the_only_stage_with_torch() -> None:
    stages = _stages(ROOT / "docker" / "Dockerfile")
    with_torch = [name for name, (_, body) in stages.items() if '".[torch]"' in body]
    assert with_torch == ["model-export"]
    assert "flinkai model export" in stages["model-export"][1]
    # The models image carries artifacts only, never the torch environment.
    assert "COPY --from=model-export" in stages["models"][1]
    assert "/opt/flinkai/venv" not in stages["models"][1]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_matches_the_pyflink_pin_and_java_17(dockerfile: Path) -> None:
    m = re.search(r"^ARG FLINK_IMAGE=flink:(\S+)$", dockerfile.read_text(), re.M)
    assert m, "FLINK_IMAGE build arg missing"
    tag = m.group(1)
    assert tag.startswith(_pin("apache-flink") + "-"), tag
    assert tag.endswith("-java17"), tag


def test_s3_plugin_matches_the_flink_version(values: dict[str, Any]) -> None:
    assert values["flink"]["s3"]["plugin"] == f"flink-s3-fs-presto-{_pin('apache-flink')}.jar"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_jars_are_resolved_by_maven_from_the_package_pom(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    assert "COPY flinkai/jvm/pom.xml pom.xml" in text
    profiles = set(re.findall(r"mvn [^\n]*-P(\w+)", text))
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    pom = ET.parse(ROOT / "flinkai" / "jvm" / "pom.xml")
    declared = {e.text for e in pom.getroot().findall("m:profiles/m:profile/m:id", ns)}
    assert profiles and profiles <= declared
    # The runner looks in $FLINKAI_HOME/jars/<profile> (flinkai/paths.py: jars_dir).
    for profile in profiles:
        assert f"-DoutputDir=/out/jars/{profile}" in text
    assert "COPY --from=jars /out/jars /opt/flinkai/jars" in text
    assert "FLINKAI_HOME=/opt/flinkai" in text


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_runs_as_the_flink_user(dockerfile: Path) -> None:
    stages = _stages(dockerfile)
    users = re.findall(r"^USER\s+(\S+)", stages["runtime"][1], re.M)
    # Numeric, so the kubelet can check runAsNonRoot; the chart runs pods as the same id.
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    uid = re.search(r"^runAsUser: (\d+)$", helpers, re.M)
    gid = re.search(r"^runAsGroup: (\d+)$", helpers, re.M)
    assert uid and gid
    assert users and users[-1] == f"{uid.group(1)}:{gid.group(1)}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_hadolint_exception_says_why(dockerfile: Path) -> None:
    lines = dockerfile.read_text().splitlines()
    ignores = [i for i, line in enumerate(lines) if "hadolint ignore=" in line]
    for i in ignores:
        # The line above an ignore is a comment that gives the reason.
        assert lines[i - 1].startswith("# ") and "hadolint" not in lines[i - 1], lines[i]


def test_dockerignore_keeps_generated_artifacts_out() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert lines and "*" in lines  # allow-list: only named sources enter the context
    for pattern in ("**/*.jar", "**/*.onnx", "**/*.safetensors"):
        assert pattern in lines
    assert not any(line.startswith("!.venv") for line in lines)
    for needed in ("!pyproject.toml", "!constraints.txt", "!flinkai/", "!jobs/"):
        assert needed in lines
