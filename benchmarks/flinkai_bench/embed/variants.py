"""The variants of the embed matrix; each runs inside its own child process (:mod:`.harness`)."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.paths import bundled_udf_dir
from flinkai_bench.embed.results import VariantResult
from flinkai_bench.embed.stats import (
    batch_steady_rate,
    cpu_between,
    cpu_by_kind_between,
    percentile_rate,
    percentile_window,
    percentiles,
    steady_rate,
    two_run_rate,
)
from flinkai_bench.shared.rss import RssSampler

__all__ = ["BEAM_OUTPUT_TIMES", "SMALL_RUN", "VARIANTS", "repo"]

SMALL_RUN = 64


def _texts(limit: int | None) -> list[str]:
    from flinkai.datasets import load_ag_news

    return [t for _, t in load_ag_news(limit=limit)]


def _config(overrides: dict[str, dict[str, Any]] | None) -> Any:
    from flinkai.config import load_config

    config = load_config()
    for section, values in (overrides or {}).items():
        config = config.with_overrides(**{section: values})
    return config


def _raw_ort(texts: list[str], args: dict[str, Any]) -> VariantResult:
    """A plain loop over the ORT session: tokenise, sort by length, pad, run. The limit.

    ``args``: ``batch_size``, ``threads`` (0: ORT picks) and ``variant`` (fp32, int8,
    fp16; default fp32). A variant whose file was not built is ``n/a`` with the reason.
    ``sort_window`` (texts): sort only within consecutive windows of that many texts,
    as the job can only sort within the bundle it sees; 0 sorts the whole input.
    """
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from flinkai.models.artifacts import load_artifacts
    from flinkai.models.errors import ArtifactError

    config = _config(args.get("overrides"))
    variant = str(args.get("variant", "fp32"))
    batch = int(args["batch_size"])
    window = int(args.get("sort_window") or 0)
    sorted_how = f"length-sorted within {window}-text windows" if window else "length-sorted"
    name = str(args.get("name") or f"raw ORT {variant}, batch {batch}, {sorted_how}")
    artifacts = load_artifacts(config.model)
    try:
        model_file = artifacts.model_file(variant)
    except ArtifactError as e:
        return VariantResult(name, note=f"n/a ({e}; build it with flinkai model quantize)")
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(args.get("threads", 0))
    t0 = time.perf_counter()
    session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
    t1 = time.perf_counter()
    tok = Tokenizer.from_file(str(artifacts.tokenizer_path))
    tok.enable_truncation(config.model.max_seq_length)
    t2 = time.perf_counter()
    latencies = []
    ends: list[float] = []
    sizes: list[int] = []
    cpu_at_end: list[float] = []
    out = np.empty((len(texts), config.model.dim), dtype=np.float32)
    step = window or len(texts) or 1
    for w0 in range(0, len(texts), step):
        # Tokenising is part of the work: each window is tokenised when it arrives, so
        # the steady rate (batches after the first) pays for it as the job does.
        encodings = tok.encode_batch(texts[w0 : w0 + step])
        ids = [np.asarray(e.ids, dtype=np.int64) for e in encodings]
        # Batches never cross a window: the job cannot batch texts of two bundles together.
        order = np.argsort([len(i) for i in ids], kind="stable")
        for lo in range(0, len(order), batch):
            idx = order[lo : lo + batch]
            width = max(len(ids[i]) for i in idx)
            input_ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros_like(input_ids)
            for row, i in enumerate(idx):
                input_ids[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1
            b0 = time.perf_counter()
            out[w0 + idx] = session.run(
                None,
                {
                    "input_ids": input_ids,
                    "attention_mask": mask,
                    "token_type_ids": np.zeros_like(input_ids),
                },
            )[0]
            ends.append(time.perf_counter())
            cpu_at_end.append(time.process_time())
            sizes.append(len(idx))
            latencies.append((ends[-1] - b0) * 1000)
    steady = batch_steady_rate(ends, sizes)
    extra: dict[str, Any] = {
        "variant": variant,
        "first_output_s": ends[0] - t0 if ends else None,
        "cold_start_s": {
            "session_create": t1 - t0,
            "tokenizer_load": t2 - t1,
            "first_batch": latencies[0] / 1000 if latencies else None,
        },
    }
    if ends:  # the job rows' middle-of-the-run rate, on each text's batch end
        extra["rate_p10_p90"] = percentile_rate(np.repeat(ends, sizes))
    if steady is not None:
        # CPU of the steady phase only, as for the job rows.
        extra["cpu_ms_per_text"] = (cpu_at_end[-1] - cpu_at_end[0]) * 1000 / sum(sizes[1:])
    p50, p99 = percentiles(latencies)
    return VariantResult(
        name,
        len(texts),
        steady[0] if steady is not None else None,
        p50,
        p99,
        note=(
            f"latency per batch; intra-op threads {options.intra_op_num_threads}; "
            "steady rate after the first batch"
            if steady is not None
            else "n/a (fewer than two batches; use more texts)"
        ),
        extra=extra,
        all_results_s=ends[-1] - t0 if ends else None,
    )


def _raw_triton(texts: list[str], args: dict[str, Any]) -> VariantResult:
    """The Triton client backend in a loop against a local server: the remote path's limit."""
    from flinkai.serve.triton_server import TritonServerOptions
    from flinkai_bench.embed.jobs import triton_server, triton_unavailable_reason

    name = args["name"]
    reason = triton_unavailable_reason()
    if reason:
        return VariantResult(name, note=f"n/a ({reason})")
    config = _config(args.get("overrides"))
    chunk = int(args.get("chunk", 1024))
    with triton_server(config) as (served, info):
        from flinkai.backends.triton import TritonEmbeddingBackend

        backend = TritonEmbeddingBackend(served)
        t0 = time.perf_counter()
        backend.load()
        load_s = time.perf_counter() - t0
        latencies = []
        start = time.perf_counter()
        try:
            for lo in range(0, len(texts), chunk):
                c0 = time.perf_counter()
                backend.infer_batch(texts[lo : lo + chunk])
                latencies.append((time.perf_counter() - c0) * 1000)
            seconds = time.perf_counter() - start
        finally:
            backend.close()
    p50, p99 = percentiles(latencies)
    max_batch = TritonServerOptions().max_batch_size
    return VariantResult(
        name,
        len(texts),
        len(texts) / seconds,
        p50,
        p99,
        note=(
            f"latency per {chunk}-text call; sub-batches of "
            f"{served.embedding.batch_size}, server max batch {max_batch}; server in RSS"
        ),
        extra={
            "server": info,
            "cold_start_s": {"server_start": info.get("start_s"), "client_load": load_s},
            "client_phases_s": dict(backend.cold_start.phases_s),
        },
    )


