"""flinkai.local.prometheus: the real server on loopback, its targets file and its errors.

Needs Debian's ``prometheus`` (``.ci/run`` installs it); a missing binary fails with the
install command, it is not skipped.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from flinkai.local.errors import ServiceError, ServiceNotInstalled
from flinkai.local.prometheus import LocalPrometheus, ScrapeTarget, prometheus_binary


def test_missing_binary_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLINKAI_PROMETHEUS", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ServiceNotInstalled, match="apt-get install -y prometheus"):
        prometheus_binary()
    monkeypatch.setenv("FLINKAI_PROMETHEUS", "/nonexistent/prometheus")
    with pytest.raises(ServiceNotInstalled, match="not an executable"):
        prometheus_binary()


def test_targets_file_carries_labels_job_and_path(tmp_path: Path) -> None:
    prom = LocalPrometheus(tmp_path)
    prom.set_targets([ScrapeTarget("flink", "127.0.0.1:1", {"pod": "tm-1"}, path="/m")])
    (group,) = json.loads(prom.targets_file.read_text())
    assert group == {
        "targets": ["127.0.0.1:1"],
        "labels": {"pod": "tm-1", "job": "flink", "__metrics_path__": "/m"},
    }


def test_real_server_scrapes_itself_and_answers_queries(tmp_path: Path) -> None:
    try:
        prometheus_binary()
    except ServiceNotInstalled as e:
        pytest.fail(str(e), pytrace=False)
    with LocalPrometheus(tmp_path / "p") as prom:
        # A target added while it runs is picked up without a restart: its own /metrics.
        prom.set_targets([ScrapeTarget("self", f"127.0.0.1:{prom.port}", {"pod": "p0"})])
        assert prom.wait_for_targets(timeout_s=20) == {f"127.0.0.1:{prom.port}": "up"}
        (up,) = prom.query('up{job="self"}')
        assert up.value == 1.0 and up.labels["pod"] == "p0"
        assert prom.query("2 * 3")[0].value == 6.0
        assert prom.series('up{pod="p0"}')
        with pytest.raises(ServiceError, match="parse error"):
            prom.query("sum(")
        pid = prom._proc.pid if prom._proc else 0
    assert pid and not Path(f"/proc/{pid}").exists()


def test_a_server_that_exits_fails_start_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "prometheus"
    fake.write_text("#!/bin/sh\necho 'bad flag' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FLINKAI_PROMETHEUS", str(fake))
    with pytest.raises(ServiceError, match=r"exited during start-up(.|\n)*bad flag"):
        LocalPrometheus(tmp_path / "p", start_timeout_s=5).start()
