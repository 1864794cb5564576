"""``flinkai bench embed``: the embedding backend selection matrix.

Every variant embeds the same AG News texts on the same machine in one run, so
the figures are comparable as ratios even on a noisy 2-core box. Each variant
runs in its own subprocess, so its peak RSS (the process plus its children: the
Kafka broker, the Flink JVM, Python workers, a Triton server) is its own.

Flink job throughput is the **steady-state rate after the first output**: the
records the job wrote after its first flush, divided by the time from its first
output record to its last (Kafka record timestamps; see
:func:`flinkai.bench.embed_stats.span_rate`). That leaves out the fixed start-up
(JVM, job submission, model load, first batch: tens of seconds on a MiniCluster)
which a long-running stream pays once; the start-up is reported separately. The
main job row also runs the older two-run marginal (64 texts, then all) as a
cross-check.

Latency rows feed the running job a steady input at a fraction (default 50 %) of
the maximum rate measured by the job row of the same run, and time each event
from producing its input record to a consumer receiving its result.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.bench.embed_stats import (
    cpu_between,
    half_rate,
    percentiles,
    steady_rate,
    two_run_rate,
)
from flinkai.local.process import kill_stragglers, signal_group

__all__ = ["JobSettings", "VariantResult", "register", "run_variant"]

SMALL_RUN = 64
#: A variant's child process is killed (with its process group) after this long.
VARIANT_TIMEOUT_S = 1800.0


@dataclass
class VariantResult:
    """One row of the matrix."""

    name: str
    texts: int = 0
    texts_per_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    peak_rss_mb: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


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


# -- measurement helpers ---------------------------------------------------------------


class RssSampler:
    """Peak resident memory and CPU time of this process plus all its descendants (/proc).

    ``cpu_series`` holds ``(time.time(), cumulative CPU seconds)`` samples of the whole
    tree, so a variant can tell how much CPU its steady phase used, which stays
    meaningful when other work on the machine slows the wall clock down.
    """

    def __init__(self, interval_s: float = 0.25) -> None:
        self.peak_bytes = 0
        self.cpu_series: list[tuple[float, float]] = []
        self._cpu_ticks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._interval = interval_s

    def __enter__(self) -> RssSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        rss, ticks = _tree_usage(os.getpid())
        self.peak_bytes = max(self.peak_bytes, rss)
        # A process that exited keeps its last reading (its final ticks are lost).
        self._cpu_ticks.update(ticks)
        total = sum(self._cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")
        self.cpu_series.append((time.time(), total))

    @property
    def peak_mb(self) -> float:
        return self.peak_bytes / 2**20


#: The sampler of the running variant child (set by ``_child``).
_SAMPLER: RssSampler | None = None


def _tree_usage(root: int) -> tuple[int, dict[int, int]]:
    """(RSS bytes, {pid: utime + stime ticks}) of ``root`` and all its descendants."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    ticks: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])
        rss[pid] = int(fields[21]) * page
        ticks[pid] = int(fields[11]) + int(fields[12])
    total = 0
    mine: dict[int, int] = {}
    for pid in rss:
        p = pid
        while p in parents and p != root and p > 1:
            p = parents[p]
        if p == root:
            total += rss[pid]
            mine[pid] = ticks[pid]
    return total, mine


def _texts(limit: int | None) -> list[str]:
    from flinkai.datasets import load_ag_news

    return [t for _, t in load_ag_news(limit=limit)]


def _config(overrides: dict[str, dict[str, Any]] | None) -> Any:
    from flinkai.config import load_config

    config = load_config()
    for section, values in (overrides or {}).items():
        config = config.with_overrides(**{section: values})
    return config


# -- variants (each runs in a child process) -------------------------------------------


