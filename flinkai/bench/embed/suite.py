"""The embed benchmark in ``flinkai bench suite``: the raw ORT loop and the GPU rows."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flinkai.bench.embed.gpu import plan_gpu_rows
from flinkai.bench.embed.harness import run_variant
from flinkai.bench.embed.results import VariantResult
from flinkai.bench.shared.devices import SystemProbe
from flinkai.bench.shared.suite import SuiteEntry

__all__ = ["suite_entry"]

_COLUMNS = ("name", "texts", "texts_per_s", "p50_ms", "p99_ms", "peak_rss_mb", "note")


def _row(result: VariantResult) -> dict[str, Any]:
    data = asdict(result)
    row = {k: data[k] for k in _COLUMNS}
    row["cpu_ms_per_text"] = result.extra.get("cpu_ms_per_text")
    return row


def _run(limit: int | None) -> list[dict[str, Any]]:
    results = [run_variant("raw_ort", limit, {"batch_size": 32, "threads": 0})]
    for row, reason in plan_gpu_rows(SystemProbe().report()):
        if reason:
            results.append(VariantResult(row.label, note=f"n/a ({reason})"))
        else:
            args = {"name": row.label, "provider": row.provider, "variant": row.variant}
            results.append(run_variant("raw_ort_gpu", limit, args))
    return [_row(r) for r in results]


#: Quick: 64 AG News texts; default: 600; full: all 3,800. The Flink job rows stay in
#: ``flinkai bench embed`` (minutes each on a small machine).
suite_entry = SuiteEntry(
    name="embed",
    description="Embedding throughput: raw ONNX Runtime loop (CPU, batch 32) and the GPU rows.",
    sizes={"quick": 64, "default": 600, "full": None},
    run=_run,
    chart=("name", "texts_per_s"),
)
