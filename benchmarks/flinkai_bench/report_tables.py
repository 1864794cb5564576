"""The tables ``flinkai bench report`` generates in ``benchmarks/README.md``.

Each entry names one committed results file (relative to ``benchmarks/results/``)
and the columns to show. To move a table to a newer run, commit the run's JSON and
change ``source`` here; ``flinkai bench report`` then rewrites the README block.
"""

from __future__ import annotations

from flinkai_bench.report_spec import ROW_KEY, VALUE, TableSpec, col

__all__ = ["TABLES"]

_QUIET = "2026-12-03-2vcpu-epyc"
_D4 = "2026-12-04-2vcpu"
_D5 = "2026-12-05-2vcpu"
_D6 = "2026-12-06-2vcpu"

_ANOMALY_COLUMNS = (
    col("detector", ROW_KEY),
    col("NAB standard", "all.standard", ".2f"),
    col("low FP", "all.reward_low_FP_rate", ".2f"),
    col("low FN", "all.reward_low_FN_rate", ".2f"),
    col("LOGO raw", "logo.raw.strict_standard", ".2f"),
    col("step p99 ms", "step_latency.p99_ms", ".3f"),
    col("state bytes/key", "state_bytes_per_key", ",d"),
)

_AGENT_COLUMNS = (
    col("leg", ROW_KEY),
    col("max QPS", "max_qps", ",.1f"),
    col("paced /s", "paced_rate", ",.1f"),
    col("p50 ms", "p50_ms", ",.1f"),
    col("p99 ms", "p99_ms", ",.1f"),
    col("CPU ms/decision", "cpu_ms_per_decision", ".2f"),
    col("peak RSS MB", "peak_rss_mb", ",.0f"),
)