def _beam(texts: list[str], args: dict[str, Any]) -> VariantResult:
    """Apache Beam RunInference with Beam's ONNX handler (DirectRunner), same model and texts."""
    import apache_beam as beam
    from apache_beam.ml.inference.base import RunInference
    from apache_beam.ml.inference.onnx_inference import OnnxModelHandlerNumpy
    from tokenizers import Tokenizer

    from flinkai.config import load_config
    from flinkai.models.artifacts import load_artifacts

    config = load_config()
    artifacts = load_artifacts(config.model)
    tok = Tokenizer.from_file(str(artifacts.tokenizer_path))
    tok.enable_truncation(config.model.max_seq_length)
    # Beam stacks elements into a batch, so they need one shape: pad to the longest text.
    width = max(len(e.ids) for e in tok.encode_batch(texts))
    batch = int(args.get("batch_size", 64))

    def to_array(text: str) -> np.ndarray:
        ids = tok.encode(text).ids
        arr = np.zeros((3, width), dtype=np.int64)
        arr[0, : len(ids)] = ids
        arr[1, : len(ids)] = 1
        return arr

    def inference_fn(
        session: Any, batch_arrays: Sequence[np.ndarray], inference_args: Any = None
    ) -> Any:
        stacked = np.stack(batch_arrays)
        return session.run(
            None,
            {
                "input_ids": stacked[:, 0],
                "attention_mask": stacked[:, 1],
                "token_type_ids": stacked[:, 2],
            },
        )[0]

    handler = OnnxModelHandlerNumpy(
        str(artifacts.model_path),
        inference_fn=inference_fn,
        min_batch_size=batch,
        max_batch_size=batch,
    )
    BEAM_OUTPUT_TIMES.clear()
    start = time.time()
    with beam.Pipeline() as p:
        _ = (
            p
            | beam.Create(texts)
            | beam.Map(to_array)
            | RunInference(handler)
            | beam.Map(_note_beam_output)
            | beam.combiners.Count.Globally()
        )
    end = time.time()
    times = list(BEAM_OUTPUT_TIMES)
    extra: dict[str, Any] = {"outputs": len(times), "pipeline_seconds": end - start}
    if times:
        extra["first_output_s"] = min(times) - start
    # The job's rule: records after the first output flush over first-to-last output.
    steady = steady_rate(times) if times else None
    if steady is not None and steady.window is not None and RssSampler.active is not None:
        w0, w1 = steady.window
        cpu = cpu_between(RssSampler.active.cpu_series, w0, w1)
        if cpu is not None:
            extra["cpu_ms_per_text"] = cpu / (w1 - w0) * 1000 / steady.rate
    missing = len(texts) - len(times)
    return VariantResult(
        f"Beam RunInference (ONNX handler, DirectRunner, batch {batch})",
        len(texts),
        steady.rate if steady is not None else None,
        note=f"padded to {width} tokens; steady rate after the first output batch"
        + (f"; {missing} results missing" if missing else ""),
        extra=extra,
        all_results_s=(max(times) if times else end) - start,
    )


