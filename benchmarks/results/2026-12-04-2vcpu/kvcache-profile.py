"""py-spy target: put_many and cold get_many of one 1,024-token prefix, repeated.

30 layers x fp32 [2, 3, 1024, 64] (47 MB), codec none, default checksum; each round
a fresh topic, a writer ``put_many`` and a new reader store's ``get_many``. Run it
under ``py-spy record -f raw --subprocesses -- python kvcache-profile.py HOST:PORT N``;
prints each round's MB/s; asserts nothing.
"""

from __future__ import annotations

import sys
import time
import uuid
from dataclasses import replace

from flinkai.state import CodecConfig, KafkaSnapshotStore, KafkaStoreConfig, SnapshotKey
from flinkai.state.base import prefix_hash
from flinkai_bench.research.state_workload import kv_like

bootstrap, rounds = sys.argv[1], int(sys.argv[2])
tensors = [
    kv_like(2 * 3 * 1024 * 64 * 4, "float32", "smooth", seed=i).reshape(2, 3, 1024, 64)
    for i in range(30)
]
mb = sum(t.nbytes for t in tensors) / 1e6
for n in range(rounds):
    config = KafkaStoreConfig(
        bootstrap=bootstrap, topic=f"prof-{uuid.uuid4().hex[:8]}", codec=CodecConfig(codec="none")
    )
    keys = [SnapshotKey("m", i, prefix_hash([n])) for i in range(30)]
    with KafkaSnapshotStore(config) as w:
        t = time.perf_counter()
        w.put_many(list(zip(keys, tensors, strict=True)), model_version="v")
        put = time.perf_counter() - t
    with KafkaSnapshotStore(replace(config, create_topic=False)) as r:
        t = time.perf_counter()
        got = r.get_many(keys)
        get = time.perf_counter() - t
    print(
        f"round {n}: put {mb / put:.0f} MB/s, restore {mb / get:.0f} MB/s, misses {got.count(None)}"
    )
