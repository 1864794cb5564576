"""Benchmarks and research behind ``flinkai bench``: the lab, apart from the product.

Nothing in :mod:`flinkai` imports this package. Each benchmark is one module,
``flinkai_bench.<name>``, exposing
``register(subparsers)``; that function adds the ``flinkai bench <name>``
subcommand, whose handler returns an exit code. Add new modules to
:data:`BENCHMARKS`. A module that also exposes ``suite_entry``
(:class:`flinkai_bench.shared.suite.SuiteEntry`) runs in ``flinkai bench suite``.
Benchmarks measure and report; they never assert on timings.
"""

from __future__ import annotations

__all__ = ["BENCHMARKS"]

#: Benchmark modules, in help order. A module that is not present is skipped.
BENCHMARKS: tuple[str, ...] = (
    "flinkai_bench.embed",
    "flinkai_bench.ceiling",
    "flinkai_bench.drift",
    "flinkai_bench.windows",
    "flinkai_bench.recovery",
    "flinkai_bench.scaling",
    "flinkai_bench.anomaly",
    "flinkai_bench.rag",
    "flinkai_bench.rag_answer",
    "flinkai_bench.kvcache",
    "flinkai_bench.llm",
    "flinkai_bench.llm_step",
    "flinkai_bench.llm_serve",
    "flinkai_bench.lora",
    "flinkai_bench.agents",
    "flinkai_bench.suite",
    "flinkai_bench.identity",
    "flinkai_bench.report",
)
