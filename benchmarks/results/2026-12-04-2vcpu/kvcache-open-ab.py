"""Store open on a filled topic: index written by old store code against new.

Run with ``PYTHONPATH=<checkout>`` so the same file drives an older checkout.
``--fill``: publish ``--mb`` MB of 1,024-token SmolLM2 prompts (16 blocks x 30 layers
each, one ``put_many`` per prompt, as the cold-worker bench fills) into ``--topic``.
``--open``: open a new store on ``--topic`` in this (fresh) process and print the
open time and the data records read to open. Measures and prints; asserts nothing.

    python kvcache-open-ab.py --bootstrap HOST:PORT --topic T --fill --mb 500
    python kvcache-open-ab.py --bootstrap HOST:PORT --topic T --open
"""

from __future__ import annotations

import argparse
import json
import os
import time

from flinkai.llm.cache import ModelShape
from flinkai.state import KafkaSnapshotStore
from flinkai_bench.kvcache_cold import cold_config, fill_topic

SHAPE = ModelShape(30, 3, 64, "float32", 49152)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--fill", action="store_true")
    parser.add_argument("--open", action="store_true")
    parser.add_argument("--mb", type=float, default=500.0)
    args = parser.parse_args()
    config = cold_config(args.bootstrap, args.topic)
    if args.fill:
        out = fill_topic(
            config, SHAPE, model_id="m", model_version="v", mb=args.mb, block_tokens=64
        )
        print(json.dumps({"fill": out}))
    if args.open:
        from dataclasses import replace

        began = time.perf_counter()
        store = KafkaSnapshotStore(replace(config, create_topic=False))
        open_ms = (time.perf_counter() - began) * 1000
        tail = store.tail_records
        store.close()
        print(json.dumps({"open_ms": open_ms, "tail_records": tail, "load": os.getloadavg()}))


if __name__ == "__main__":
    main()