#: Wall-clock time of each RunInference result, noted by :func:`_note_beam_output`.
#: The DirectRunner runs the pipeline in this process, so the DoFn appends here.
BEAM_OUTPUT_TIMES: list[float] = []


def _note_beam_output(result: Any) -> Any:
    from flinkai_bench.embed import variants

    variants.BEAM_OUTPUT_TIMES.append(time.time())
    return result


def _udf_dirs(args: dict[str, Any]) -> tuple[Path, ...]:
    return tuple(Path(p) for p in args.get("udf_dirs") or ()) or (bundled_udf_dir(),)


@contextlib.contextmanager
def _kafka() -> Iterator[str]:
    from flinkai.kafka.broker import LocalKafka
    from flinkai.local.process import free_port

    with (
        tempfile.TemporaryDirectory(prefix="flinkai-bench-kafka-") as d,
        LocalKafka(port=free_port(), data_dir=Path(d)) as kafka,
    ):
        yield kafka.bootstrap


def _job(texts: list[str], args: dict[str, Any]) -> VariantResult:
    """The flinkai job end to end: Kafka -> Flink SQL -> UDF -> Kafka, steady-state rate."""
    from flinkai_bench.embed.jobs import triton_server, triton_unavailable_reason

    name = args["name"]
    config = _config(args.get("overrides"))
    if args.get("backend") == "triton":
        reason = triton_unavailable_reason()
        if reason:
            return VariantResult(name, note=f"n/a ({reason})")
        with triton_server(config) as (served, info):
            result = _measure_job(texts, served, args)
        result.extra["server"] = info
        result.note += "; Triton server (own ORT, in RSS) on loopback"
        return result
    return _measure_job(texts, config, args)


