"""flinkai bench rag: the parts that need no broker, Flink or Chroma (rows, table, suite)."""

from __future__ import annotations

from flinkai_bench.rag import PROFILES, PhaseResult, ProcessRss, _table
from flinkai_bench.suite import collect_entries


def test_rows_and_table_report_percentiles_ratio_and_recall() -> None:
    stream = PhaseResult("stream", "flink", 10, 5.0, fresh_s=[0.2] * 99 + [0.9], query_ms=[3.0])
    batch = PhaseResult("batch", "reload", 10, 5.0, fresh_s=[9.0] * 100, query_ms=[2.0])
    stream.peak_rss_mb = {"Chroma server": 120.0}
    rows = [stream.row(), batch.row()]
    assert rows[0]["freshness_p50_s"] == 0.2 and rows[0]["freshness_max_s"] == 0.9
    assert 0.2 < rows[0]["freshness_p99_s"] < 0.9
    assert rows[0]["probed"] == 100 and rows[1]["ingest_docs_s"] is None
    result = {
        "phases": rows,
        "baseline_over_stream_freshness_p99": {"rebuild": 9.0 / rows[0]["freshness_p99_s"]},
        "notes": {"batch": ["12 rebuilds"]},
        "recall": {"recall@10": 0.987, "queries": 200},
        "freshness_path": "through the Flink job",
        "gpu": "n/a (no GPU)",
    }
    text = _table(result)
    assert "| stream | 5 | 0.20 |" in text and "| batch | 5 | 9.00 | 9.00 |" in text
    assert "Chroma server 120" in text and "recall@10 (live HNSW vs exact): 0.9870" in text
    assert "n/a (no GPU)" in text and "batch: 12 rebuilds" in text
    assert "baseline rebuild / stream (same documents): " in text


def test_empty_phase_prints_na_and_profiles_are_ordered() -> None:
    row = PhaseResult("stream", "flink", 0, 1.0).row()
    assert row["freshness_p99_s"] is None and row["query_p50_ms"] is None
    assert PROFILES["quick"].docs < PROFILES["default"].docs


def test_rss_sampler_sees_this_process_and_the_entry_is_in_the_suite() -> None:
    rss = ProcessRss()
    rss.sample()
    assert rss.peak_mb["bench + Python UDF workers (this process)"] > 10
    entries, _ = collect_entries()
    rag = {e.name: e for e in entries}["rag"]
    assert rag.size("quick") is not None and rag.size("quick") < rag.size("default")  # type: ignore[operator]
