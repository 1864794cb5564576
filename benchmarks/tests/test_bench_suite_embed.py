"""The embed suite entry with a fake variant runner: repeats, like-for-like rows, ratios.

No variant runs for real here (that takes minutes per row); the fake returns fixed
figures, so the medians, the pairing of ratios within a repeat, the pacing of the
latency runs and the reasons in missing cells are checked exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flinkai_bench.embed.results import VariantResult
from flinkai_bench.embed.stats import batch_steady_rate
from flinkai_bench.embed.suite import draw_charts, run_embed_suite
from flinkai_bench.shared.devices import DeviceReport
from flinkai_bench.shared.suite import EntryResult

NO_GPU = DeviceReport(("CPUExecutionProvider",), (), "NVML: Driver Not Loaded")

#: Steady texts/s per repeat: the job moves, the raw loop does not.
JOB_RATES = [10.0, 30.0, 20.0]
RAW_RATE = 20.0


class FakeRunner:
    """Stands in for ``run_variant``; records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None, dict[str, Any]]] = []
        self.repeat = -1

    def __call__(self, kind: str, limit: int | None, args: dict[str, Any]) -> VariantResult:
        self.calls.append((kind, limit, args))
        n = limit or 0
        if kind == "raw_ort" and args["variant"] == "fp32":
            self.repeat += 1
            return VariantResult(
                "raw", n, RAW_RATE, peak_rss_mb=300.0, all_results_s=n / 10.0,
                extra={"cpu_ms_per_text": 25.0, "first_output_s": 1.0,
                       "cold_start_s": {"session_create": 0.3, "tokenizer_load": 0.1,
                                        "first_batch": 0.5}},
            )  # fmt: skip
        if kind == "raw_ort":
            return VariantResult("raw int8", note="n/a (int8 model not exported)")
        if kind == "job" and "variables" in args:  # naive
            return VariantResult("naive", n, 5.0, all_results_s=100.0,
                                 extra={"dead_letters": 1, "missing": 0})  # fmt: skip
        if kind == "job":
            rate = JOB_RATES[self.repeat]
            return VariantResult("job", n, rate, peak_rss_mb=2000.0, all_results_s=60.0,
                                 extra={"dead_letters": 0, "missing": 0,
                                        "first_output_after_submit_s": 45.0})  # fmt: skip
        if kind == "beam":
            return VariantResult("beam", n, 8.0, all_results_s=50.0, extra={"outputs": n})
        if kind == "latency":
            p99 = 700.0 + 100 * self.repeat
            return VariantResult(
                "lat", 100, args["rate"], 300.0, p99,
                extra={"latency": {"p95_ms": 600.0, "p99_ms": p99}},
            )  # fmt: skip
        raise AssertionError(f"unexpected variant {kind}")


@pytest.fixture(scope="module")
def suite() -> tuple[Any, FakeRunner]:
    runner = FakeRunner()
    return run_embed_suite(40, 3, "quick", run=runner, report=NO_GPU), runner


def test_every_processor_row_runs_on_the_same_texts(suite: tuple[Any, FakeRunner]) -> None:
    _, runner = suite
    assert {limit for _, limit, _ in runner.calls} == {40}
    kinds = [kind for kind, _, _ in runner.calls]
    assert kinds.count("job") == 6 and kinds.count("beam") == 3 and kinds.count("latency") == 3


def test_latency_is_paced_at_half_the_same_repeats_job_rate(
    suite: tuple[Any, FakeRunner],
) -> None:
    _, runner = suite
    rates = [args["rate"] for kind, _, args in runner.calls if kind == "latency"]
    assert rates == [r / 2 for r in JOB_RATES]


