"""Rows of the embed matrix, the job settings the bench tunes, and the printed table."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NAME_WIDTH", "JobSettings", "VariantResult", "fmt", "print_table"]


@dataclass
class VariantResult:
    """One row of the matrix.

    Attributes:
        texts_per_s: Steady throughput, start-up excluded (after the first output).
        all_results_s: Time to all results, start-up included: from the start of the
            processor (job submission, session create, pipeline start) to its last
            output. ``texts / all_results_s`` is the end-to-end rate.
    """

    name: str
    texts: int = 0
    texts_per_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    peak_rss_mb: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    all_results_s: float | None = None


@dataclass(frozen=True)
class JobSettings:
    """The knobs of the embed job that the bench tunes.

    Attributes:
        arrow_batch: ``runtime.arrow_batch_size``: rows per pandas UDF call, so also
            the window texts are sorted by length in.
        bundle: ``runtime.python_bundle_size`` (>= ``arrow_batch``).
        model_batch: ``embedding.batch_size``: texts per ``session.run``.
        ort_threads: ``onnx.intra_op_threads`` (0: ONNX Runtime picks).
        parallelism: ``runtime.parallelism``: subtasks, each calling the one shared
            ORT session; the input topic gets as many partitions.
    """

    arrow_batch: int = 1024
    bundle: int = 1024
    model_batch: int = 32
    ort_threads: int = 0
    parallelism: int = 1

    @classmethod
    def parse(cls, spec: str) -> JobSettings:
        """``ARROW:BUNDLE:BATCH:THREADS[:PARALLELISM]``, e.g. ``1024:1024:32:0``."""
        try:
            values = [int(x) for x in spec.split(":")]
            if len(values) not in (4, 5):
                raise ValueError(spec)
        except ValueError as e:
            raise argparse.ArgumentTypeError(
                f"expected ARROW:BUNDLE:BATCH:THREADS[:PARALLELISM] (four or five integers), "
                f"got {spec!r}"
            ) from e
        a, b, m, t, p = (*values, 1) if len(values) == 4 else values
        if a < 1 or b < a or m < 1 or t < 0 or p < 1:
            raise argparse.ArgumentTypeError(
                f"{spec!r}: need arrow >= 1, bundle >= arrow, batch >= 1, threads >= 0, "
                "parallelism >= 1"
            )
        return cls(a, b, m, t, p)

    @property
    def label(self) -> str:
        label = f"{self.arrow_batch}:{self.bundle}:{self.model_batch}:{self.ort_threads}"
        return label if self.parallelism == 1 else f"{label}:{self.parallelism}"

    def overrides(self) -> dict[str, dict[str, Any]]:
        """``Config.with_overrides`` sections for these settings."""
        return {
            "runtime": {
                "arrow_batch_size": self.arrow_batch,
                "python_bundle_size": self.bundle,
                "parallelism": self.parallelism,
            },
            "embedding": {"batch_size": self.model_batch},
            "onnx": {"intra_op_threads": self.ort_threads},
        }


def fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


NAME_WIDTH = 60


def print_table(rows: Sequence[VariantResult]) -> None:
    """The matrix; ``CPU ms/t`` is CPU time of the variant's processes per text (steady phase)."""
    header = (
        f"{'variant':<{NAME_WIDTH}} {'texts':>6} {'texts/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'RSS MB':>7} {'CPU ms/t':>8}  note"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.name:<{NAME_WIDTH}} {r.texts:>6} {fmt(r.texts_per_s):>8} {fmt(r.p50_ms):>8} "
            f"{fmt(r.p99_ms):>8} {fmt(r.peak_rss_mb, 0):>7} "
            f"{fmt(r.extra.get('cpu_ms_per_text')):>8}  {r.note}"
        )


#: Flink options of the latency runs, on top of the job settings and the bundle time.