#: Every generated table, by the name its README markers use.
TABLES: dict[str, TableSpec] = {
    "embed": TableSpec(
        source=f"{_QUIET}/suite-default-embed-idle/results.json",
        rows="benchmarks.name=embed.tables.matrix",
        columns=(
            col("processor", "processor"),
            col("backend", "backend"),
            col("precision", "precision"),
            col("texts", "texts", ",d"),
            col("steady texts/s", ("steady texts/s",), ".1f"),
            col("start-up to 1st result s", ("start-up to 1st result s",), ".1f"),
            col("peak RSS MB", ("peak RSS MB",), ",.0f"),
            col("CPU ms/text", ("CPU ms/text",), ".1f"),
        ),
        exclude=(("steady texts/s", "n/a (no GPU)"),),
        note="Default suite profile, medians of 3 repeats, quiet machine; no GPU.",
    ),
    "embed-ratios": TableSpec(
        source=f"{_QUIET}/suite-default-embed-idle/results.json",
        rows="benchmarks.name=embed.tables.headline ratios (median of repeats, min, max)",
        where=(("figure", "steady texts/s (start-up excluded)"),),
        columns=(
            col("ratio", "ratio"),
            col("figure", "figure"),
            col("median", "median", ".2f"),
            col("per repeat", ("per repeat",)),
        ),
    ),
    "ceiling": TableSpec(
        source=f"{_D4}/ceiling-after.json",
        rows="rows",
        columns=(
            col("row", "name"),
            col("events/s", "texts_per_s", ",.0f"),
            col("CPU ms/event", "extra.cpu_ms_per_text", ".3f"),
            col("p50 ms", "p50_ms", ",.1f"),
            col("p99 ms", "p99_ms", ",.1f"),
            col("peak RSS MB", "peak_rss_mb", ",.0f"),
        ),
        note="Null model, 60,000 events, quiet machine.",
    ),
    "drift": TableSpec(
        source=f"{_D4}/drift-heldout-9100.json",
        rows="groups",
        where=(("shift", "all"),),
        columns=(
            col("detector", "detector"),
            col("changes", "changes", "d"),
            col("TP", "true_positives", "d"),
            col("false alarms", "false_alarms", "d"),
            col("precision", "precision", ".2f"),
            col("recall", "recall", ".2f"),
            col("F1", "f1", ".2f"),
            col("median delay ms", "median_delay_ms", ",.0f"),
        ),
        note="Held-out seeds 9100-9129, abrupt + gradual + no-shift streams pooled.",
    ),
    "windows": TableSpec(
        source=f"{_D4}/windows.json",
        rows="runs",
        columns=(
            col("load", "load"),
            col("windows", "mode"),
            col("events", "events", ",d"),
            col("events/s", "events_per_s", ",.1f"),
            col("p50 ms", "p50_ms", ",.0f"),
            col("p99 ms", "p99_ms", ",.0f"),
            col("mean window ms", "mean_window_ms", ",.0f"),
        ),
    ),
    "recovery": TableSpec(
        source=f"{_QUIET}/suite-quick-idle/results.json",
        rows="benchmarks.name=recovery.tables.seconds per phase (min, median, max over the faults)",
        where=(("phase", "total"),),
        columns=(
            col("fault / phase", ("scenario / phase",)),
            col("faults", "n", "d"),
            col("min s", "min_s", ".1f"),
            col("median s", "median_s", ".1f"),
            col("max s", "max_s", ".1f"),
        ),
        note="Quick suite profile: one fault of each kind, fault to first new commit.",
    ),
    "scaling": TableSpec(
        source=f"{_D6}/scaling.json",
        rows="figures.scale_events",
        columns=(
            col("change", "kind"),
            col("from", "before", "d"),
            col("to", "after", "d"),
            col("decision to RUNNING s", "decide_to_running_s", ".1f"),
            col("threshold crossed to RUNNING s", "cross_to_running_s", ".1f"),
        ),
    ),
    "anomaly": TableSpec(
        source=f"{_D4}/anomaly-logo-full58.json",
        rows="detectors",
        columns=_ANOMALY_COLUMNS,
        note="All 58 NAB files; raw scores, NAB's thresholds chosen on all files; "
        "LOGO: threshold chosen with each group held out.",
    ),
    "anomaly-artime": TableSpec(
        source=f"{_D5}/anomaly-logo-full58-artime.json",
        rows="detectors",
        columns=_ANOMALY_COLUMNS,
        note="ARTime with NAB's value range (`artime`) and a learnt one (`artime_learnt`).",
    ),
    "rag": TableSpec(
        source=f"{_D4}/rag-microbatch-10dps.json",
        rows="phases",
        columns=(
            col("index", "index"),
            col("docs", "docs", ",d"),
            col("freshness p50 s", "freshness_p50_s", ".2f"),
            col("freshness p99 s", "freshness_p99_s", ".2f"),
            col("never queryable", "never_queryable", "d"),
            col("query p50 ms", "query_p50_ms", ".1f"),
            col("query p99 ms", "query_p99_ms", ".1f"),
        ),
        note="10 documents/s, stream index beside micro-batch reindexing every 1, 5, 10 s.",
    ),
    "rag-recall": TableSpec(
        source=f"{_QUIET}/rag_recall_ag_news.json",
        rows="ef_search_sweep",
        columns=(
            col("ef_search", "ef_search", "d"),
            col("recall@10", "recall", ".4f"),
            col("worst query", "worst", ".2f"),
            col("query p50 ms", "query_ms_p50", ".1f"),
        ),
        note="`ChromaIndex` (HNSW, cosine, M 32, ef_construction 200); the default ef_search is 100.",
    ),
    "rag-answer": TableSpec(
        source=f"{_QUIET}/rag-answer-cost.json",
        rows="rows",
        columns=(
            col("k passages", "k", "d"),
            col("prompt tokens", "prompt_tokens", "d"),
            col("new tokens (max)", "new_tokens_max", "d"),
            col("TTFT ms (median)", "ttft_ms_median", ",.0f"),
            col("total ms (median)", "total_ms_median", ",.0f"),
        ),
    ),
    "kvcache": TableSpec(
        source=f"{_QUIET}/kvcache-idle.json",
        rows="rows",
        columns=(
            col("mode", "mode"),
            col("tokens", "length", "d"),
            col("shared", "share", ".0%"),
            col("TTFT p50 ms", "ttft_p50_ms", ",.0f"),
            col("restore p50 ms", "restore_p50_ms", ",.1f"),
            col("prefill p50 ms", "prefill_p50_ms", ",.0f"),
            col("cached tokens", "cached_tokens_mean", ",.0f"),
        ),
        where=(("share", "0.9"),),
        note="256-token prompts, 90 % shared prefix, SmolLM2-135M on the CPU, quiet machine.",
    ),
    "kvcache-cold": TableSpec(
        source=f"{_D4}/kvcache-cold-worker-3.json",
        rows="cold_worker.rows",
        columns=(
            col("tokens", "length", "d"),
            col("shared", "share", ".0%"),
            col("open ms", "open_ms", ",.0f"),
            col("restore ms", "restore_ms", ",.0f"),
            col("TTFT ms", "ttft_ms", ",.0f"),
            col("TTFT without cache ms", "no_cache_ttft_ms", ",.0f"),
            col("x without cache", "x_no_cache", ".2f"),
        ),
        note="A fresh worker process over a 2 GB store (load average 8-9).",
    ),
    "kvcache-raw": TableSpec(
        source=f"{_D4}/kvcache-raw-ceiling-2.json",
        rows="raw_ceiling.median",
        columns=(col("one 1,024-token prefix (47 MB)", ROW_KEY), col("MB/s", VALUE, ",.0f")),
        labels=(
            ("store_put_mb_s", "store put_many"),
            ("raw_produce_mb_s", "plain confluent-kafka produce"),
            ("store_restore_mb_s", "store restore (tensors delivered)"),
            ("raw_fetch_mb_s", "plain confluent-kafka fetch"),
        ),
        note="Median of 5 interleaved runs (load average 3-6); every run is in the JSON.",
    ),
    "llm": TableSpec(
        source=f"{_QUIET}/llm-decoder.json",
        rows="rows",
        columns=(
            col("prompt tokens", "prompt_tokens", "d"),
            col("ORT prefill ms", "ort_prefill_ms", ",.1f"),
            col("ORT decode ms/token", "ort_decode_ms_per_token", ".1f"),
            col("torch prefill ms", "torch_prefill_ms", ",.1f"),
            col("torch / ORT", "torch_over_ort", ".2f"),
            col("KV cache MB", "kv_cache_mb", ".1f"),
        ),
        note="SmolLM2-135M-Instruct, 2 threads.",
    ),
    "llm-serve": TableSpec(
        source=f"{_D6}/llm-serve.json",
        rows="",
        where=((ROW_KEY, "summary"),),
        columns=(
            col("per-row tok/s", "per_row_tok_s", ",.1f"),
            col("raw tok/s", "raw_tok_s", ",.1f"),
            col("job tok/s", "job_tok_s", ",.1f"),
            col("job / per-row", "job_over_per_row", ".2f"),
            col("job / raw", "job_over_raw", ".2f"),
            col("step ms", "single_step_ms", ".1f"),
            col("ITL p99 ms at half", "job_itl_p99_ms_at_half", ",.1f"),
            col("/ step", "itl_half_over_step", ".2f"),
            col("tok/s at ITL p99 <= 42.7 ms", "job_tok_s_at_itl_slo", ",.1f", missing="none"),
            col("first delta p50 ms at half", "job_first_delta_p50_ms_at_half", ",.0f"),
            col("identical", "identical"),
            col("offload KV", "offload_peak_kv_ratio", ".3f"),
            col("offload tok/s", "offload_tok_s_ratio", ".3f"),
            col("offload RSS", "offload_peak_rss_ratio", ".3f"),
        ),
        note="The run's `summary` (each row at its max rate; offload: with a budget and "
        "Kafka offload over all resident; first delta: arrival to the first token delta at "
        "the bench's consumer of the deltas topic). The previous run of record: "
        "`2026-12-06-2vcpu/llm-serve-stop53.json`.",
    ),
    "llm-serve-bursts": TableSpec(
        source=f"{_D6}/llm-serve.json",
        rows="bursts",
        columns=(
            col("prompts", "prompts", "d"),
            col("drain s", "drain_s", ",.1f"),
            col("tokens/s", "tok_s", ",.1f"),
            col("checkpoints", "checkpoints", "d"),
            col("longest ms", "checkpoint_max_ms", ",.0f"),
            col("failed", "checkpoints_failed", "d"),
            col("restarts", "restarts", "d"),
            col("identical", "identical"),
        ),
        note="Bursts sent at once to the default job (checkpoint every 5 s, 60 s timeout). "
        "The 1,024-prompt burst ran before prefill moved beside the decode steps: "
        "`2026-12-06-2vcpu/llm-serve-stop46.json`; the run before prefill-first under a "
        "backlog and the stricter max-rate judge: `llm-serve-stop50.json`; before store calls "
        "moved off the stepping thread: `llm-serve-stop51.json`; before the sliced backlog wait "
        "and the worker's gc freeze: `llm-serve-stop52.json`.",
    ),
    "llm-serve-memory": TableSpec(
        source=f"{_D6}/llm-serve.json",
        rows="memory.runs",
        columns=(
            col("sessions", "workload"),
            col("run", "variant"),
            col("store cache MiB", "cache_mb", ",.0f", missing=""),
            col("s", "seconds", ",.1f"),
            col("tok/s", "tok_s", ",.1f"),
            col("/ resident", "tok_s_ratio", ".3f", missing=""),
            col("TTFT p50 ms", "ttft_p50_ms", ",.0f"),
            col("e2e p50 ms", "e2e_p50_ms", ",.0f"),
            col("peak KV MiB", "peak_kv_mb", ",.1f"),
            col("/ resident", "kv_ratio", ".3f", missing=""),
            col("peak RSS MiB", "peak_rss_mb", ",.0f"),
            col("offloads", "offloads", "d"),
        ),
        note="The memory workload: 24 sessions of 4 turns through the raw scheduler, each "
        "variant in a fresh process; budget = 0.69 x the resident run's peak KV.",
    ),
    "lora": TableSpec(
        source=f"{_D6}/lora.json",
        rows="",
        where=((ROW_KEY, "summary"),),
        columns=(
            col("hot-plug ms p50", "hotplug_ms_p50", ",.0f"),
            col("hot-plug ms p99", "hotplug_ms_p99", ",.0f"),
            col("rollback ms p50", "rollback_ms_p50", ",.0f"),
            col("rollback ms p99", "rollback_ms_p99", ",.0f"),
            col("changing tok/s loss %", "serving_change_loss_pct", ".1f"),
            col("mixed / single", "mixed_vs_single_tok_s_ratio", ".3f"),
            col("LoRA graph / plain", "lora_base_vs_plain_tok_s_ratio", ".3f"),
            col("exactly-once cost %", "throughput_loss_pct", ".1f", missing="not run"),
            col("base acc", "base_accuracy", ".3f", missing="not run"),
            col("adapter acc", "adapter_accuracy", ".3f", missing="not run"),
            col("replay identical", "replay_identical", missing="no replay (see docs)"),
        ),
        note="The run's `summary`: hot-plug and rollback from commit to the first forward "
        "that used the version; tok/s ratios of closed-loop rows; training legs on AG News.",
    ),
    "agents": TableSpec(
        source=f"{_D6}/agents.json",
        rows="legs",
        columns=(
            col("leg", ROW_KEY),
            col("workload", "workload"),
            col("max QPS", "max_qps", ",.0f"),
            col("backlog s", "backlog_s", ".1f"),
            col("paced /s", "paced_rate", ",.0f", missing=""),
            col("p99 ms to sink write", "p99_ms", ",.0f", missing=""),
            col("p99 ms visible", "visible_p99_ms", ",.0f", missing=""),
            col("CPU ms/decision", "cpu_ms_per_decision", ".2f"),
            col("guarantee", "guarantee"),
        ),
        note="Max QPS: a backlog of at least 30 s at the leg's rate, drained (the loops: "
        "6,000 transactions); latency paced at a quarter of the job's max, to the output "
        "record's CreateTime (the sink's send) and to a read_committed poll; CPU of the "
        "system under test (broker and load generator left out).",
    ),
    "agents-summary": TableSpec(
        source=f"{_D6}/agents.json",
        rows="summary",
        columns=(col("summary (Zipf workload)", ROW_KEY), col("value", VALUE, ",.1f")),
        note="The same run's `summary` object.",
    ),
    "gpu-encoder": TableSpec(
        source="2026-12-04-h200/gpu-check.json",
        rows="derived.slot_events_per_s.per_dtype",
        columns=(
            col("dtype", ROW_KEY),
            col("encoder texts/s (median)", "texts_per_s_median", ",.0f"),
            col("batch", "batch", "d"),
            col("order", "order"),
        ),
        note="`benchmarks/gpu/check.py` on one H200: the best cell per dtype.",
    ),
}
