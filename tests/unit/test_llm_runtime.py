"""The LLM runtime without the exported model: manifest checks, chat template, greedy loop.

The real decoder is tested against transformers in tests/integration/test_llm_decoder.py;
here a tiny tokenizer, a hand-written manifest and a scripted decoder cover the error
paths and the loop's bookkeeping quickly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from flinkai.llm.artifacts import (
    CHAT_TEMPLATE_FILE,
    DECODER_FILE,
    MANIFEST_FILE,
    TOKENIZER_FILE,
    FileEntry,
    LlmManifest,
    input_names,
    load_llm_artifacts,
    output_names,
    sha256_file,
)
from flinkai.llm.cache import KvCache, ModelShape
from flinkai.llm.decoder import DecoderOptions, OnnxDecoder
from flinkai.llm.errors import LlmArtifactError, LlmError
from flinkai.llm.generate import greedy
from flinkai.llm.tokenizer import ChatTemplateError, LlmTokenizer

SHAPE = ModelShape(n_layers=2, n_kv_heads=1, head_dim=2, dtype="float32", vocab_size=8)
TEMPLATE = (
    "{% for message in messages %}{{ bos_token + message['role'] + ': ' + message['content'] "
    "+ eos_token + ' ' }}{% endfor %}{% if add_generation_prompt %}{{ bos_token + 'bot:' }}"
    "{% endif %}"
)
VOCAB = {"<s>": 0, "</s>": 1, "user:": 2, "bot:": 3, "hi": 4, "there": 5, "[UNK]": 6, "x": 7}


def write_tokenizer(path: Path) -> None:
    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<s>", "</s>"])
    tok.save(str(path))


def make_manifest(root: Path, **changes: object) -> None:
    files = tuple(
        FileEntry(n, sha256_file(root / n), (root / n).stat().st_size)
        for n in (DECODER_FILE, TOKENIZER_FILE, CHAT_TEMPLATE_FILE)
    )
    data = LlmManifest(
        model_id="tiny",
        model_version=files[0].sha256[:16],
        shape=SHAPE,
        special_tokens={"bos_token": "<s>", "eos_token": "</s>"},
        eos_token_ids=(1,),
        bos_token_id=0,
        pad_token_id=None,
        max_new_tokens=5,
        max_context=64,
        inputs=tuple(input_names(2)),
        outputs=tuple(output_names(2)),
        opset=17,
        source={"package": "test"},
        files=files,
        created_at="2026-01-01T00:00:00+00:00",
    ).to_dict()
    data.update(changes)
    (root / MANIFEST_FILE).write_text(json.dumps(data))


@pytest.fixture
def export_dir(tmp_path: Path) -> Path:
    (tmp_path / DECODER_FILE).write_bytes(b"not an onnx graph")
    write_tokenizer(tmp_path / TOKENIZER_FILE)
    (tmp_path / CHAT_TEMPLATE_FILE).write_text(TEMPLATE)
    make_manifest(tmp_path)
    return tmp_path


def test_manifest_round_trip(export_dir: Path) -> None:
    artifacts = load_llm_artifacts(export_dir)
    again = LlmManifest.from_dict(json.loads(json.dumps(artifacts.manifest.to_dict())))
    assert again == artifacts.manifest
    assert again.shape == SHAPE


def test_missing_folder_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(LlmArtifactError, match=r"no exported decoder.*flinkai model export-llm"):
        load_llm_artifacts(tmp_path / "absent")


@pytest.mark.parametrize("victim", [MANIFEST_FILE, DECODER_FILE, TOKENIZER_FILE])
def test_missing_file(export_dir: Path, victim: str) -> None:
    (export_dir / victim).unlink()
    with pytest.raises(LlmArtifactError, match=rf"{victim}.*missing.*flinkai model export-llm"):
        load_llm_artifacts(export_dir)


def test_corrupt_files_are_refused(export_dir: Path) -> None:
    # Same size, one byte flipped: only the checksum can tell.
    path = export_dir / DECODER_FILE
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    load_llm_artifacts(export_dir, verify_checksums=False)  # sizes still agree
    with pytest.raises(LlmArtifactError, match=r"sha256.*flinkai model export-llm"):
        load_llm_artifacts(export_dir)
    path.write_bytes(b"short")
    with pytest.raises(LlmArtifactError, match="size 5"):
        load_llm_artifacts(export_dir, verify_checksums=False)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"format_version": 99}, "format_version 99"),
        ({"shape": {"n_layers": 2}}, "malformed"),
        ({"inputs": ["input_ids"]}, "graph names"),
        ({"model_version": "0" * 16}, "model_version"),
    ],
)
def test_manifest_mismatch(export_dir: Path, change: dict[str, object], match: str) -> None:
    make_manifest(export_dir, **change)
    with pytest.raises(LlmArtifactError, match=match):
        load_llm_artifacts(export_dir)
    (export_dir / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(LlmArtifactError, match="malformed"):
        load_llm_artifacts(export_dir)


def test_decoder_refuses_a_graph_that_does_not_load(export_dir: Path) -> None:
    with pytest.raises(LlmArtifactError, match=r"does not load.*flinkai model export-llm"):
        OnnxDecoder.load(export_dir, DecoderOptions(intra_op_threads=1))


def test_chat_template_renders_and_encodes(export_dir: Path) -> None:
    tok = LlmTokenizer(
        export_dir / TOKENIZER_FILE, TEMPLATE, {"bos_token": "<s>", "eos_token": "</s>"}
    )
    messages = [{"role": "user", "content": "hi there"}]
    assert tok.render_chat(messages) == "<s>user: hi there</s> <s>bot:"
    assert tok.render_chat(messages, add_generation_prompt=False) == "<s>user: hi there</s> "
    # The special tokens in the text become their ids; nothing is added around them.
    assert tok.apply_chat_template(messages) == [0, 2, 4, 5, 1, 0, 3]
    assert tok.decode([0, 4, 5, 1]) == "hi there"
    assert tok.decode([0, 4], skip_special_tokens=False) == "<s> hi"
    assert tok.token_id("</s>") == 1
    assert tok.token_id("absent") is None


def test_chat_template_errors(export_dir: Path) -> None:
    path = export_dir / TOKENIZER_FILE
    with pytest.raises(ChatTemplateError, match="compile"):
        LlmTokenizer(path, "{% for %}")
    strict = LlmTokenizer(path, "{{ raise_exception('only users') }}")
    with pytest.raises(ChatTemplateError, match="only users"):
        strict.render_chat([{"role": "user", "content": "x"}])
    tok = LlmTokenizer(path, TEMPLATE)
    with pytest.raises(ChatTemplateError, match="at least one"):
        tok.render_chat([])
    with pytest.raises(ChatTemplateError, match="string role and content"):
        tok.render_chat([{"role": "user"}])


def test_chat_template_is_sandboxed(export_dir: Path) -> None:
    # A template from a model file must not reach Python internals.
    evil = LlmTokenizer(export_dir / TOKENIZER_FILE, "{{ messages.__class__.__mro__ }}")
    with pytest.raises(ChatTemplateError):
        evil.render_chat([{"role": "user", "content": "x"}])


def ones_cache(n_tokens: int) -> KvCache:
    tensor = np.ones((1, SHAPE.n_kv_heads, n_tokens, SHAPE.head_dim), np.float32)
    return KvCache(keys=(tensor,) * SHAPE.n_layers, values=(tensor,) * SHAPE.n_layers)


class ScriptedDecoder:
    """Emits a fixed token sequence; records what it was asked to prefill."""

    def __init__(self, manifest: LlmManifest, script: Sequence[int]) -> None:
        self.manifest = manifest
        self.script = list(script)
        self.calls: list[tuple[list[int], int]] = []

    def forward(
        self, token_ids: Sequence[int], past: KvCache | None = None
    ) -> tuple[np.ndarray, KvCache]:
        past = past or SHAPE.empty_cache()
        self.calls.append((list(token_ids), past.seq_len))
        grown = KvCache.concat([past, ones_cache(len(token_ids))])
        logits = np.zeros(SHAPE.vocab_size, dtype=np.float32)
        logits[self.script[len(self.calls) - 1]] = 1.0
        return logits, grown


def test_greedy_stops_on_eos_and_uses_the_manifest(export_dir: Path) -> None:
    manifest = load_llm_artifacts(export_dir).manifest
    dec = ScriptedDecoder(manifest, [4, 5, 1, 7])
    out = greedy(dec, [0, 2, 4], tokenizer=None)
    assert out.token_ids == (4, 5, 1)
    assert out.finish_reason == "stop"
    assert out.prompt_tokens == 3 and out.cached_tokens == 0
    assert out.prompt_cache.seq_len == 3
    assert dec.calls == [([0, 2, 4], 0), ([4], 3), ([5], 4)]


def test_greedy_budget_and_prefix(export_dir: Path) -> None:
    manifest = load_llm_artifacts(export_dir).manifest
    dec = ScriptedDecoder(manifest, [7] * 10)
    past = ones_cache(2)
    out = greedy(dec, [0, 2, 4, 5], max_new_tokens=3, past=past)
    assert out.token_ids == (7, 7, 7) and out.finish_reason == "length"
    assert out.cached_tokens == 2
    assert dec.calls[0] == ([4, 5], 2)  # only the suffix is prefilled
    # The manifest's budget applies by default.
    assert len(greedy(ScriptedDecoder(manifest, [7] * 10), [0]).token_ids) == 5
    # A cache covering the whole prompt: the last token is recomputed for its logits.
    full = ScriptedDecoder(manifest, [1])
    out = greedy(full, [0, 2], past=past)
    assert full.calls == [([2], 1)] and out.cached_tokens == 1


def test_greedy_rejects_bad_calls(export_dir: Path) -> None:
    manifest = load_llm_artifacts(export_dir).manifest
    dec = ScriptedDecoder(manifest, [1])
    with pytest.raises(LlmError, match="no tokens"):
        greedy(dec, [])
    with pytest.raises(LlmError, match="max_new_tokens"):
        greedy(dec, [0], max_new_tokens=0)
    with pytest.raises(LlmError, match="more than"):
        greedy(dec, [0], past=ones_cache(2))
