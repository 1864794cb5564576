"""``flinkai bench kvcache``: time to first token with and without prefix reuse.

Four ways to serve the same prompts, side by side in one run:

* ``none``: no reuse; every prompt is prefilled whole (the baseline).
* ``memory``: an in-process prefix cache (``InMemorySnapshotStore``, no codec),
  the vLLM-style anchor.
* ``kafka_warm``: the Kafka store in the worker that wrote the blocks, so the
  blocks come from its local decoded cache.
* ``kafka_cold``: a new worker (a new ``KafkaSnapshotStore``: new consumer, empty
  cache) per prompt, restoring the blocks from the topic. Opening the store (the
  index rebuild) is a worker's start-up, reported apart and not in TTFT.

``--cold-worker`` measures the cold worker as a worker meets it instead: a separate
process on a topic already holding ``--fill-mb`` of other prefixes, its TTFT including
the store's open, and the break-even (:mod:`flinkai_bench.kvcache_cold`).

For each prompt length and prefix-share ratio, one seed prompt publishes the shared
prefix (untimed), then each mode serves the same prompts, interleaved (prompt 1 in
every mode, then prompt 2...), so machine noise hits every mode alike. A prompt is
``share * length`` shared tokens then unique ones; ids are drawn from the vocabulary,
not text (the decoder's cost depends on the count only). One token is generated:
TTFT is lookup + restore + prefill + the first token's logits.

It also measures the store's put/get MB/s (:func:`flinkai_bench.research.state_workload.
measure_kafka_throughput`) and the restore cost of one prefix stored as one
snapshot per layer and block (the layout in use) against one whole-prefix snapshot
per layer. Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from flinkai.llm.prefix import Decoder, PrefixCache, PrefixCompletion
from flinkai.state import (
    CodecConfig,
    InMemorySnapshotStore,
    KafkaSnapshotStore,
    KafkaStoreConfig,
    SnapshotKey,
    SnapshotStore,
    prefix_hash,
)
from flinkai_bench.research.state_workload import measure_kafka_batch, measure_kafka_throughput
from flinkai_bench.shared.suite import EntryOutput, SuiteEntry

__all__ = ["MODES", "PROFILES", "Profile", "register", "run_kvcache_bench", "suite_entry"]

#: Serving order for each prompt. The cold worker goes before the warm one: the warm
#: store publishes the prompt's own blocks, which the cold worker would then find.
MODES = ("none", "memory", "kafka_cold", "kafka_warm")


@dataclass(frozen=True)
class Profile:
    """How much to run.

    Attributes:
        cells: ``(prompt length in tokens, prefix-share ratio)`` pairs.
        prompts: Timed prompts per cell and mode.
        throughput_mb: Snapshot sizes for the put/get MB/s figures.
    """

    cells: tuple[tuple[int, float], ...]
    prompts: int
    throughput_mb: tuple[int, ...]


def _grid(lengths: Sequence[int], shares: Sequence[float]) -> tuple[tuple[int, float], ...]:
    return tuple((n, s) for n in lengths for s in shares)


SHARES = (0.0, 0.5, 0.9)
PROFILES = {
    # A few minutes of prefill on 2 busy cores: the full grid to 512 tokens, and the
    # 90 % cell at 1,024 (the TTFT target is for prompts of 512 tokens or more).
    "quick": Profile((*_grid((128, 256, 512), SHARES), (1024, 0.9)), 2, (1, 16)),
    "default": Profile(_grid((128, 256, 512, 1024, 2048), SHARES), 4, (1, 16, 48)),
}


def _rss_mb() -> float:
    """Resident memory of this process now (Linux /proc)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    # nearest rank: with few samples p99 is the maximum, stated as such in the docs
    return ordered[min(len(ordered) - 1, max(0, int(np.ceil(q / 100 * len(ordered))) - 1))]