def _raw_ort(texts: list[str], args: dict[str, Any]) -> VariantResult:
    """A plain loop over the ORT session: tokenise, sort by length, pad, run. The limit."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from flinkai.models.artifacts import load_artifacts

    config = _config(None)
    artifacts = load_artifacts(config.model)
    batch = int(args["batch_size"])
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(args.get("threads", 0))
    t0 = time.perf_counter()
    session = ort.InferenceSession(
        str(artifacts.model_path), options, providers=["CPUExecutionProvider"]
    )
    t1 = time.perf_counter()
    tok = Tokenizer.from_file(str(artifacts.tokenizer_path))
    tok.enable_truncation(config.model.max_seq_length)
    t2 = time.perf_counter()
    latencies = []
    out = np.empty((len(texts), config.model.dim), dtype=np.float32)
    first_batch_s = None
    start = time.perf_counter()  # tokenising is part of the work
    cpu_start = time.process_time()
    encodings = tok.encode_batch(texts)
    ids = [np.asarray(e.ids, dtype=np.int64) for e in encodings]
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
        out[idx] = session.run(
            None,
            {
                "input_ids": input_ids,
                "attention_mask": mask,
                "token_type_ids": np.zeros_like(input_ids),
            },
        )[0]
        latencies.append((time.perf_counter() - b0) * 1000)
        first_batch_s = first_batch_s or latencies[0] / 1000
    total = time.perf_counter() - start
    cpu_s = time.process_time() - cpu_start
    p50, p99 = percentiles(latencies)
    return VariantResult(
        f"raw ORT fp32, batch {batch}, length-sorted",
        len(texts),
        len(texts) / total,
        p50,
        p99,
        note=f"latency per batch; intra-op threads {options.intra_op_num_threads}",
        extra={
            "cpu_ms_per_text": cpu_s * 1000 / len(texts),
            "cold_start_s": {
                "session_create": t1 - t0,
                "tokenizer_load": t2 - t1,
                "first_batch": first_batch_s,
            },
        },
    )


def _raw_triton(texts: list[str], args: dict[str, Any]) -> VariantResult:
    """The Triton client backend in a loop against a local server: the remote path's limit."""
    from flinkai.bench.embed_jobs import triton_server, triton_unavailable_reason
    from flinkai.serve.triton_server import TritonServerOptions

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
    start = time.perf_counter()
    with beam.Pipeline() as p:
        _ = (
            p
            | beam.Create(texts)
            | beam.Map(to_array)
            | RunInference(handler)
            | beam.combiners.Count.Globally()
        )
    seconds = time.perf_counter() - start
    return VariantResult(
        f"Beam RunInference (ONNX handler, DirectRunner, batch {batch})",
        len(texts),
        len(texts) / seconds,
        note=f"padded to {width} tokens",
    )


def _udf_dirs(args: dict[str, Any]) -> tuple[Path, ...]:
    return tuple(Path(p) for p in args.get("udf_dirs") or ()) or (_repo() / "udfs",)


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
    from flinkai.bench.embed_jobs import triton_server, triton_unavailable_reason

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
    from flinkai.bench.embed_jobs import bounded_job_run

    name = args["name"]
    script = _repo() / "jobs" / "embed_clicks.sql"
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
        full = bounded_job_run(texts, bootstrap, config, script, variables, udf_dirs)
    extra["job_seconds"] = full.job_seconds
    if full.output_times_s:
        extra["first_output_after_submit_s"] = min(full.output_times_s) - submitted
    if full.embedded != len(texts):
        return VariantResult(
            name,
            len(texts),
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
    if steady is not None and steady.window is not None and _SAMPLER is not None:
        start, end = steady.window
        cpu = cpu_between(_SAMPLER.cpu_series, start, end)
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
        )
    first = extra.get("first_output_after_submit_s")
    notes.insert(
        0,
        f"after 1st output; wall {full.job_seconds:.0f} s, 1st output at {first:.0f} s"
        if first is not None
        else "after 1st output",
    )
    return VariantResult(name, len(texts), rate, note="; ".join(notes), extra=extra)


def _latency(texts: list[str], args: dict[str, Any]) -> VariantResult:
    """The running job under a paced input at a fraction of its max rate: per-event latency."""
    from flinkai.bench.embed_jobs import latency_job_run

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
            _repo() / "jobs" / "embed_clicks.sql",
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