def test_headline_ratios_are_median_min_max_of_per_repeat_ratios(
    suite: tuple[Any, FakeRunner],
) -> None:
    output, _ = suite
    ratios = output.tables["headline ratios (median of repeats, min, max)"]
    steady = next(
        r for r in ratios if r["ratio"] == "job / raw ORT fp32" and "steady" in r["figure"]
    )
    # per repeat 10/20, 30/20, 20/20
    assert (steady["median"], steady["min"], steady["max"]) == (1.0, 0.5, 1.5)
    assert steady["repeats with a value"] == "3 of 3"
    e2e = next(
        r for r in ratios if r["ratio"] == "job / raw ORT fp32" and "all results" in r["figure"]
    )
    # end to end: (40 / 60) / (40 / 4) texts/s in every repeat
    assert e2e["median"] == pytest.approx((40 / 60) / (40 / 4))
    int8 = next(r for r in ratios if r["ratio"] == "raw ORT int8 / fp32")
    assert str(int8["median"]).startswith("n/a") and int8["repeats with a value"] == "0 of 3"
    p99 = next(r for r in ratios if r["ratio"].startswith("job p99"))
    assert (p99["median"], p99["min"], p99["max"], p99["unit"]) == (800.0, 700.0, 900.0, "ms")


def test_matrix_cells_are_medians_or_say_why(suite: tuple[Any, FakeRunner]) -> None:
    output, _ = suite
    matrix = {(r["processor"], r["backend"], r["precision"]): r for r in output.tables["matrix"]}
    job = matrix[("Flink job", "ORT CPU", "fp32")]
    assert job["steady texts/s"] == 20.0 and job["p99 ms"] == 800.0 and job["p95 ms"] == 600.0
    assert job["peak GPU MB"] == "n/a (no GPU)"
    assert job["cold start: model load s"].startswith("n/a (not separable")
    assert job["start-up to 1st result s"] == 45.0 and job["errors"] == 0
    raw = matrix[("raw ORT loop", "ORT CPU", "fp32")]
    assert (
        raw["cold start: model load s"] == 0.3 and raw["cold start: CUDA context s"] == "n/a (CPU)"
    )
    assert raw["p99 ms"].startswith("n/a (bulk run")
    assert matrix[("naive PyFlink UDF", "sentence-transformers", "fp32")]["errors"] == 3
    int8 = matrix[("raw ORT loop", "ORT CPU", "int8")]
    assert int8["steady texts/s"] == "n/a (int8 model not exported)"
    cuda = matrix[("raw ORT loop (backend)", "ORT CUDA", "fp16")]
    # Cells say "n/a (no GPU)"; the note column keeps the probe's whole reason.
    assert cuda["steady texts/s"] == "n/a (no GPU)" and cuda["errors"] == "n/a (no GPU)"
    assert cuda["note"].startswith("n/a (no GPU: NVML: Driver Not Loaded")
    assert matrix[("raw Triton client loop", "Triton gRPC", "fp32")]["steady texts/s"] == (
        "not run in quick"
    )
    assert not any("the default profile runs 3" in n for n in output.notes)


def test_fewer_repeats_than_default_are_stated() -> None:
    output = run_embed_suite(40, 1, "quick", run=FakeRunner(), report=NO_GPU)
    assert any("1 repeat(s) (the default profile runs 3)" in n for n in output.notes)
    ratios = output.tables["headline ratios (median of repeats, min, max)"]
    assert ratios[0]["repeats with a value"] == "1 of 1"


def test_charts_are_drawn_from_the_matrix(suite: tuple[Any, FakeRunner], tmp_path: Path) -> None:
    output, _ = suite
    result = EntryResult("embed", "", 40, tables=output.tables, repeats=3)
    paths = draw_charts(result, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == [
        "embed-cold-start.png", "embed-latency.png", "embed-memory.png", "embed-throughput.png"
    ]  # fmt: skip
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


def test_batch_steady_rate_leaves_the_first_batch_out() -> None:
    # batches of 32 end at 2 s (start-up), then every 0.5 s: 64 texts/s
    rate, window = batch_steady_rate([2.0, 2.5, 3.0, 3.5], [32, 32, 32, 16]) or (0, None)
    assert rate == pytest.approx(80 / 1.5) and window == (2.0, 3.5)
    assert batch_steady_rate([2.0], [32]) is None
    with pytest.raises(ValueError):
        batch_steady_rate([1.0, 2.0], [32])
