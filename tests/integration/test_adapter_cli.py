"""``flinkai adapter publish|list|rollback`` against a real broker and the tiny LoRA export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flinkai.cli.main import main
from flinkai.kafka.adapter_feed import adapter_topic_configs
from flinkai.kafka.admin import create_topics
from flinkai.kafka.broker import LocalKafka
from flinkai.llm.lora import Adapter

pytestmark = [pytest.mark.integration]


def test_publish_list_and_roll_back_by_hand(
    kafka_broker: LocalKafka, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from flinkai.models.llm_export import export_tiny_llm

    export = export_tiny_llm(lora_rank=4)
    spec, base = export.manifest.lora, export.manifest.model_version
    assert spec is not None
    create_topics(kafka_broker.bootstrap, [topic], configs=adapter_topic_configs())
    where = ["--topic", topic, "--bootstrap", kafka_broker.bootstrap]
    for version in (1, 2):
        rng = np.random.default_rng(version)
        params = {n: rng.standard_normal(spec.shape_of(n)).astype(np.float32) for n in spec.names()}
        path = tmp_path / f"t{version}.onnx_adapter"
        path.write_bytes(Adapter("t", version, base, spec.rank, params).encode())
        assert main(["adapter", "publish", str(path), "--model-dir", str(export.root), *where]) == 0
    # A file for another base model is refused before it reaches the topic.
    wrong = tmp_path / "wrong.onnx_adapter"
    wrong.write_bytes(Adapter("t", 3, "0" * 16, spec.rank, params).encode())
    capsys.readouterr()
    assert main(["adapter", "publish", str(wrong), "--model-dir", str(export.root), *where]) != 0
    assert "base_model_mismatch" in capsys.readouterr().err

    def current() -> dict[str, int]:
        assert main(["adapter", "list", "--model-dir", str(export.root), *where]) == 0
        return json.loads(capsys.readouterr().out)["current"]

    assert current() == {"t": 2}
    assert main(["adapter", "rollback", "t", *where]) == 0
    capsys.readouterr()
    assert current() == {"t": 1}
