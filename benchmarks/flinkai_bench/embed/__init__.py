"""``flinkai bench embed``: the embedding backend selection matrix.

Every variant embeds the same AG News texts on the same machine in one run, so
the figures are comparable as ratios even on a noisy 2-core box. Each variant
runs in its own subprocess, so its peak RSS (the process plus its children: the
Kafka broker, the Flink JVM, Python workers, a Triton server) is its own.

Flink job throughput is the **steady-state rate after the first output**: the
records the job wrote after its first flush, divided by the time from its first
output record to its last (Kafka record timestamps; see
:func:`flinkai_bench.embed.stats.span_rate`). That leaves out the fixed start-up
(JVM, job submission, model load, first batch: tens of seconds on a MiniCluster)
which a long-running stream pays once; the start-up is reported separately. The
main job row also runs the older two-run marginal (64 texts, then all) as a
cross-check.

Latency rows feed the running job a steady input at a fraction (default 50 %) of
the maximum rate measured by the job row of the same run, and time each event
from producing its input record to a consumer receiving its result.

The package: :mod:`.command` (the CLI and its steps), :mod:`.variants` (what each row
runs), :mod:`.harness` (one child process per variant), :mod:`.results` (rows and
table), :mod:`.jobs` (the Flink side) and :mod:`.stats` (pure arithmetic).
"""

from flinkai_bench.embed.command import register
from flinkai_bench.embed.harness import run_variant
from flinkai_bench.embed.results import JobSettings, VariantResult
from flinkai_bench.embed.suite import suite_entry

__all__ = ["JobSettings", "VariantResult", "register", "run_variant", "suite_entry"]