def _measure_job(texts: list[str], config: Any, args: dict[str, Any]) -> VariantResult:
    from flinkai_bench.embed.jobs import bounded_job_run

    name = args["name"]
    script = repo() / "jobs" / "embed_clicks.sql"
    variables = dict(args.get("variables") or {})
    udf_dirs = _udf_dirs(args)
    extra: dict[str, Any] = {
        "settings": {
            "arrow_batch_size": config.runtime.arrow_batch_size,
            "python_bundle_size": config.runtime.python_bundle_size,
            "python_bundle_time_ms": config.runtime.python_bundle_time_ms,
            "embedding_batch_size": config.embedding.batch_size,
            "onnx_intra_op_threads": config.onnx.intra_op_threads,
            "parallelism": config.runtime.parallelism,
            "backend": config.embedding.backend,
            "checkpoint_interval_ms": config.runtime.checkpoint_interval_ms,
            "delivery_guarantee": variables.get("DELIVERY_GUARANTEE", "exactly-once"),
        }
    }
    with _kafka() as bootstrap:
        small = None
        if args.get("two_run"):
            small = bounded_job_run(
                texts[:SMALL_RUN], bootstrap, config, script, variables, udf_dirs
            )
        submitted = time.time()
        profiler = _Profiling(bootstrap, float(args.get("profile_s") or 0))
        full = bounded_job_run(
            texts, bootstrap, config, script, variables, udf_dirs, on_submit=profiler.start
        )
        if profiler.active:
            extra["stage_profile"] = profiler.result()
    extra["job_seconds"] = full.job_seconds
    extra["dead_letters"] = full.dead_letters
    extra["missing"] = len(texts) - full.embedded - full.dead_letters
    if full.submitted_s is not None:
        submitted = full.submitted_s
    all_results_s = max(full.output_times_s) - submitted if full.output_times_s else None
    if full.output_times_s:
        extra["first_output_after_submit_s"] = min(full.output_times_s) - submitted
        extra["rate_p10_p90"] = percentile_rate(full.output_times_s)
        middle = percentile_window(full.output_times_s)
        if middle is not None and RssSampler.active is not None:
            # CPU per event of the middle of the run, by process: defined for a job
            # that writes without a pause too (the ceiling's fast rows).
            t0, t1, n = middle
            extra["cpu_ms_per_event_p10_p90_by_process"] = {
                kind: c * 1000 / n
                for kind, c in cpu_by_kind_between(RssSampler.active.kind_series, t0, t1).items()
            }
    if full.embedded != len(texts):
        return VariantResult(
            name,
            len(texts),
            all_results_s=all_results_s,
            note=(
                f"incomplete: {full.embedded}/{len(texts)} embedded, "
                f"{full.dead_letters} dead letters ({'; '.join(full.dead_letter_reasons)})"
            ),
            extra=extra,
        )
    steady = steady_rate(full.output_times_s, full.output_partitions or None)
    rate = steady.rate if steady is not None else None
    if steady is not None and len(steady.subtask_rates) > 1:
        extra["subtask_rates"] = {str(p): r for p, r in steady.subtask_rates.items()}
        extra["subtask_outputs"] = {str(p): n for p, n in steady.subtask_outputs.items()}
    if steady is not None and steady.window is not None and RssSampler.active is not None:
        start, end = steady.window
        cpu = cpu_between(RssSampler.active.cpu_series, start, end)
        if cpu is not None:
            # Every process of the variant: Kafka, the Flink JVM, Python workers, a server.
            # Cores in use while every subtask was past its first flush, per text/s.
            extra["cpu_ms_per_text"] = cpu / (end - start) * 1000 / steady.rate
    notes = []
    if small is not None:
        marginal = two_run_rate(small.embedded, small.job_seconds, full.embedded, full.job_seconds)
        extra["two_run_marginal_texts_per_s"] = marginal
        extra["startup_run_seconds"] = small.job_seconds
        notes.append(f"two-run marginal {marginal:.1f}" if marginal else "two-run marginal n/a")
    if rate is None:
        return VariantResult(
            name,
            len(texts),
            note="n/a (fewer than two output flushes; use more texts)",
            extra=extra,
            all_results_s=all_results_s,
        )
    first = extra.get("first_output_after_submit_s")
    notes.insert(
        0,
        f"after 1st output; wall {full.job_seconds:.0f} s, 1st output at {first:.0f} s"
        if first is not None
        else "after 1st output",
    )
    return VariantResult(
        name, len(texts), rate, note="; ".join(notes), extra=extra, all_results_s=all_results_s
    )


