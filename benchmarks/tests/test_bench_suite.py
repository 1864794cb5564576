"""``flinkai bench suite`` plumbing with fake entries: files, machine info, failures, charts."""

from __future__ import annotations

import json
from pathlib import Path

from flinkai_bench.anomaly import DETECTORS as ANOMALY_DETECTORS
from flinkai_bench.anomaly import pick_series
from flinkai_bench.anomaly import suite_entry as anomaly_entry
from flinkai_bench.shared.suite import (
    EntryOutput,
    EntryResult,
    SuiteEntry,
    machine_info,
    not_run,
    run_suite,
)
from flinkai_bench.suite import collect_entries

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
    assert "flinkai_bench.suite" not in missing
    embed = entries[names.index("embed")]
    assert embed.size("quick") == 512 and embed.size("default") == 1200
    assert embed.size("full") is None


def test_every_benchmark_is_in_the_suite_with_small_quick_sizes() -> None:
    entries, _ = collect_entries()
    by_name = {e.name: e for e in entries}
    assert {"embed", "ceiling", "drift", "recovery", "anomaly", "kvcache", "rag", "plan"} <= set(
        by_name
    )
    for name in ("ceiling", "drift", "recovery", "anomaly", "kvcache", "rag"):
        entry = by_name[name]
        assert set(entry.sizes) == {"quick", "default", "full"}
        quick, default = entry.size("quick"), entry.size("default")
        assert quick is not None and (default is None or quick < default)
    assert by_name["embed"].repeat_count("default") == 3
    assert by_name["embed"].repeat_count("quick") == 1


def test_repeating_entries_get_repeats_and_profile_and_tables_render(tmp_path: Path) -> None:
    calls: list[tuple[int | None, int, str]] = []

    def run(size: int | None, repeats: int = 1, profile: str = "") -> EntryOutput:
        calls.append((size, repeats, profile))
        return EntryOutput(
            {"matrix": [{"name": "gpu", "rate": not_run(profile)}], "ratios": [{"r": 1.5}]},
            ["ratios use the steady rate"],
        )

    entry = SuiteEntry("rep", "repeats", {"quick": 4}, run, repeats={"quick": 2})
    results = run_suite([entry], "quick", tmp_path, machine=MACHINE, charts=False)
    assert calls == [(4, 2, "quick")]
    assert results[0].rows == [{"name": "gpu", "rate": "not run in quick"}]
    matrix = (tmp_path / "matrix.md").read_text()
    assert "## rep (size 4, 2 repeats," in matrix and "ratios use the steady rate" in matrix
    assert "### matrix" in matrix and "| gpu | not run in quick |" in matrix
    assert "### ratios" in matrix and "| 1.5 |" in matrix
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["benchmarks"][0]["tables"]["ratios"] == [{"r": 1.5}]


def test_a_failing_chart_is_noted_and_the_files_are_still_written(tmp_path: Path) -> None:
    def draw(result: EntryResult, out: Path) -> list[Path]:
        raise RuntimeError("no axes")

    entry = SuiteEntry("c", "chart fails", {}, lambda s: [{"x": 1}], draw=draw)
    run_suite([entry], "quick", tmp_path, machine=MACHINE)
    assert "charts failed: RuntimeError: no axes" in (tmp_path / "matrix.md").read_text()


def test_pick_series_spreads_over_the_sorted_keys() -> None:
    keys = [f"g{i // 4}/s{i:02d}.csv" for i in range(12)]
    assert pick_series(keys, 3) == ["g0/s02.csv", "g1/s06.csv", "g2/s10.csv"]
    assert pick_series(keys, None) == sorted(keys) == pick_series(keys, 99)


def test_anomaly_entry_on_two_real_nab_series() -> None:
    output = anomaly_entry.run(2)
    rows = {r["detector"]: r for r in output.tables[""]}
    operators = ("zscore_operator", "cad_operator", "cad_learnt_operator")
    assert set(rows) == {*ANOMALY_DETECTORS, *operators}
    for name in ("zscore", "robust_zscore", "iqr", "hst"):
        assert isinstance(rows[name]["NAB standard"], float)
        assert rows[name]["operator step p99 ms"].startswith("n/a (baseline")
    # the operator's default runs through its own per-key code: state and latency measured
    for name in operators:
        row = rows[name]
        assert isinstance(row["NAB standard"], float)
        assert isinstance(row["operator step p99 ms"], float)
        assert 0 < row["state bytes/key"] <= 64 * 1024
    for name in ("hybrid", "lstm"):  # a number where the model is built, else the reason
        value = rows[name]["NAB standard"]
        assert isinstance(value, float) or value.startswith("n/a (")
    assert "2 NAB series" in output.notes[0]


def test_kvcache_has_cells_for_every_profile_size() -> None:
    from flinkai_bench.kvcache import SUITE_PROFILES, suite_entry

    for size in suite_entry.sizes.values():
        profile = SUITE_PROFILES[size or max(SUITE_PROFILES)]
        assert max(length for length, _ in profile.cells) == (size or max(SUITE_PROFILES))
        assert {0.0, 0.9} <= {share for _, share in profile.cells}
