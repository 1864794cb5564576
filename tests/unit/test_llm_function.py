"""parse_prompt reasons, options, and LlmCompleteFunction with the fake decoder."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from flinkai.config import Config
from flinkai.functions.llm import (
    LlmCompleteFunction,
    Prompt,
    Rejected,
    build_store,
    kafka_store_config,
    parse_options,
    parse_prompt,
)
from flinkai.state import InMemorySnapshotStore
from tests.unit.llm_fake import FakeDecoder


class FakeModel:
    """Bytes of the text as ids behind a fixed 'chat template' header of 20 tokens."""

    def __init__(self) -> None:
        self.decoder = FakeDecoder()
        self.stop_ids: Sequence[int] = ()

    def prompt_ids(self, prompt: str) -> list[int]:
        return [1] * 20 + [b % 90 + 2 for b in prompt.encode()]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(str(i) for i in ids)


def config(**llm: object) -> Config:
    return Config().with_overrides(llm={"block_tokens": 8, "max_new_tokens": 4, **llm})


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "empty_payload"),
        (b"\xff\xfe", "invalid_utf8"),
        (b"{not json", "not_json"),
        (b"[1]", "not_object"),
        (b'{"id": "a"}', "missing_field"),
        (b'{"id": true, "prompt": "x"}', "invalid_field"),
        (b'{"id": "a", "prompt": 3}', "invalid_field"),
        (b'{"id": "a", "prompt": "\\ud800"}', "invalid_field"),
        (b'{"id": "a", "prompt": "  "}', "empty_prompt"),
        (json.dumps({"id": "a", "prompt": "x" * 101}).encode(), "prompt_too_long"),
    ],
)
def test_parse_prompt_gives_each_bad_record_its_reason(payload: bytes, reason: str) -> None:
    got = parse_prompt(payload, max_prompt_bytes=100)
    assert isinstance(got, Rejected) and got.reason == reason and got.detail


def test_parse_prompt_accepts_string_and_integer_ids() -> None:
    assert parse_prompt(b'{"id": 7, "prompt": "hi"}', 100) == Prompt("7", "hi")
    assert parse_prompt(b'{"id": "q", "prompt": "hi"}', 100) == Prompt("q", "hi")


def test_options() -> None:
    llm = config().llm
    assert parse_options(None, llm) == 4 and parse_options(" ", llm) == 4
    assert parse_options('{"max_new_tokens": 9}', llm) == 9
    for bad in (
        "[1]",
        "{",
        '{"temperature": 1}',
        '{"max_new_tokens": 0}',
        '{"max_new_tokens": true}',
    ):
        with pytest.raises(ValueError):
            parse_options(bad, llm)


def test_completion_rows_with_reuse_and_errors_as_data() -> None:
    cfg = config(max_prompt_tokens=60, max_prompt_bytes=200)
    fn = LlmCompleteFunction(cfg, FakeModel(), InMemorySnapshotStore())
    first = fn("the same long question " + "a", None)
    assert first.error is None and first.cached_tokens == 0 and first.model_version == "f1"
    assert first.prompt_tokens == 44 and first.ttft_ms is not None and first.completion
    second = fn("the same long question " + "b", '{"max_new_tokens": 2}')
    assert second.error is None and second.cached_tokens == 40
    assert second.completion is not None and len(second.completion.split()) <= 2
    cold = LlmCompleteFunction(cfg, FakeModel(), None)(
        "the same long question b", '{"max_new_tokens": 2}'
    )
    assert cold.completion == second.completion and cold.cached_tokens == 0

    assert (fn(None).error or "").startswith("missing_field:")
    assert (fn(" \n").error or "").startswith("empty_prompt:")
    assert (fn("x" * 201).error or "").startswith("prompt_too_long:")
    too_many = fn("x" * 41)  # 20 header + 41 = 61 tokens
    assert too_many.error is not None and too_many.error.startswith("prompt_too_long:")
    assert "61 tokens" in too_many.error
    assert (fn("ok", "{bad").error or "").startswith("invalid_options:")
    fn.close()


def test_build_store_follows_the_config() -> None:
    assert build_store(config(store="none")) is None
    assert isinstance(build_store(config(store="memory")), InMemorySnapshotStore)


def test_the_kafka_store_codec_comes_from_the_llm_section() -> None:
    default = kafka_store_config(config(store="kafka")).codec
    assert (default.codec, default.checksum, default.store_dtype) == ("zstd", "sha256", "same")
    fast = kafka_store_config(
        config(store="kafka", store_codec="none", store_checksum="xxh3_128", store_dtype="float16")
    ).codec
    assert fast.compression == "none"
    assert (fast.checksum, fast.store_dtype) == ("xxh3_128", "float16")
