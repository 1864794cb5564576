"""The LoRA trainer: deterministic, and a restore from its blob continues byte for byte.

A small random Llama (built here, no export) stands in for the base model: what is
checked is the trainer's bookkeeping, which the real model shares.
"""

from __future__ import annotations

import numpy as np
import pytest

from flinkai.finetune.errors import TrainerStateError
from flinkai.finetune.examples import EncodedExample
from flinkai.finetune.trainer import LoraTrainer, TrainerConfig
from flinkai.llm.lora import Adapter

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

BASE = "0123456789abcdef"
VOCAB = 64


def base_model(seed: int = 0) -> object:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        initializer_range=0.2, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).eval()


def examples(n: int, seed: int = 1) -> list[EncodedExample]:
    """Prompts of 5-12 tokens, answers of 1-3 tokens; different lengths pad within a batch."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        prompt = rng.integers(3, VOCAB, int(rng.integers(5, 13))).tolist()
        answer = [int(prompt[0]) % 7 + 3, *rng.integers(3, VOCAB, int(rng.integers(0, 3))), 2]
        out.append(EncodedExample(tuple(int(i) for i in prompt + answer), len(prompt)))
    return out


def run(trainer: LoraTrainer, data: list[EncodedExample], steps: range) -> list[bytes]:
    """Train ``steps`` (batch indices) and return the adapter bytes after each."""
    b = trainer.config.batch_size
    versions = []
    for s in steps:
        trainer.train_step(data[s * b : (s + 1) * b])
        versions.append(trainer.adapter("news", s + 1).encode())
    return versions


CONFIG = TrainerConfig(learning_rate=1e-2, threads=1)


def test_same_examples_give_the_same_bytes() -> None:
    data = examples(24)
    first = run(LoraTrainer(base_model(), BASE, CONFIG), data, range(6))
    second = run(LoraTrainer(base_model(), BASE, CONFIG), data, range(6))
    assert first == second
    assert len(set(first)) == 6, "the adapter did not change between steps"
    # Another order of the same examples trains another adapter: order is part of it.
    swapped = data[4:8] + data[:4] + data[8:]
    assert run(LoraTrainer(base_model(), BASE, CONFIG), swapped, range(6))[-1] != first[-1]


def test_restoring_mid_way_continues_byte_for_byte() -> None:
    data = examples(24)
    straight = run(LoraTrainer(base_model(), BASE, CONFIG), data, range(6))

    before = LoraTrainer(base_model(), BASE, CONFIG)
    head = run(before, data, range(3))
    blob = before.state_bytes()
    del before  # the restore happens in a fresh trainer on a fresh copy of the base
    after = LoraTrainer.from_state_bytes(blob, base_model(), BASE, CONFIG)
    assert (after.step, after.consumed) == (3, 12)
    assert head + run(after, data, range(3, 6)) == straight

    # Negative control: the weights alone (AdamW's moments lost) continue differently.
    weights_only = LoraTrainer(base_model(), BASE, CONFIG)
    source = LoraTrainer.from_state_bytes(blob, base_model(), BASE, CONFIG)
    with torch.no_grad():
        for (_, p), (_, q) in zip(weights_only._params, source._params, strict=True):
            p.copy_(q)
    same = Adapter.decode(straight[2]).params
    assert all(np.array_equal(v, same[k]) for k, v in weights_only.params().items())
    assert run(weights_only, data, range(3, 6))[-1] != straight[-1]


def test_the_blob_holds_every_part() -> None:
    trainer = LoraTrainer(base_model(), BASE, CONFIG)
    run(trainer, examples(8), range(2))
    state = torch.load(__import__("io").BytesIO(trainer.state_bytes()), weights_only=True)
    assert {"params", "optimizer", "step", "consumed", "rng", "fingerprint"} <= set(state)
    assert state["step"] == 2 and state["consumed"] == 8
    moments = state["optimizer"]["state"]
    assert len(moments) == len(state["params"]) == 2 * 2 * 2  # layers x (q, v) x (A, B)
    assert all("exp_avg" in m and "exp_avg_sq" in m for m in moments.values())


def test_a_foreign_blob_is_refused_with_a_reason() -> None:
    trainer = LoraTrainer(base_model(), BASE, CONFIG)
    blob = trainer.state_bytes()
    with pytest.raises(TrainerStateError) as bad:
        trainer.load_state_bytes(b"not a state")
    assert bad.value.reason == "malformed"
    other_lr = LoraTrainer(base_model(), BASE, TrainerConfig(learning_rate=1e-3))
    with pytest.raises(TrainerStateError) as bad:
        other_lr.load_state_bytes(blob)
    assert bad.value.reason == "mismatch"
    other_base = LoraTrainer(base_model(), "fedcba9876543210", CONFIG)
    with pytest.raises(TrainerStateError, match="mismatch"):
        other_base.load_state_bytes(blob)


def test_the_adapter_is_what_peft_adds() -> None:
    trainer = LoraTrainer(base_model(), BASE, CONFIG)
    run(trainer, examples(8), range(2))
    adapter = Adapter.decode(trainer.adapter("news", 2).encode())
    spec = trainer.spec()
    adapter.check(spec, BASE)
    assert spec.dims == {"q_proj": (32, 32), "v_proj": (32, 16)} and spec.n_layers == 2
    assert adapter.extra == {"step": 2, "examples": 8, "loss": trainer.last_loss}
    x = torch.randn(3, 32)
    for layer, name, module in trainer._modules:
        with torch.no_grad():
            want = module(x) - module.base_layer(x)  # peft's LoRA term
        a, b = adapter.params[f"lora.{layer}.{name}.a"], adapter.params[f"lora.{layer}.{name}.b"]
        got = x.numpy() @ a @ b
        assert np.abs(got - want.numpy()).max() < 1e-5, (layer, name)
        assert np.abs(b).max() > 0, "B is still its zero initialisation"


def test_loss_is_on_the_answer_only_and_falls() -> None:
    trainer = LoraTrainer(base_model(), BASE, TrainerConfig(learning_rate=3e-2))
    batch = examples(4)
    # Cross-entropy of the answer tokens alone, averaged over the batch's answer tokens.
    with torch.no_grad():
        terms = []
        for e in batch:
            logits = trainer.model(input_ids=torch.tensor([e.input_ids])).logits[0]
            n, p = len(e.input_ids), e.prompt_tokens
            targets = torch.tensor(e.input_ids[p:n])
            terms.append(torch.nn.functional.cross_entropy(logits[p - 1 : n - 1], targets,
                                                           reduction="sum"))  # fmt: skip
        want = float(sum(terms)) / sum(e.answer_tokens for e in batch)
    first = trainer.train_step(batch)
    assert abs(first - want) < 1e-4, (first, want)
    for _ in range(15):
        last = trainer.train_step(batch)
    assert last < first * 0.7, (first, last)
