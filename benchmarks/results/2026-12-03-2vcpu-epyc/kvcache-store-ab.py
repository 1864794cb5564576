"""Like-for-like A/B/C in one run (same broker, same data, interleaved rounds) of the
Kafka snapshot store's write path:
  orig      flinkai/state/kafka.py before this work (3d6372d~1)
  7e97a97   catch-up poll 10 ms + writer skips its own records
  pipelined + put_many encodes inside the transaction (send overlaps encode), no chunk copy
zstd+shuffle codec, fp32 smooth data, best of 3 calls per figure.

Run from the repository root (commit 3d6372d~1 and 7e97a97 are the two older versions):
  mkdir -p /tmp/t12
  git show 3d6372d~1:flinkai/state/kafka.py > /tmp/t12/kafka_orig.py
  git show 7e97a97:flinkai/state/kafka.py > /tmp/t12/kafka_7e97a97.py
  .venv/bin/python benchmarks/results/2026-12-03-2vcpu-epyc/kvcache-store-ab.py OUT.json
"""

import importlib.util
import json
import os
import platform
import sys
import tempfile
import uuid
from dataclasses import asdict
from pathlib import Path

import flinkai.state.kafka as new_mod
import flinkai_bench.research.state_workload as sb
from flinkai.kafka.broker import LocalKafka
from flinkai.local.process import free_port
from flinkai.state import CodecConfig


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m
    spec.loader.exec_module(m)
    return m


variants = {
    "orig": load("k_orig", "/tmp/t12/kafka_orig.py"),
    "7e97a97": load("k_mid", "/tmp/t12/kafka_7e97a97.py"),
    "pipelined": new_mod,
}
out = {
    "what": __doc__,
    "loadavg_start": os.getloadavg(),
    "platform": platform.platform(),
    "cpus": os.cpu_count(),
    "gpu": "n/a (no GPU)",
    "rows": [],
}
with tempfile.TemporaryDirectory() as work:
    b = LocalKafka(Path(work) / "k", port=free_port())
    b.start()
    try:
        for rnd in range(2):
            for name, mod in variants.items():
                sb.KafkaSnapshotStore = mod.KafkaSnapshotStore

                def cfg(mod=mod):  # bind this round's module
                    return mod.KafkaStoreConfig(
                        bootstrap=b.bootstrap,
                        topic=f"ab-{uuid.uuid4().hex[:8]}",
                        codec=CodecConfig(codec="zstd"),
                    )

                f1 = sb.measure_kafka_throughput(cfg(), 2**20, dtype="float32")
                out["rows"].append({"round": rnd, "code": name, "call": "put 1 MiB", **asdict(f1)})
                line = [f"single put {f1.put_mb_s:.0f}/cold {f1.get_cold_mb_s:.0f}"]
                for count, shape in ((16, (2, 3, 682, 64)), (30, (2, 3, 64, 64))):
                    f = sb.measure_kafka_batch(cfg(), count, shape, runs=3)
                    out["rows"].append(
                        {"round": rnd, "code": name, "call": f"put_many {count}", **asdict(f)}
                    )
                    line.append(f"put_many {count}: {f.put_mb_s:.0f}/cold {f.get_cold_mb_s:.0f}")
                print(rnd, name, " | ".join(line), flush=True)
    finally:
        b.stop()
out["loadavg_end"] = os.getloadavg()
Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