def _prompts(
    rng: np.random.Generator, vocab: int, length: int, share: float, n: int
) -> tuple[list[int], list[list[int]]]:
    """A seed prompt and ``n`` prompts sharing its first ``share * length`` tokens."""
    low = min(256, vocab // 2)  # keep clear of the special tokens at the low ids
    shared = [int(t) for t in rng.integers(low, vocab, int(share * length))]

    def one() -> list[int]:
        return shared + [int(t) for t in rng.integers(low, vocab, length - len(shared))]

    return one(), [one() for _ in range(n)]


@dataclass
class Cell:
    """Figures of one mode at one (length, share)."""

    mode: str
    length: int
    share: float
    ttft_ms: list[float]
    restore_ms: list[float]
    prefill_ms: list[float]
    publish_ms: list[float]
    cached_tokens: list[int]
    open_ms: list[float]
    rss_mb: float
    rejected: dict[str, int]

    def summary(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "length": self.length,
            "share": self.share,
            "n": len(self.ttft_ms),
            "ttft_p50_ms": statistics.median(self.ttft_ms),
            "ttft_p99_ms": _pct(self.ttft_ms, 99),
            "restore_p50_ms": statistics.median(self.restore_ms),
            "prefill_p50_ms": statistics.median(self.prefill_ms),
            "publish_p50_ms": statistics.median(self.publish_ms),
            "cached_tokens_mean": statistics.fmean(self.cached_tokens),
            "open_p50_ms": statistics.median(self.open_ms) if self.open_ms else None,
            "rss_max_mb": self.rss_mb,
            "rejected": self.rejected,
            "ttft_ms": self.ttft_ms,
        }


def run_kvcache_bench(
    decoder: Decoder,
    profile: Profile,
    *,
    bootstrap: str | None,
    block_tokens: int = 64,
    seed: int = 0,
    progress: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """Serve the profile's prompts in every mode; one summary row per cell.

    Args:
        decoder: The model (the real ONNX decoder for reported figures).
        profile: Lengths, shares and prompts.
        bootstrap: Kafka for the two Kafka modes; ``None`` runs ``none`` and ``memory`` only.
        block_tokens: Prefix block size.
        seed: Prompt ids come from this seed.
        progress: Called with a line per finished cell.
    """
    rng = np.random.default_rng(seed)
    vocab = decoder.shape.vocab_size or 49152
    modes = MODES if bootstrap else ("none", "memory")
    decoder.forward([1, 2, 3])  # warm the session up outside any timing
    rows: list[dict[str, Any]] = []
    for length, share in profile.cells:
        seed_ids, prompts = _prompts(rng, vocab, length, share, profile.prompts)
        cells = {m: Cell(m, length, share, [], [], [], [], [], [], 0.0, {}) for m in modes}
        topic = f"bench-kv-{uuid.uuid4().hex[:10]}"
        stores: dict[str, SnapshotStore | None] = {"none": None}
        stores["memory"] = InMemorySnapshotStore(CodecConfig(codec="none"))
        if bootstrap:
            stores["kafka_warm"] = KafkaSnapshotStore(_kafka_config(bootstrap, topic))
        caches = {
            m: PrefixCache.for_decoder(decoder, stores[m], block_tokens=block_tokens)
            for m in stores
        }
        if share > 0:
            # One prefill of the seed, published to both stores (untimed).
            _, seed_cache = decoder.forward(seed_ids)
            for m in ("memory", "kafka_warm"):
                if m in caches:
                    caches[m].publish(seed_ids, seed_cache)
        for ids in prompts:
            for mode in modes:
                gc.collect()
                cell = cells[mode]
                if mode == "kafka_cold":
                    assert bootstrap is not None
                    began = time.perf_counter()
                    cold_store = KafkaSnapshotStore(
                        replace(_kafka_config(bootstrap, topic), create_topic=False)
                    )
                    cell.open_ms.append((time.perf_counter() - began) * 1000)
                    cold = PrefixCache.for_decoder(
                        decoder, cold_store, block_tokens=block_tokens, publish=False
                    )
                    done = cold.complete(decoder, ids, max_new_tokens=1)
                    cell.rejected = _add(cell.rejected, cold.stats.rejected)
                    cell.rss_mb = max(cell.rss_mb, _rss_mb())
                    cold_store.close()
                else:
                    done = caches[mode].complete(decoder, ids, max_new_tokens=1)
                    cell.rss_mb = max(cell.rss_mb, _rss_mb())
                _record(cell, done)
        for mode in caches:
            if mode != "none":
                cells[mode].rejected = _add(cells[mode].rejected, caches[mode].stats.rejected)
        for store in stores.values():
            if store is not None:
                store.close()
        for mode in modes:
            row = cells[mode].summary()
            rows.append(row)
            progress(
                f"len {length:5d} share {share:.0%} {mode:10s} ttft p50 "
                f"{row['ttft_p50_ms']:8.1f} ms cached {row['cached_tokens_mean']:6.0f}"
            )
    return rows


def _kafka_config(bootstrap: str, topic: str) -> KafkaStoreConfig:
    # Blocks are ~100 KB: records stay under the broker's default 1 MiB limit.
    return KafkaStoreConfig(bootstrap=bootstrap, topic=topic, request_timeout_s=60.0)


def _add(a: dict[str, int], b: Any) -> dict[str, int]:
    out = dict(a)
    for k, v in dict(b).items():
        out[k] = out.get(k, 0) + int(v)
    return out


def _record(cell: Cell, done: PrefixCompletion) -> None:
    cell.ttft_ms.append(done.ttft_ms)
    cell.restore_ms.append(done.restore_ms)
    cell.prefill_ms.append(done.prefill_ms)
    cell.publish_ms.append(done.publish_ms)
    cell.cached_tokens.append(done.cached_tokens)


def granularity(
    decoder: Decoder, bootstrap: str, tokens: int, block_tokens: int = 64
) -> dict[str, Any]:
    """Cold restore of one ``tokens`` prefix: per-block snapshots vs whole-prefix ones.

    Both layouts hold the same bytes; the whole-prefix layout needs one snapshot per
    layer and prefix length (quadratic storage if every block boundary is kept).
    """
    shape = decoder.shape
    rng = np.random.default_rng(1)
    layers, heads, dim = shape.n_layers, shape.n_kv_heads, shape.head_dim
    blocks = tokens // block_tokens
    per_block = rng.standard_normal((blocks, layers, 2, heads, block_tokens, dim)).astype("float32")
    topic = f"bench-kv-gran-{uuid.uuid4().hex[:8]}"
    config = _kafka_config(bootstrap, topic)
    out: dict[str, Any] = {"tokens": tokens, "block_tokens": block_tokens}
    with KafkaSnapshotStore(config) as writer:
        block_keys = [
            SnapshotKey("bench", layer, prefix_hash([b, 0]))
            for b in range(blocks)
            for layer in range(layers)
        ]
        writer.put_many(
            [(k, per_block[i // layers, i % layers]) for i, k in enumerate(block_keys)],
            model_version="g",
        )
        whole_keys = [
            SnapshotKey("bench", layer, prefix_hash([tokens, 1])) for layer in range(layers)
        ]
        whole = np.concatenate(list(per_block), axis=3)  # [layers, 2, heads, tokens, dim]
        writer.put_many(
            [(k, whole[layer]) for layer, k in enumerate(whole_keys)], model_version="g"
        )
    for name, keys in (("per_block", block_keys), ("whole_prefix", whole_keys)):
        with KafkaSnapshotStore(replace(config, create_topic=False)) as reader:
            began = time.perf_counter()
            got = reader.get_many(keys, model_version="g")
            out[f"{name}_restore_ms"] = (time.perf_counter() - began) * 1000
            out[f"{name}_snapshots"] = len(keys)
            assert all(s is not None for s in got)
    out["bytes"] = int(per_block.nbytes)
    return out


def _x_no_cache(rows: list[dict[str, Any]]) -> list[float]:
    """Each row's TTFT p50 over the no-cache row's at the same length and share."""
    base = {(r["length"], r["share"]): r["ttft_p50_ms"] for r in rows if r["mode"] == "none"}
    return [
        r["ttft_p50_ms"] / base[(r["length"], r["share"])]
        if (r["length"], r["share"]) in base
        else float("nan")
        for r in rows
    ]


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| length | share | mode | TTFT p50 ms | TTFT p99 ms | x no-cache p50 | cached tok | "
        "restore p50 ms | prefill p50 ms | publish p50 ms | open ms | max RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, ratio in zip(rows, _x_no_cache(rows), strict=True):
        open_ms = f"{r['open_p50_ms']:.0f}" if r["open_p50_ms"] is not None else ""
        lines.append(
            f"| {r['length']} | {r['share']:.0%} | {r['mode']} | {r['ttft_p50_ms']:.1f} | "
            f"{r['ttft_p99_ms']:.1f} | {ratio:.2f} | {r['cached_tokens_mean']:.0f} | "
            f"{r['restore_p50_ms']:.1f} | {r['prefill_p50_ms']:.1f} | "
            f"{r['publish_p50_ms']:.0f} | {open_ms} | "
            f"{r['rss_max_mb']:.0f} |"
        )
    return "\n".join(lines)


def _handle(args: argparse.Namespace) -> int:
    from flinkai.config import load_config
    from flinkai.functions.llm import load_prompt_model

    profile = PROFILES["quick" if args.quick else "default"]
    if args.lengths:
        lengths = [int(x) for x in args.lengths.split(",")]
        profile = replace(profile, cells=_grid(lengths, SHARES))
    if args.prompts:
        profile = replace(profile, prompts=args.prompts)
    config = load_config(getattr(args, "config", None))
    model = None if args.store_only or args.raw_ceiling else load_prompt_model(config)
    decoder = model.decoder if model is not None else None
    started = time.time()
    loadavg_start = os.getloadavg()
    rows: list[dict[str, Any]] = []
    gran: dict[str, Any] = {}
    cold: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    fp16: dict[str, Any] = {}
    if model is not None and args.fp16_check:
        from flinkai_bench.kvcache_fp16 import fp16_token_check

        fp16 = fp16_token_check(
            model.decoder,
            model.tokenizer.apply_chat_template,
            share=args.cold_share,
            block_tokens=config.llm.block_tokens,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
        print(
            f"fp16 storage: greedy tokens equal on {fp16['equal']} of {fp16['checked']} "
            f"prompts ({fp16['new_tokens']} tokens each, {fp16['share']:.0%} restored); "
            f"largest first-logit change {fp16['max_logit_delta']:.4f}"
        )
    throughput: list[dict[str, Any]] = []
    if not args.fp16_check:
        rows, gran, cold, raw, throughput = _kafka_modes(args, decoder, profile, config)
    result = {
        "benchmark": "kvcache",
        "profile": "quick" if args.quick else "default",
        "store_only": bool(args.store_only),
        "model_id": decoder.model_id if decoder is not None else None,
        "model_version": decoder.model_version if decoder is not None else None,
        "block_tokens": config.llm.block_tokens,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "processor": platform.processor(),
            "loadavg_start": loadavg_start,
            "loadavg_end": os.getloadavg(),
        },
        "gpu": _gpu_line(),
        "started_unix": started,
        "seconds": time.time() - started,
        "rows": rows,
        "granularity": gran,
        "store_throughput": throughput,
        "cold_worker": cold,
        "raw_ceiling": raw,
        "fp16_check": fp16,
    }
    if cold:
        _print_cold(cold)
    if raw:
        m = raw["median"]
        print(
            f"{raw['tokens']}-token prefix ({raw['bytes'] / 1e6:.0f} MB, median of "
            f"{len(raw['runs'])}): raw produce {m['raw_produce_mb_s']:.0f} MB/s, raw fetch "
            f"{m['raw_fetch_mb_s']:.0f} MB/s"
        )
        for v in raw["put_ratio"]:
            print(
                f"  store {v}: put {m[f'store_put_mb_s[{v}]']:.0f} MB/s "
                f"(x{raw['put_ratio'][v]:.2f} of raw), restore "
                f"{m[f'store_restore_mb_s[{v}]']:.0f} MB/s (x{raw['restore_ratio'][v]:.2f})"
            )
    if rows:
        print(_table(rows))
        print(json.dumps({"granularity": gran}, indent=1))
    for t in throughput:
        what = (
            f"{t['mb']} MB"
            if t["call"] == "put"
            else f"put_many {t['snapshots']} x {'x'.join(map(str, t['shape']))}"
        )
        print(
            f"store {what} {t['codec']}: put {t['put_mb_s']:.0f} MB/s, get cold "
            f"{t['get_cold_mb_s']:.0f} MB/s, get cached {t['get_cached_mb_s']:.0f} MB/s"
        )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def _store_throughput(bootstrap: str, profile: Profile, block_tokens: int) -> list[dict[str, Any]]:
    """Put/get MB/s: single puts of each size, then ``put_many`` as the prefix cache calls it.

    The ``put_many`` rows are 16 x 1 MiB snapshots in one transaction, and one
    prompt block as published (30 layers x ``[2, 3, block_tokens, 64]`` fp32).
    """
    out: list[dict[str, Any]] = []

    def config(codec: Literal["zstd", "none"]) -> KafkaStoreConfig:
        return KafkaStoreConfig(
            bootstrap=bootstrap,
            topic=f"bench-kv-tp-{uuid.uuid4().hex[:8]}",
            codec=CodecConfig(codec=codec),
        )

    codecs: tuple[Literal["zstd", "none"], ...] = ("zstd", "none")
    for codec in codecs:
        for mb in profile.throughput_mb:
            figures = measure_kafka_throughput(config(codec), mb * 2**20, dtype="float32")
            out.append({"call": "put", "mb": mb, "codec": codec, **asdict(figures)})
        # 1 MiB fp32 of (2, 3, tokens, 64) is 682 tokens.
        batches = ((16, (2, 3, 682, 64)), (30, (2, 3, block_tokens, 64)))
        for count, shape in batches:
            batch = measure_kafka_batch(config(codec), count, shape)
            out.append({"call": "put_many", "codec": codec, **asdict(batch)})
    return out


def _kafka_modes(
    args: argparse.Namespace, decoder: Decoder | None, profile: Profile, config: Any
) -> tuple[
    list[dict[str, Any]],
    dict[str, Any],
    dict[str, Any],
    dict[str, Any],
    list[dict[str, Any]],
]:
    """The modes that need Kafka (a local broker unless ``--bootstrap``): TTFT rows and
    granularity, or the cold worker, or the raw ceiling; and the store's MB/s rows."""
    from flinkai.kafka.broker import LocalKafka
    from flinkai.local.process import free_port

    rows: list[dict[str, Any]] = []
    gran: dict[str, Any] = {}
    cold: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="flinkai-bench-kv-") as work:
        broker = None if args.bootstrap else LocalKafka(Path(work) / "kafka", port=free_port())
        if broker is not None:
            broker.start()
        try:
            bootstrap = args.bootstrap or (broker.bootstrap if broker else None)
            assert bootstrap is not None
            if args.raw_ceiling:
                from flinkai_bench.kvcache_raw import measure_raw_ceiling

                raw = measure_raw_ceiling(bootstrap, runs=args.raw_runs)
            elif decoder is not None and args.cold_worker:
                cold = _cold_worker_run(decoder, bootstrap, args, config.llm.block_tokens)
            elif decoder is not None:
                rows = run_kvcache_bench(
                    decoder,
                    profile,
                    bootstrap=bootstrap,
                    block_tokens=config.llm.block_tokens,
                    progress=lambda line: print(line, file=sys.stderr, flush=True),
                )
                gran = granularity(decoder, bootstrap, 1024, config.llm.block_tokens)
            throughput = (
                []
                if args.cold_worker or args.raw_ceiling
                else _store_throughput(bootstrap, profile, config.llm.block_tokens)
            )
        finally:
            if broker is not None:
                broker.stop()
    return rows, gran, cold, raw, throughput


def register(subparsers: Any) -> None:
    """Add ``flinkai bench kvcache``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "kvcache",
        help="TTFT with prefix reuse: none / in-process / Kafka warm / Kafka cold",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--quick", action="store_true", help="fewer lengths and prompts")
    parser.add_argument("--lengths", help="comma-separated prompt lengths (tokens)")
    parser.add_argument("--prompts", type=int, help="timed prompts per cell and mode")
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    parser.add_argument(
        "--store-only",
        action="store_true",
        help="only the store's put/get MB/s (no model, no TTFT rows)",
    )
    parser.add_argument(
        "--cold-worker",
        action="store_true",
        help="only the cold worker: a separate process on a topic already holding "
        "--fill-mb of other prefixes, TTFT including the store's open; and the break-even",
    )
    parser.add_argument("--fill-mb", type=float, default=2000.0, help="with --cold-worker")
    parser.add_argument(
        "--cold-lengths", default="512,1024", help="with --cold-worker: prompt lengths"
    )
    parser.add_argument("--cold-share", type=float, default=0.9, help="with --cold-worker")
    parser.add_argument(
        "--store-dtype",
        choices=("same", "float16"),
        default="same",
        help="with --cold-worker: store the K/V as float32 (same) or at half precision",
    )
    parser.add_argument(
        "--open-runs",
        type=int,
        default=5,
        help="with --cold-worker: fresh-process store opens timed against a plain "
        "consumer reading the same index topic (0: none)",
    )
    parser.add_argument(
        "--raw-ceiling",
        action="store_true",
        help="only the 1,024-token put_many / cold restore against a raw confluent-kafka "
        "producer and consumer on the same bytes (the machine's Kafka ceiling)",
    )
    parser.add_argument("--raw-runs", type=int, default=3, help="with --raw-ceiling")
    parser.add_argument(
        "--fp16-check",
        action="store_true",
        help="only the half-precision storage check: greedy tokens of the 20 chat prompts "
        "with --cold-share of each restored at fp16, against no cache (no broker needed)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.set_defaults(handler=_handle)


def _cold_worker_run(
    decoder: Decoder, bootstrap: str, args: argparse.Namespace, block_tokens: int
) -> dict[str, Any]:
    """``--cold-worker``: fill a topic, then one new process per length (see kvcache_cold)."""
    from flinkai_bench.kvcache_cold import (
        FAST_CODEC,
        break_even,
        cold_config,
        fill_topic,
        measure_open,
        run_cold_workers,
    )

    codec = FAST_CODEC if args.store_dtype == "same" else replace(FAST_CODEC, store_dtype="float16")
    config = cold_config(bootstrap, codec=codec)
    began = time.perf_counter()
    fill = fill_topic(
        config,
        decoder.shape,
        model_id=decoder.model_id,
        model_version=decoder.model_version,
        mb=args.fill_mb,
        block_tokens=block_tokens,
    )
    fill["seconds"] = time.perf_counter() - began
    print(f"filled {fill['fill_mb']:.0f} MB: {fill}", file=sys.stderr, flush=True)
    worker_argv = ["--config", args.config] if getattr(args, "config", None) else []
    rows = run_cold_workers(
        decoder,
        config,
        [int(n) for n in args.cold_lengths.split(",")],
        share=args.cold_share,
        block_tokens=block_tokens,
        worker_argv=worker_argv,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    opened = measure_open(config, args.open_runs) if args.open_runs else {}
    if opened:
        print(
            f"store open on {fill['fill_mb']:.0f} MB ({opened['index_records']} index records, "
            f"{opened['index_bytes'] / 1e6:.1f} MB): p50 {opened['open_ms_p50']:.0f} ms; plain "
            f"consumer reading the same index p50 {opened['floor_ms_p50']:.0f} ms "
            f"(x{opened['open_over_floor_p50']:.2f}); runs {opened['runs']}",
            file=sys.stderr,
            flush=True,
        )
    return {
        "codec": asdict(config.codec),
        "fill": fill,
        "rows": rows,
        "open": opened,
        "break_even": break_even(rows, decoder.shape.kv_bytes_per_token),
    }


def _print_cold(cold: dict[str, Any]) -> None:
    print(
        "| length | share | open ms | TTFT ms (lookup+restore+prefill) | TTFT incl. open ms | "
        "no-cache TTFT ms | x no-cache | cached tok | restore ms | restore MB/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in cold["rows"]:
        mb_s = r["restored_mb"] / (r["restore_ms"] / 1000) if r["restore_ms"] else 0.0
        print(
            f"| {r['length']} | {r['share']:.0%} | {r['open_ms']:.0f} | {r['ttft_ms']:.0f} | "
            f"{r['ttft_with_open_ms']:.0f} | {r['no_cache_ttft_ms']:.0f} | "
            f"{r['x_no_cache']:.2f} | {r['cached_tokens']} | {r['restore_ms']:.0f} | "
            f"{mb_s:.0f} |"
        )
    b = cold["break_even"]
    if b:
        tokens = b["break_even_tokens"]
        print(
            f"break-even: restore {b['restore_mb_s']:.0f} MB/s "
            f"({b['restore_ms_per_token']:.3f} ms/token), prefill "
            f"{b['prefill_ms_per_token']:.2f} ms/token on this CPU, open {b['open_ms']:.0f} ms "
            f"-> restoring beats recomputing from "
            + (f"{tokens:.0f} tokens" if tokens is not None else "never (restore is slower)")
        )
        print(f"GPU prefill: {b['gpu_prefill']}; restore bandwidth a GPU needs:")
        for g in b["gpu_bandwidth_per_1k_prefill_tokens_s"]:
            print(
                f"  {g['model']}: {g['kv_bytes_per_token']:,} B/token -> "
                f"{g['mb_s_per_1k_prefill_tokens_s']:.0f} MB/s per 1,000 prefill tokens/s"
            )


# -- in ``flinkai bench suite`` ---------------------------------------------------------

#: The suite's cells per profile (size = the longest prompt): quick keeps one length at
#: 0 % and 90 % share, so it adds about a minute on a quiet 2-core machine.
SUITE_PROFILES = {
    256: Profile(((256, 0.0), (256, 0.9)), 1, (16,)),
    1024: Profile(_grid((256, 512, 1024), (0.0, 0.9)), 2, (1, 16)),
    2048: Profile(_grid((256, 512, 1024, 2048), SHARES), 3, (1, 16, 48)),
}


def _gpu_line() -> str:
    # The decoder (OnnxDecoder) opens its session on the CPU provider only.
    from flinkai_bench.shared.devices import SystemProbe, gpu_status

    return gpu_status(SystemProbe().report(), None, "the SmolLM2 decoder (ONNX Runtime)")


def _suite_run(size: int | None) -> EntryOutput:
    from flinkai.config import load_config
    from flinkai.functions.llm import load_prompt_model
    from flinkai.kafka.broker import LocalKafka
    from flinkai.local.process import free_port

    profile = SUITE_PROFILES[size or max(SUITE_PROFILES)]
    config = load_config()
    decoder = load_prompt_model(config).decoder
    with (
        tempfile.TemporaryDirectory(prefix="flinkai-bench-kv-") as work,
        LocalKafka(Path(work) / "kafka", port=free_port()) as broker,
    ):
        rows = run_kvcache_bench(
            decoder, profile, bootstrap=broker.bootstrap, block_tokens=config.llm.block_tokens
        )
        throughput = _store_throughput(broker.bootstrap, profile, config.llm.block_tokens)
    ttft = [
        {
            "cell": f"{r['length']} tok, {r['share']:.0%} shared, {r['mode']}",
            "ttft_p50_ms": r["ttft_p50_ms"],
            "ttft_p99_ms": r["ttft_p99_ms"],
            "x_no_cache_p50": ratio,
            "cached_tokens": r["cached_tokens_mean"],
            "restore_p50_ms": r["restore_p50_ms"],
            "prefill_p50_ms": r["prefill_p50_ms"],
            "max_rss_mb": r["rss_max_mb"],
        }
        for r, ratio in zip(rows, _x_no_cache(rows), strict=True)
    ]
    store = [
        {
            "call": t["call"],
            "snapshot": f"{t['mb']} MB" if t["call"] == "put" else f"{t['snapshots']} blocks",
            "codec": t["codec"],
            "put_mb_s": t["put_mb_s"],
            "get_cold_mb_s": t["get_cold_mb_s"],
            "get_cached_mb_s": t["get_cached_mb_s"],
        }
        for t in throughput
    ]
    notes = [
        f"SmolLM2-135M ONNX decoder on CPU ({decoder.model_version}), {profile.prompts} timed "
        "prompt(s) per cell and mode, modes interleaved; TTFT = lookup + restore + prefill + "
        "first token. The cold worker opens a new store per prompt (open time not in TTFT).",
        f"GPU: {_gpu_line()}.",
    ]
    return EntryOutput({"TTFT by mode": ttft, "store MB/s": store}, notes)


suite_entry = SuiteEntry(
    name="kvcache",
    description="LLM prefix reuse: TTFT with no cache, in-process, Kafka warm and Kafka cold "
    "worker; the snapshot store's put/get MB/s.",
    sizes={"quick": 256, "default": 1024, "full": 2048},
    run=_suite_run,
    chart=("cell", "ttft_p50_ms"),
)
