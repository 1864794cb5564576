"""Put and cold restore of one 1,024-token SmolLM2 prefix, old store code against new.

Uses only the public API, so the same file runs against an older checkout
(``PYTHONPATH=<old checkout>``). Per run: a writer store publishes 16 blocks x 30
layers of fp32 [2, 3, 64, 64] K/V (one ``put_many``, 47 MB, as ``PrefixCache.publish``
does), then a new store on the same topic opens and restores them through
``PrefixCache.lookup``: first fetch to the per-layer K/V tensors the decoder takes.
Measures and prints; asserts nothing.

    python kvcache-restore-ab.py --bootstrap HOST:PORT --label after --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from dataclasses import fields, replace
from typing import Any

import numpy as np

from flinkai.llm.cache import KvCache, ModelShape
from flinkai.llm.prefix import PrefixCache
from flinkai.state import CodecConfig, KafkaSnapshotStore, KafkaStoreConfig

SHAPE = ModelShape(30, 3, 64, "float32", 49152)
TOKENS = 1025  # 16 full blocks; the last token is always prefilled

VARIANTS: dict[str, dict[str, Any]] = {
    "zstd+shuffle, sha256 (default)": {"codec": "zstd"},
    "none, sha256": {"codec": "none", "byte_shuffle": False},
    "none, xxh3_128": {"codec": "none", "byte_shuffle": False, "checksum": "xxh3_128"},
}


def one_run(bootstrap: str, codec: CodecConfig, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    layer = (1, 3, TOKENS, 64)
    cache = KvCache(
        tuple(rng.standard_normal(layer, dtype=np.float32) for _ in range(30)),
        tuple(rng.standard_normal(layer, dtype=np.float32) for _ in range(30)),
    )
    ids = [int(t) for t in rng.integers(256, 49000, TOKENS)]
    config = KafkaStoreConfig(
        bootstrap=bootstrap, topic=f"restore-ab-{uuid.uuid4().hex[:8]}", codec=codec
    )
    with KafkaSnapshotStore(config) as writer:
        prefix = PrefixCache(writer, model_id="m", model_version="v", shape=SHAPE)
        began = time.perf_counter()
        prefix.publish(ids, cache)
        put_s = time.perf_counter() - began
    began = time.perf_counter()
    reader = KafkaSnapshotStore(replace(config, create_topic=False))
    open_s = time.perf_counter() - began
    prefix = PrefixCache(reader, model_id="m", model_version="v", shape=SHAPE, publish=False)
    began, cpu = time.perf_counter(), time.process_time()
    restored = prefix.lookup(ids)
    get_s = time.perf_counter() - began
    # This process's CPU seconds (all its threads, librdkafka's included): on a busy
    # machine the wall time is mostly waiting for a core.
    cpu_s = time.process_time() - cpu
    reader.close()
    assert restored.past is not None
    np.testing.assert_array_equal(restored.past.keys[7], cache.keys[7][:, :, :1024])
    mb = restored.cached_tokens * SHAPE.kv_bytes_per_token / 1e6
    return {
        "mb": mb,
        "put_mb_s": mb / put_s,
        "open_ms": open_s * 1000,
        "restore_ms": get_s * 1000,
        "restore_mb_s": mb / get_s,
        "restore_cpu_ms": cpu_s * 1000,
        "load1": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    known = {f.name for f in fields(CodecConfig)}
    rows = []
    for run in range(args.runs):
        for name, options in VARIANTS.items():
            if not set(options) <= known:
                continue  # an option the checked-out code does not have
            row = {"label": args.label, "variant": name, "run": run}
            row.update(one_run(args.bootstrap, CodecConfig(**options), run))
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
