"""``flinkai bench embed``: the embedding backend selection matrix.

Every variant embeds the same AG News texts on the same machine in one run, so
the figures are comparable as ratios even on a noisy 2-core box. Each variant
runs in its own subprocess, so its peak RSS (the process plus its children: the
Flink JVM and Python workers) is its own.

Flink job throughput is *marginal*: the job runs once on a small prefix and once
on all texts, and throughput = extra texts / extra seconds. That cancels the
fixed job start-up (about 30 s on a MiniCluster) which a long-running stream pays
once. Start-up is reported separately.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["VariantResult", "register", "run_variant"]

SMALL_RUN = 64


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


# -- measurement helpers ---------------------------------------------------------------


class RssSampler:
    """Peak resident memory of this process plus all its descendants (Linux /proc)."""

    def __init__(self, interval_s: float = 0.25) -> None:
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._interval = interval_s

    def __enter__(self) -> RssSampler:
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
        self.peak_bytes = max(self.peak_bytes, _tree_rss(os.getpid()))

    @property
    def peak_mb(self) -> float:
        return self.peak_bytes / 2**20


def _tree_rss(root: int) -> int:
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        rss[int(entry)] = int(fields[21]) * page
    total = 0
    for pid in rss:
        p = pid
        while p in parents and p != root and p > 1:
            p = parents[p]
        if p == root:
            total += rss[pid]
    return total


def _percentiles(values_ms: Sequence[float]) -> tuple[float | None, float | None]:
    if not values_ms:
        return None, None
    arr = np.asarray(values_ms)
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


def _texts(limit: int | None) -> list[str]:
    from flinkai.datasets import load_ag_news

    return [t for _, t in load_ag_news(limit=limit)]


# -- variants (each runs in a child process) -------------------------------------------


def _raw_ort(texts: list[str], args: dict[str, Any]) -> VariantResult:
    """A plain loop over the ORT session: tokenise, sort by length, pad, run. The limit."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from flinkai.config import load_config
    from flinkai.models.artifacts import load_artifacts

    config = load_config()
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
    encodings = tok.encode_batch(texts)
    ids = [np.asarray(e.ids, dtype=np.int64) for e in encodings]
    order = np.argsort([len(i) for i in ids], kind="stable")
    latencies = []
    out = np.empty((len(texts), config.model.dim), dtype=np.float32)
    first_batch_s = None
    start = time.perf_counter()
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
    total = time.perf_counter() - start + (t2 - t1)  # tokenising is part of the work
    p50, p99 = _percentiles(latencies)
    return VariantResult(
        f"raw ORT fp32, batch {batch}, length-sorted",
        len(texts),
        len(texts) / total,
        p50,
        p99,
        note="latency per batch",
        extra={
            "cold_start_s": {
                "session_create": t1 - t0,
                "tokenizer_load": t2 - t1,
                "first_batch": first_batch_s,
            }
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


def _job_once(
    texts: list[str],
    bootstrap: str,
    config: Any,
    variables: dict[str, str],
    udf_dirs: tuple[Path, ...],
) -> tuple[float, int]:
    from flinkai.demo import run_demo

    events = [
        json.dumps({"user_id": f"b-{i}", "click_text": t, "event_time": i}).encode()
        for i, t in enumerate(texts)
    ]
    report = run_demo(
        config,
        bootstrap,
        _repo() / "jobs" / "embed_clicks.sql",
        events=events,
        variables=variables,
        udf_dirs=udf_dirs,
    )
    return report.job_seconds, len(report.embedded)


def _job(texts: list[str], args: dict[str, Any]) -> VariantResult:
    """The flinkai job end to end: Kafka -> Flink SQL -> UDF -> Kafka, marginal throughput."""
    from flinkai.config import load_config
    from flinkai.kafka.broker import LocalKafka, free_port

    config = load_config()
    overrides = args.get("overrides") or {}
    if overrides:
        config = config.with_overrides(**overrides)
    variables = dict(args.get("variables") or {})
    udf_dirs = tuple(Path(p) for p in args.get("udf_dirs") or ()) or (_repo() / "udfs",)
    with (
        tempfile.TemporaryDirectory(prefix="flinkai-bench-kafka-") as d,
        LocalKafka(port=free_port(), data_dir=Path(d)) as kafka,
    ):
        small = texts[:SMALL_RUN]
        t_small, n_small = _job_once(small, kafka.bootstrap, config, variables, udf_dirs)
        t_full, n_full = _job_once(texts, kafka.bootstrap, config, variables, udf_dirs)
    if n_full != len(texts) or n_small != len(small):
        return VariantResult(
            args["name"], len(texts), note=f"incomplete: {n_full}/{len(texts)} embedded"
        )
    if t_full <= t_small:
        # Start-up noise exceeds the extra work: no honest marginal rate exists.
        return VariantResult(
            args["name"],
            len(texts),
            note=f"n/a: full run {t_full:.1f} s <= small run {t_small:.1f} s; use more texts",
            extra={"job_seconds": t_full, "startup_run_seconds": t_small},
        )
    marginal = (len(texts) - len(small)) / (t_full - t_small)
    return VariantResult(
        args["name"],
        len(texts),
        marginal,
        note=f"marginal; job wall {t_full:.1f} s incl. start-up ~{t_small:.1f} s",
        extra={"job_seconds": t_full, "startup_run_seconds": t_small},
    )


VARIANTS: dict[str, Callable[[list[str], dict[str, Any]], VariantResult]] = {
    "raw_ort": _raw_ort,
    "beam": _beam,
    "job": _job,
}


def _repo() -> Path:
    from flinkai.paths import repo_root

    root = repo_root()
    if root is None:
        raise SystemExit(
            "flinkai bench embed runs from a source checkout (needs jobs/ and benchmarks/)"
        )
    return root


def run_variant(kind: str, limit: int | None, args: dict[str, Any]) -> VariantResult:
    """Run one variant in a child process; returns its result with peak RSS."""
    payload = json.dumps({"kind": kind, "limit": limit, "args": args})
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "flinkai.bench.embed", payload],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        return VariantResult(args.get("name", kind), note=f"failed: {tail}")
    data = json.loads(lines[-1])
    return VariantResult(**data)


def _child(payload: str) -> None:
    spec = json.loads(payload)
    texts = _texts(spec["limit"])
    with RssSampler() as rss:
        result = VARIANTS[spec["kind"]](texts, spec["args"])
    result.peak_rss_mb = rss.peak_mb
    print(json.dumps(asdict(result)))


# -- the command -------------------------------------------------------------------------


def _gpu_available() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


def _fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def print_table(rows: Sequence[VariantResult]) -> None:
    header = f"{'variant':<58} {'texts':>6} {'texts/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'RSS MB':>8}  note"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.name:<58} {r.texts:>6} {_fmt(r.texts_per_s):>8} {_fmt(r.p50_ms):>8} "
            f"{_fmt(r.p99_ms):>8} {_fmt(r.peak_rss_mb, 0):>8}  {r.note}"
        )


