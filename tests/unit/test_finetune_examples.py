"""Training examples: every bad record gets its reason; good ones render as serving renders them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from flinkai.errors import ConfigError
from flinkai.finetune.examples import (
    REASONS,
    BadExample,
    EncodedExample,
    Example,
    encode_example,
    parse_example,
)
from flinkai.kafka.adapter_feed import adapter_topic_configs
from flinkai.llm.tokenizer import LlmTokenizer
from flinkai.operators.finetune import OUTPUT_FIELDS, parse_options

TEMPLATE = (
    "{% for message in messages %}{{ bos_token + message['role'] + ': ' + message['content'] "
    "+ eos_token + ' ' }}{% endfor %}{% if add_generation_prompt %}{{ bos_token + 'bot:' }}"
    "{% endif %}"
)
VOCAB = {"<s>": 0, "</s>": 1, "user:": 2, "bot:": 3, "hi": 4, "there": 5, "[UNK]": 6, "x": 7}


@pytest.fixture
def tokenizer(tmp_path: Path) -> LlmTokenizer:
    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<s>", "</s>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    return LlmTokenizer(
        tmp_path / "tokenizer.json", TEMPLATE, {"bos_token": "<s>", "eos_token": "</s>"}
    )


def good(**changes: object) -> bytes:
    data: dict[str, object] = {"id": "e1", "instruction": "hi there", "target": "x"}
    data.update(changes)
    return json.dumps({k: v for k, v in data.items() if v is not ...}).encode()


@pytest.mark.parametrize(
    ("payload", "reason", "detail"),
    [
        (None, "not_json", "no value"),
        (b"\xff\xfe", "not_json", "UTF-8"),
        (b"{not json", "not_json", "not JSON"),
        (b"[1, 2]", "not_object", "list"),
        (good(id=...), "missing_field", "'id'"),
        (good(instruction=None), "missing_field", "'instruction'"),
        (good(target=...), "missing_field", "'target'"),
        (good(target=3), "invalid_field", "'target' must be a string, got int"),
        (good(instruction="  \n"), "empty_field", "'instruction'"),
        (good(adapter=7), "invalid_field", "'adapter'"),
        (good(adapter="no spaces allowed"), "invalid_adapter", "invalid_name"),
    ],
)
def test_bad_records_get_their_reason(payload: bytes | None, reason: str, detail: str) -> None:
    got = parse_example(payload, "default")
    assert isinstance(got, BadExample), got
    assert got.reason == reason and reason in REASONS
    assert detail in got.detail, got.detail


def test_a_good_record_and_its_adapter() -> None:
    assert parse_example(good(), "news") == Example("e1", "hi there", "x", "news")
    assert parse_example(good(adapter="topics-v2"), "news") == Example(
        "e1", "hi there", "x", "topics-v2"
    )
    example = Example("e1", "hi there", "x", "news")
    assert Example.from_state(example.to_state()) == example


def test_encoding_is_the_serving_prompt_then_the_answer_and_stop(tokenizer: LlmTokenizer) -> None:
    example = Example("e1", "hi there", "x there", "news")
    got = encode_example(tokenizer, example, stop_id=1, max_tokens=64)
    assert isinstance(got, EncodedExample)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi there"}])
    assert got.input_ids[: got.prompt_tokens] == tuple(prompt)
    assert got.input_ids[got.prompt_tokens :] == (7, 5, 1)
    assert got.answer_tokens == 3


def test_too_long_names_the_counts(tokenizer: LlmTokenizer) -> None:
    example = Example("e1", "hi there", "x", "news")
    fits = encode_example(tokenizer, example, stop_id=1, max_tokens=9)
    assert isinstance(fits, EncodedExample) and len(fits.input_ids) == 9
    got = encode_example(tokenizer, example, stop_id=1, max_tokens=8)
    assert isinstance(got, BadExample) and got.reason == "too_long"
    assert "7 prompt + 2 answer tokens > max_tokens 8" in got.detail


def test_operator_options() -> None:
    opts = parse_options({"key": "adapter", "payload": "payload", "publish_every": "8",
                          "learning_rate": "2e-4", "threads": "2"})  # fmt: skip
    assert opts.publish_every == 8 and opts.trainer.learning_rate == 2e-4
    assert opts.trainer.threads == 2 and opts.trainer.rank == 8 and opts.adapter == "default"
    with pytest.raises(ConfigError, match="multiple of batch_size 4"):
        parse_options({"key": "a", "payload": "p", "publish_every": "6"})
    with pytest.raises(ConfigError, match="'rank' is '0'"):
        parse_options({"key": "a", "payload": "p", "rank": "0"})
    with pytest.raises(ConfigError, match="unknown option"):
        parse_options({"key": "a", "payload": "p", "epochs": "3"})
    assert len(OUTPUT_FIELDS) == 13 and OUTPUT_FIELDS[8] == "error_reason"


def test_adapter_topic_allows_megabyte_records() -> None:
    assert adapter_topic_configs() == {"max.message.bytes": str(16 * 1024 * 1024)}
    with pytest.raises(ValueError):
        adapter_topic_configs(0)


def test_the_base_must_be_an_export_with_matching_lora_inputs(tmp_path: Path) -> None:
    from flinkai.finetune.base import load_base, tiny_from_model_id
    from flinkai.finetune.errors import FinetuneError
    from flinkai.llm.artifacts import CHAT_TEMPLATE_FILE, DECODER_FILE, TOKENIZER_FILE
    from flinkai.models.llm_export import TinyLlm
    from tests.unit.test_llm_runtime import make_manifest, write_tokenizer

    (tmp_path / DECODER_FILE).write_bytes(b"not an onnx graph")
    write_tokenizer(tmp_path / TOKENIZER_FILE)
    (tmp_path / CHAT_TEMPLATE_FILE).write_text(TEMPLATE)
    make_manifest(tmp_path)  # no LoRA inputs
    with pytest.raises(FinetuneError, match=r"no LoRA inputs.*export-llm --lora-rank 8"):
        load_base(tmp_path, rank=8)

    tiny = TinyLlm()
    assert tiny_from_model_id(f"test/{tiny.name}") == tiny
    assert tiny_from_model_id("test/tiny-llama-l2-h128") is None
    assert tiny_from_model_id("SmolLM2-135M-Instruct") is None
