"""One LLM worker process for the prefix-sharing tests: ``python llm_worker.py '<json>'``.

Loads the real decoder, opens its own Kafka snapshot store (a new consumer, an empty
cache: a cold worker) and completes the prompts it is given, reusing and publishing
prefix blocks. With ``"no_cache": true`` it also completes each prompt without any
store, for comparison. Prints one JSON object on stdout.
"""

from __future__ import annotations

import json
import os
import sys

from flinkai.config import load_config
from flinkai.functions.llm import load_prompt_model
from flinkai.llm.prefix import PrefixCache, block_hashes
from flinkai.state import KafkaSnapshotStore, KafkaStoreConfig


def main(spec: dict) -> dict:
    model = load_prompt_model(load_config(env={}))
    decoder = model.decoder
    store = KafkaSnapshotStore(KafkaStoreConfig(bootstrap=spec["bootstrap"], topic=spec["topic"]))
    cache = PrefixCache.for_decoder(decoder, store, block_tokens=spec["block_tokens"])
    out: dict = {"pid": os.getpid(), "model_id": decoder.model_id, "results": []}
    for prompt in spec["prompts"]:
        ids = model.prompt_ids(prompt)
        done = cache.complete(
            decoder, ids, max_new_tokens=spec["max_new_tokens"], stop_ids=model.stop_ids
        )
        result = {
            "ids": ids,
            "hashes": block_hashes(ids, spec["block_tokens"]),
            "tokens": done.token_ids,
            "cached_tokens": done.cached_tokens,
        }
        if spec.get("no_cache"):
            plain = PrefixCache.for_decoder(decoder, None).complete(
                decoder, ids, max_new_tokens=spec["max_new_tokens"], stop_ids=model.stop_ids
            )
            result["no_cache_tokens"] = plain.token_ids
        out["results"].append(result)
    out["stats"] = {
        "published_blocks": cache.stats.published_blocks,
        "rejected": dict(cache.stats.rejected),
        "store_errors": dict(cache.stats.store_errors),
        "fetched_bytes": store.stats.fetched_bytes,
    }
    store.close()
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