def _repo() -> Path:
    from flinkai.paths import repo_root

    root = repo_root()
    if root is None:
        raise SystemExit(
            "flinkai bench embed runs from a source checkout (needs jobs/ and benchmarks/)"
        )
    return root


def run_variant(
    kind: str, limit: int | None, args: dict[str, Any], timeout_s: float = VARIANT_TIMEOUT_S
) -> VariantResult:
    """Run one variant in a child process; returns its result with peak RSS.

    The child gets its own process group, so a timeout ends it together with what it
    started (Kafka, the Flink JVM, a Triton server).
    """
    payload = json.dumps({"kind": kind, "limit": limit, "args": args})
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flinkai.bench.embed", payload],
            stdout=out,
            stderr=err,
            text=True,
            env=env,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return VariantResult(
                args.get("name", kind), note=f"failed: timed out after {timeout_s:.0f} s"
            )
        except BaseException:  # Ctrl-C: take the child's broker and JVM down with it
            _kill_group(proc)
            raise
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if code != 0 or not lines:
        tail = " | ".join(ln.strip() for ln in stderr.strip().splitlines()[-3:])
        return VariantResult(args.get("name", kind), note=f"failed: {tail}")
    data = json.loads(lines[-1])
    return VariantResult(**data)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the group of a variant child that has not been reaped yet (so its pid is its own)."""
    signal_group(proc.pid, signal.SIGKILL)
    proc.wait()
    kill_stragglers(proc.pid)


def _child(payload: str) -> None:
    global _SAMPLER
    spec = json.loads(payload)
    texts = _texts(spec["limit"])
    with RssSampler() as rss:
        _SAMPLER = rss
        result = VARIANTS[spec["kind"]](texts, spec["args"])
    result.peak_rss_mb = rss.peak_mb
    print(json.dumps(asdict(result)), flush=True)


# -- the command -------------------------------------------------------------------------


def _gpu_available() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


def _fmt(v: float | None, digits: int = 1) -> str:
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
            f"{r.name:<{NAME_WIDTH}} {r.texts:>6} {_fmt(r.texts_per_s):>8} {_fmt(r.p50_ms):>8} "
            f"{_fmt(r.p99_ms):>8} {_fmt(r.peak_rss_mb, 0):>7} "
            f"{_fmt(r.extra.get('cpu_ms_per_text')):>8}  {r.note}"
        )


#: Flink options of the latency runs, on top of the job settings and the bundle time.
LATENCY_FLINK_CONF: tuple[str, ...] = ()

ALL_VARIANTS = ("raw", "job", "triton", "latency", "naive", "beam")


class _Steps:
    """Runs variants one after another, printing progress; keeps the rows."""

    def __init__(self) -> None:
        self.rows: list[VariantResult] = []

    def __call__(self, kind: str, limit: int | None, **kw: Any) -> VariantResult:
        name = kw.setdefault("name", kind)
        print(f"[{len(self.rows) + 1}] {name} on {limit or 'all'} texts ...", flush=True)
        t0 = time.monotonic()
        result = run_variant(kind, limit, kw)
        print(
            f"    {_fmt(result.texts_per_s)} texts/s, p50 {_fmt(result.p50_ms)} ms, "
            f"p99 {_fmt(result.p99_ms)} ms, CPU {_fmt(result.extra.get('cpu_ms_per_text'))} "
            f"ms/text ({time.monotonic() - t0:.0f} s) {result.note}",
            flush=True,
        )
        self.rows.append(result)
        return result

    def na(self, name: str, reason: str) -> VariantResult:
        result = VariantResult(name, note=f"n/a ({reason})")
        self.rows.append(result)
        return result


def _job_row_name(settings: JobSettings, backend: str = "ORT") -> str:
    what = "threads" if settings.parallelism == 1 else "threads/parallelism"
    return f"job, {backend} (arrow/bundle/batch/{what} {settings.label})"


def _ratio(a: VariantResult | None, b: VariantResult | None) -> float | None:
    if a is None or b is None or not a.texts_per_s or not b.texts_per_s:
        return None
    return a.texts_per_s / b.texts_per_s


def _write_json(path: str, payload: dict[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {path}")


def _bench(args: argparse.Namespace) -> int:
    if args.tune:
        return _tune(args)
    repo = _repo()
    variants = set(args.variants)
    settings: JobSettings = args.job
    overrides = settings.overrides()
    step = _Steps()
    print(
        f"job settings: arrow batch {settings.arrow_batch}, bundle {settings.bundle}, "
        f"model batch {settings.model_batch}, ORT intra-op threads {settings.ort_threads}, "
        f"parallelism {settings.parallelism}",
        flush=True,
    )

    best: VariantResult | None = None
    if "raw" in variants:
        raws = [
            step("raw_ort", args.limit, batch_size=b, threads=args.threads)
            for b in args.batch_sizes
        ]
        best = max(
            (r for r in raws if r.texts_per_s), key=lambda r: r.texts_per_s or 0.0, default=None
        )
        if best is not None:
            best.name += " (best)"
    job = raw_triton = job_triton = naive = beam = None
    if "job" in variants:
        job = step(
            "job",
            args.limit,
            name=_job_row_name(settings),
            overrides=overrides,
            two_run=args.two_run,
        )
    extra_jobs = [
        step("job", args.limit, name=_job_row_name(s), overrides=s.overrides())
        for s in args.extra_jobs
        if "job" in variants
    ]
    if "triton" in variants:
        raw_triton = step(
            "raw_triton",
            args.limit,
            name="raw Triton gRPC client loop (local server), length-sorted",
            overrides=overrides,
            chunk=settings.arrow_batch,
        )
        job_triton = step(
            "job",
            args.limit,
            name=_job_row_name(settings, "triton gRPC backend"),
            overrides=overrides,
            backend="triton",
        )
    latency_rows: list[VariantResult] = []
    if "latency" in variants:
        # (rate, label, where the rate came from): a fraction of the job row's rate, or
        # fixed rates, e.g. a latency-vs-rate curve without the job row
        paces: list[tuple[float | None, str, str | None]] = [
            (
                half_rate(job.texts_per_s if job else None, args.latency_fraction),
                f"{args.latency_fraction:.0%} of max rate",
                job.name if job else None,
            )
        ]
        if args.latency_rate:
            paces = [(r, f"{r:g}/s", None) for r in args.latency_rate]
        lat_overrides = {
            **overrides,
            "runtime": {
                **overrides["runtime"],
                "python_bundle_time_ms": args.latency_bundle_time_ms,
                "flink_conf": dict(kv.split("=", 1) for kv in args.latency_flink_conf),
            },
        }
        for (rate, pct, max_rate_from), (guarantee, label) in itertools.product(
            paces,
            (
                ("at-least-once", "at-least-once, read_uncommitted"),
                ("exactly-once", "exactly-once, read_committed"),
            ),
        ):
            if guarantee not in args.latency_guarantees:
                continue
            name = f"job latency at {pct}, {label}"
            if rate is None:
                latency_rows.append(step.na(name, "no job throughput measured in this run"))
                continue
            latency_rows.append(
                step(
                    "latency",
                    args.limit,
                    name=name,
                    overrides=lat_overrides,
                    guarantee=guarantee,
                    rate=rate,
                    max_rate_from=max_rate_from,
                    duration_s=args.latency_duration_s,
                    warmup_s=args.latency_warmup_s,
                )
            )
    if "naive" in variants:
        naive = step(
            "job",
            args.naive_limit,
            name="naive PyFlink UDF (row-at-a-time sentence-transformers)",
            overrides=overrides,
            variables={"EMBED_FUNCTION": "naive.text_to_vector_naive"},
            udf_dirs=[str(repo / "udfs"), str(repo / "benchmarks" / "baseline_udfs")],
        )
    if "beam" in variants:
        beam = step("beam", args.slow_limit, name="Apache Beam RunInference", batch_size=64)
    if not _gpu_available():
        for label in ("ORT CUDA fp32", "ORT CUDA fp16"):
            step.na(label, "no GPU")
    rows = step.rows
    print()
    print_table(rows)
    ratios = {
        "job / best raw ORT": _ratio(job, best),
        "job / naive UDF": _ratio(job, naive),
        "job / Beam RunInference": _ratio(job, beam),
        "job triton / raw Triton client": _ratio(job_triton, raw_triton),
        "job triton / job ORT": _ratio(job_triton, job),
    }
    for extra_job in extra_jobs:
        ratios[f"{extra_job.name} / best raw ORT"] = _ratio(extra_job, best)
    ratios = {k: v for k, v in ratios.items() if v is not None}
    if ratios:
        print()
        for k, v in ratios.items():
            print(f"{k:<40} {v:.2f}x")
    if latency_rows:
        print("\nlatency settings:")
        for r in latency_rows:
            s = r.extra.get("settings")
            if s:
                print(f"  {r.name}: {json.dumps(s)}")
    if args.json:
        _write_json(
            args.json,
            {
                "rows": [asdict(r) for r in rows],
                "ratios": ratios,
                "job_settings": asdict(settings),
                "run_id": uuid.uuid4().hex[:8],
                "cpu_count": os.cpu_count(),
                "load_avg": os.getloadavg(),
            },
        )
    return 0


def _tune(args: argparse.Namespace) -> int:
    """Job settings grid: each job's steady rate as a ratio to raw ORT runs of the same run."""
    step = _Steps()
    grid: list[JobSettings] = args.grid or [args.job]
    raw_batch = args.batch_sizes[0] if len(args.batch_sizes) == 1 else 32
    raws = [step("raw_ort", args.limit, batch_size=raw_batch, threads=args.threads)]
    jobs = []
    for i, settings in enumerate(grid):
        jobs.append(
            step("job", args.limit, name=_job_row_name(settings), overrides=settings.overrides())
        )
        if i % 3 == 2 and i != len(grid) - 1:  # re-measure the limit: the machine is shared
            raws.append(step("raw_ort", args.limit, batch_size=raw_batch, threads=args.threads))
    raws.append(step("raw_ort", args.limit, batch_size=raw_batch, threads=args.threads))
    raw_rates = [r.texts_per_s for r in raws if r.texts_per_s]
    raw_mean = float(np.mean(raw_rates)) if raw_rates else None
    raw_cpus = [c for r in raws if (c := r.extra.get("cpu_ms_per_text"))]
    raw_cpu = float(np.mean(raw_cpus)) if raw_cpus else None
    print()
    print_table(step.rows)
    print(
        f"\nraw ORT batch {raw_batch}: "
        + ", ".join(f"{r:.1f}" for r in raw_rates)
        + f" texts/s (mean {_fmt(raw_mean)}); CPU ms/text "
        + ", ".join(f"{c:.1f}" for c in raw_cpus)
    )
    print(
        "\n'/ raw' = job texts/s / mean raw texts/s (wall clock, load-sensitive); "
        "'CPU eff' = raw CPU ms/text / job CPU ms/text (all processes of the job)"
    )
    print(
        f"{'arrow:bundle:batch:threads':<28} {'texts/s':>8} {'/ raw':>7} {'CPU ms/t':>9} {'CPU eff':>8}"
    )
    table = []
    for settings, row in zip(grid, jobs, strict=True):
        ratio = row.texts_per_s / raw_mean if row.texts_per_s and raw_mean else None
        cpu = row.extra.get("cpu_ms_per_text")
        eff = raw_cpu / cpu if raw_cpu and cpu else None
        table.append(
            {
                "settings": asdict(settings),
                "texts_per_s": row.texts_per_s,
                "ratio": ratio,
                "cpu_ms_per_text": cpu,
                "cpu_efficiency": eff,
            }
        )
        print(
            f"{settings.label:<28} {_fmt(row.texts_per_s):>8} {_fmt(ratio, 2):>7} "
            f"{_fmt(cpu):>9} {_fmt(eff, 2):>8}"
        )
    if args.json:
        _write_json(
            args.json,
            {
                "rows": [asdict(r) for r in step.rows],
                "raw_mean": raw_mean,
                "raw_cpu_ms_per_text": raw_cpu,
                "grid": table,
                "load_avg": os.getloadavg(),
            },
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "embed",
        help="embedding backends selection matrix on AG News",
        description=(
            "Raw ONNX Runtime loop, the embed job (ORT and Triton backends), per-event "
            "latency at half the job's max rate, a naive PyFlink UDF and Beam RunInference, "
            "in one run. --tune runs a grid of job settings against the raw loop instead."
        ),
    )
    p.add_argument(
        "--limit", type=int, default=None, help="texts for the fast variants (default: all 3,800)"
    )
    p.add_argument("--slow-limit", type=int, default=600, help="texts for Beam RunInference")
    p.add_argument("--naive-limit", type=int, default=1200, help="texts for the naive UDF job")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64])
    p.add_argument(
        "--threads", type=int, default=0, help="raw ORT intra-op threads (0 = all cores)"
    )
    p.add_argument(
        "--variants",
        nargs="+",
        choices=ALL_VARIANTS,
        default=list(ALL_VARIANTS),
        help="what to run (latency needs job: it paces at a fraction of the job's rate)",
    )
    p.add_argument(
        "--job",
        type=JobSettings.parse,
        default=JobSettings(),
        metavar="ARROW:BUNDLE:BATCH:THREADS[:PAR]",
        help=f"job settings (default {JobSettings().label})",
    )
    p.add_argument(
        "--extra-jobs",
        type=JobSettings.parse,
        nargs="*",
        default=[],
        metavar="ARROW:BUNDLE:BATCH:THREADS[:PAR]",
        help="further job rows with other settings, for comparison in the same run",
    )
    p.add_argument(
        "--no-two-run",
        dest="two_run",
        action="store_false",
        help="skip the two-run marginal cross-check of the job row (saves one job start)",
    )
    p.add_argument("--latency-fraction", type=float, default=0.5, help="of the job's max rate")
    p.add_argument(
        "--latency-rate",
        type=float,
        nargs="+",
        default=None,
        help="pace the latency runs at these events/s (one run each) instead of a fraction "
        "of the job's",
    )
    p.add_argument(
        "--latency-duration-s", type=float, default=40.0, help="measured paced seconds per run"
    )
    p.add_argument(
        "--latency-warmup-s",
        type=float,
        default=10.0,
        help="paced seconds before the measured ones, at the same rate (their p99 is "
        "reported apart)",
    )
    p.add_argument(
        "--latency-bundle-time-ms",
        type=int,
        default=50,
        help="python_bundle_time_ms of the latency runs",
    )
    p.add_argument(
        "--latency-flink-conf",
        nargs="*",
        default=list(LATENCY_FLINK_CONF),
        metavar="KEY=VALUE",
        help=f"extra Flink options for the latency runs (default: {' '.join(LATENCY_FLINK_CONF)})",
    )
    p.add_argument(
        "--latency-guarantees",
        nargs="+",
        choices=("at-least-once", "exactly-once"),
        default=["at-least-once", "exactly-once"],
    )
    p.add_argument("--tune", action="store_true", help="run the job settings grid instead")
    p.add_argument(
        "--grid",
        type=JobSettings.parse,
        nargs="+",
        metavar="ARROW:BUNDLE:BATCH:THREADS[:PAR]",
        help="settings for --tune (default: just --job)",
    )
    p.add_argument("--json", help="write results as JSON here")
    p.set_defaults(handler=_bench)


if __name__ == "__main__":
    _child(sys.argv[1])
