"""What the fine-tuning job tests share: the tiny LoRA export, examples, the job, the reference."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from flinkai.config import Config, load_config
from flinkai.finetune.base import load_base
from flinkai.finetune.replay import Replay, replay
from flinkai.finetune.trainer import TrainerConfig
from flinkai.kafka.adapter_feed import adapter_topic_configs
from flinkai.kafka.admin import IsolationLevel, Record, TopicSnapshot, create_topics
from flinkai.kafka.admin import read_to_end_offsets as read_topic
from flinkai.runtime.runner import RunOptions, run_script

from .streaming import REPO, StreamingJob

SCRIPT = REPO / "jobs" / "finetune_lora.sql"
RANK = 8
BATCH = 4
PUBLISH_EVERY = 8
#: Large enough that a step moves the tiny model's adapter visibly.
LEARNING_RATE = 1e-2
TRAINER = TrainerConfig(rank=RANK, learning_rate=LEARNING_RATE, batch_size=BATCH, threads=1)
LABELS = ("World", "Sports", "Business", "Sci/Tech")
WORDS = ("match", "market", "court", "goal", "chip", "vote", "bank", "orbit", "trade", "team")
#: Poison records and the reason each must get.
POISON = [
    (b"{not json", "not_json"),
    (json.dumps({"id": "p1", "instruction": "label this"}).encode(), "missing_field"),
    (json.dumps({"id": "p2", "instruction": " ", "target": "World"}).encode(), "empty_field"),
    (json.dumps({"id": "p3", "instruction": "x", "target": "World", "adapter": "a b"}).encode(),
     "invalid_adapter"),
    (json.dumps({"id": "p4", "instruction": "word " * 600, "target": "World"}).encode(),
     "too_long"),
]  # fmt: skip


def tiny_lora_dir() -> Path:
    """The tiny random decoder exported with rank-8 LoRA inputs (built on first use)."""
    from flinkai.models.llm_export import export_tiny_llm

    return export_tiny_llm(lora_rank=RANK).decoder_path.parent


def examples(n: int, seed: int = 0) -> list[bytes]:
    """``n`` labelling examples with short texts, all for the adapter ``news``."""
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        record = {"id": f"e{i}", "instruction": f"Topic of: {text}",
                  "target": LABELS[i % 4], "adapter": "news"}  # fmt: skip
        out.append(json.dumps(record).encode())
    return out


def reference(records: list[bytes]) -> Replay:
    """The versions the job must publish for ``records``: the trainer run in this process."""
    return replay(load_base(tiny_lora_dir(), RANK), records, TRAINER, PUBLISH_EVERY, "news")


def variables(job_topics: tuple[str, str, str], bootstrap: str, group: str) -> dict[str, str]:
    return {
        "KAFKA_BOOTSTRAP": bootstrap,
        "EXAMPLES_TOPIC": job_topics[0],
        "ADAPTERS_TOPIC": job_topics[1],
        "DLQ_TOPIC": job_topics[2],
        "GROUP_ID": group,
        "FINETUNE_MODEL": str(tiny_lora_dir()),
        "ADAPTER": "news",
        "PUBLISH_EVERY": str(PUBLISH_EVERY),
        "BATCH_SIZE": str(BATCH),
        "LEARNING_RATE": str(LEARNING_RATE),
        "LORA_RANK": str(RANK),
        "TORCH_THREADS": "1",
    }


def create_job_topics(bootstrap: str, topics: tuple[str, str, str]) -> None:
    """One partition each (examples in offset order); the adapters topic takes large records."""
    create_topics(bootstrap, [topics[0], topics[2]])
    create_topics(bootstrap, [topics[1]], configs=adapter_topic_configs())


def headers(record: Record) -> dict[str, str]:
    return {k: v.decode() for k, v in record.headers}


def check_version_record(record: Record) -> tuple[str, int, bytes]:
    """(adapter, version, bytes) of an adapter record whose headers describe it truly."""
    data = record.value or b""
    h = headers(record)
    assert h["action"] == "publish", h
    assert h["sha256"] == hashlib.sha256(data).hexdigest(), h
    key = (record.key or b"").decode()
    return key, int(h["version"]), data


@dataclass
class FinetuneJob(StreamingJob):
    """``jobs/finetune_lora.sql``, unbounded, on fresh topics (examples, adapters, DLQ).

    ``committed()`` counts examples accounted for (``PUBLISH_EVERY`` per committed
    version, plus dead letters), so the kill harness's counts are in examples.
    """

    script: Path = SCRIPT
    config: Config = field(default_factory=lambda: load_config(env={}))

    def start(self) -> None:
        create_job_topics(self.bootstrap, self.topics)
        options = RunOptions(
            target=self.target,
            variables={**variables(self.topics, self.bootstrap, f"g-{self.run_id}"),
                       "SCAN_BOUNDED_MODE": "unbounded"},
            wait=False,
        )  # fmt: skip
        self.result = run_script(self.script, self.config, options)

    def committed(self) -> tuple[int, int]:
        out = read_topic(self.bootstrap, self.topics[1], timeout_s=30.0)
        dlq = read_topic(self.bootstrap, self.topics[2], timeout_s=30.0)
        return len(out.records) * PUBLISH_EVERY + len(dlq.records), len(dlq.records)

    def read(self, isolation: IsolationLevel) -> TopicSnapshot:
        return read_topic(self.bootstrap, self.topics[1], isolation, timeout_s=60.0)
