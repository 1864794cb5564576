"""``flinkai bench suite`` plumbing with fake entries: files, machine info, failures, charts."""

from __future__ import annotations

import json
from pathlib import Path

from flinkai.bench.shared.suite import SuiteEntry, machine_info, run_suite
from flinkai.bench.suite import collect_entries

MACHINE = {
    "cpu_model": "Test CPU",
    "cpu_cores": 2,
    "memory_gib": 8.0,
    "load_avg": [0.0, 0.0, 0.0],
    "devices": {"ort_providers": ["CPUExecutionProvider"], "gpus": [], "nvml_note": "none"},
    "versions": {"flinkai": "0.1.0", "python": "3.11"},
}


def _boom(size: int | None) -> list[dict[str, object]]:
    raise RuntimeError("broken benchmark")


def test_suite_writes_results_matrix_and_charts(tmp_path: Path) -> None:
    seen: list[int | None] = []

    def rates(size: int | None) -> list[dict[str, object]]:
        seen.append(size)
        return [{"name": "cpu", "rate": 10.0}, {"name": "gpu", "rate": None, "note": "n/a"}]

    entries = [
        SuiteEntry("rates", "two rows", {"quick": 8, "default": 80}, rates, ("name", "rate")),
        SuiteEntry("broken", "raises", {}, _boom, ("name", "rate")),
        SuiteEntry(
            "empty", "no numbers", {}, lambda s: [{"name": "x", "rate": None}], ("name", "rate")
        ),
    ]
    results = run_suite(entries, "quick", tmp_path, machine=MACHINE)

    assert seen == [8]
    assert [r.error for r in results] == [None, "RuntimeError: broken benchmark", None]
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["profile"] == "quick" and data["machine"]["cpu_model"] == "Test CPU"
    assert data["benchmarks"][0]["rows"][1] == {"name": "gpu", "rate": None, "note": "n/a"}
    matrix = (tmp_path / "matrix.md").read_text()
    assert "| name | rate | note |" in matrix and "| gpu | - | n/a |" in matrix
    assert "failed: RuntimeError: broken benchmark" in matrix
    # a chart only where a value exists; n/a is never drawn as zero
    assert (tmp_path / "rates.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "empty.png").exists() and not (tmp_path / "broken.png").exists()


def test_machine_info_names_cpu_memory_and_versions() -> None:
    info = machine_info(devices={"gpus": []})
    assert info["cpu_cores"] and info["cpu_model"]
    assert set(info["versions"]) >= {"flinkai", "apache-flink", "onnxruntime", "python"}


def test_embed_and_planners_are_in_the_suite() -> None:
    entries, missing = collect_entries()
    names = [e.name for e in entries]
    assert "embed" in names and "plan" in names
    assert "flinkai.bench.suite" not in missing
    embed = entries[names.index("embed")]
    assert embed.size("quick") == 64 and embed.size("full") is None