class _Profiling:
    """A stage profile of the job (:mod:`flinkai_bench.shared.profile`) when asked for one.

    The job's Python UDFs run in this process (loopback mode); the Flink JVM is this
    process's Java child that is not the broker. Sampling starts at the job's first
    result record, so it covers the busy phase, not start-up.
    """

    def __init__(self, bootstrap: str, duration_s: float) -> None:
        self.bootstrap = bootstrap
        self.duration_s = duration_s
        self._profiler: Any = None

    @property
    def active(self) -> bool:
        return self._profiler is not None

    def start(self, topic: str) -> None:
        if self.duration_s <= 0:
            return
        import os

        from flinkai.kafka.admin import end_offsets
        from flinkai_bench.shared.profile import StageProfiler

        def ready() -> bool:
            ends = end_offsets(self.bootstrap, topic, "read_uncommitted", timeout_s=5)
            return sum(ends.values()) > 0

        self._profiler = StageProfiler(self.duration_s, os.getpid(), _flink_jvm, ready).start()

    def result(self) -> dict[str, Any]:
        return dict(self._profiler.result().to_dict())


def _flink_jvm() -> int | None:
    import os

    from flinkai_bench.shared.rss import process_kind, tree_usage

    _, pids = tree_usage(os.getpid())
    return next((p for p in sorted(pids) if process_kind(p) == "flink jvm"), None)


def _latency(texts: list[str], args: dict[str, Any]) -> VariantResult:
    """The running job under a paced input at a fraction of its max rate: per-event latency."""
    from flinkai_bench.embed.jobs import latency_job_run

    name = args["name"]
    config = _config(args.get("overrides"))
    guarantee = args["guarantee"]
    isolation = "read_uncommitted" if guarantee == "at-least-once" else "read_committed"
    variables = {**(args.get("variables") or {}), "DELIVERY_GUARANTEE": guarantee}
    rate = float(args["rate"])
    warmup_s = float(args.get("warmup_s", 0.0))
    with _kafka() as bootstrap:
        run = latency_job_run(
            texts,
            bootstrap,
            config,
            repo() / "jobs" / "embed_clicks.sql",
            variables,
            _udf_dirs(args),
            rate=rate,
            duration_s=float(args["duration_s"]),
            warmup_paced_s=warmup_s,
            isolation=isolation,
        )
    settings = {
        "input_rate": rate,
        "paced_warmup_s": warmup_s,
        "max_rate_from": args.get("max_rate_from"),
        "delivery_guarantee": guarantee,
        "consumer_isolation": isolation,
        "python_bundle_time_ms": config.runtime.python_bundle_time_ms,
        "python_bundle_size": config.runtime.python_bundle_size,
        "arrow_batch_size": config.runtime.arrow_batch_size,
        "embedding_batch_size": config.embedding.batch_size,
        "onnx_intra_op_threads": config.onnx.intra_op_threads,
        "onnx_allow_spinning": config.onnx.allow_spinning,
        "parallelism": config.runtime.parallelism,
        "checkpoint_interval_ms": config.runtime.checkpoint_interval_ms,
        "flink_conf": dict(config.runtime.flink_conf),
    }
    missing = run.sent - run.received
    note = (
        f"paced {run.achieved_rate:.1f}/s for {run.sent} events ({isolation}); "
        f"max {run.max_ms or 0:.0f} ms; sink-timestamp p50/p99 "
        f"{run.ts_p50_ms or 0:.0f}/{run.ts_p99_ms or 0:.0f} ms"
        + (
            f"; after {run.warmup_paced} paced warm-up events (p99 {run.warmup_p99_ms:.0f} ms)"
            if run.warmup_paced and run.warmup_p99_ms is not None
            else ""
        )
        + (f"; {missing} results missing" if missing else "")
    )
    return VariantResult(
        name,
        run.sent,
        run.achieved_rate,
        run.p50_ms,
        run.p99_ms,
        note=note,
        extra={"settings": settings, "latency": asdict(run)},
    )


VARIANTS: dict[str, Callable[[list[str], dict[str, Any]], VariantResult]] = {
    "raw_ort": _raw_ort,
    "raw_triton": _raw_triton,
    "beam": _beam,
    "job": _job,
    "latency": _latency,
}


def repo() -> Path:
    from flinkai.paths import repo_root

    root = repo_root()
    if root is None:
        raise SystemExit(
            "flinkai bench embed runs from a source checkout (needs jobs/ and benchmarks/)"
        )
    return root
