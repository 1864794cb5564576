"""Benchmark harness behind ``flinkai bench``.

Each benchmark is one module, ``flinkai.bench.<name>``, exposing
``register(subparsers)``; that function adds the ``flinkai bench <name>``
subcommand, whose handler returns an exit code. Add new modules to
:data:`BENCHMARKS`. A module that also exposes ``suite_entry``
(:class:`flinkai.bench.shared.suite.SuiteEntry`) runs in ``flinkai bench suite``.
Benchmarks measure and report; they never assert on timings.
"""

from __future__ import annotations

__all__ = ["BENCHMARKS"]

#: Benchmark modules, in help order. A module that is not present is skipped.
BENCHMARKS: tuple[str, ...] = (
    "flinkai.bench.embed",
    "flinkai.bench.ceiling",
    "flinkai.bench.drift",
    "flinkai.bench.windows",
    "flinkai.bench.recovery",
    "flinkai.bench.scaling",
    "flinkai.bench.anomaly",
    "flinkai.bench.rag",
    "flinkai.bench.rag_answer",
    "flinkai.bench.kvcache",
    "flinkai.bench.llm",
    "flinkai.bench.agents",
    "flinkai.bench.suite",
)