def _bench(args: argparse.Namespace) -> int:
    repo = _repo()
    rows: list[VariantResult] = []

    def step(kind: str, limit: int | None, **kw: Any) -> VariantResult:
        name = kw.get("name", kind)
        print(f"[{len(rows) + 1}] {name} on {limit or 'all'} texts ...", flush=True)
        t0 = time.monotonic()
        result = run_variant(kind, limit, kw)
        print(
            f"    {_fmt(result.texts_per_s)} texts/s ({time.monotonic() - t0:.0f} s) {result.note}",
            flush=True,
        )
        rows.append(result)
        return result

    raws = [
        step("raw_ort", args.limit, batch_size=b, threads=args.threads) for b in args.batch_sizes
    ]
    best = max((r for r in raws if r.texts_per_s), key=lambda r: r.texts_per_s or 0.0, default=None)
    if best is not None:
        best.name = best.name + " (best)"
    job = step("job", args.limit, name="flinkai embed job (Kafka->Flink->ORT->Kafka)")
    if "naive" in args.variants:
        step(
            "job",
            args.slow_limit,
            name="naive PyFlink UDF (row-at-a-time sentence-transformers)",
            variables={"EMBED_FUNCTION": "naive.text_to_vector_naive"},
            udf_dirs=[str(repo / "udfs"), str(repo / "benchmarks" / "baseline_udfs")],
        )
    if "beam" in args.variants:
        step("beam", args.slow_limit, name="Apache Beam RunInference", batch_size=64)
    for label in ("ORT CUDA fp32", "ORT CUDA fp16"):
        if not _gpu_available():
            rows.append(VariantResult(label, note="n/a (no GPU)"))
    print()
    print_table(rows)
    ratios = {}
    if best and best.texts_per_s and job.texts_per_s:
        ratios["job / best raw ORT"] = job.texts_per_s / best.texts_per_s
    for r in rows:
        if r.texts_per_s and job.texts_per_s and r is not job and "raw ORT" not in r.name:
            ratios[f"job / {r.name}"] = job.texts_per_s / r.texts_per_s
    if ratios:
        print()
        for k, v in ratios.items():
            print(f"{k:<70} {v:.2f}x")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(
                {
                    "rows": [asdict(r) for r in rows],
                    "ratios": ratios,
                    "run_id": uuid.uuid4().hex[:8],
                    "cpu_count": os.cpu_count(),
                },
                indent=2,
            )
        )
        print(f"\nwrote {args.json}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("embed", help="embedding backends selection matrix on AG News")
    p.add_argument(
        "--limit", type=int, default=None, help="texts for the fast variants (default: all 3,800)"
    )
    p.add_argument("--slow-limit", type=int, default=600, help="texts for the slow baselines")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64])
    p.add_argument("--threads", type=int, default=0, help="ORT intra-op threads (0 = all cores)")
    p.add_argument("--variants", nargs="+", default=["naive", "beam"], help="baselines to include")
    p.add_argument("--json", help="write results as JSON here")
    p.set_defaults(handler=_bench)


if __name__ == "__main__":
    _child(sys.argv[1])
