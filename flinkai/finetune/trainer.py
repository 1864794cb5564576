"""A deterministic LoRA trainer whose whole progress is one blob of bytes.

``LoraTrainer`` wraps a base causal LM with peft LoRA adapters (rank 8, alpha 16, no
dropout, on ``q_proj`` and ``v_proj`` by default) and trains them with AdamW, one
optimizer step per batch of examples, with the loss on the answer tokens only.

**Determinism.** The same examples in the same order give the same adapter bytes:
``torch.manual_seed`` before the LoRA matrices are initialised, a fixed
``torch.set_num_threads`` (the reduction order of a matmul depends on the thread
count), ``torch.use_deterministic_algorithms(True)``, the single-tensor AdamW
implementation, and batches taken strictly in arrival order.

**One unit of state.** :meth:`LoraTrainer.state_bytes` holds the adapter weights, the
optimizer state (AdamW's moments and step), the step count, torch's RNG state and the
number of examples consumed, with a fingerprint of the settings and base model.
:meth:`LoraTrainer.load_state_bytes` puts all of them back, so a trainer restored
mid-way continues exactly as the uninterrupted one (``tests/unit/test_finetune_trainer.py``).
The blob is written with ``torch.save`` and read with ``torch.load(weights_only=True)``:
tensors and plain containers only, no code is unpickled.

torch and peft are imported when a trainer is built, never at module import.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from flinkai.errors import require
from flinkai.finetune.errors import TrainerStateError
from flinkai.finetune.examples import EncodedExample
from flinkai.llm.lora import DEFAULT_MODULES, Adapter, LoraSpec

__all__ = ["STATE_FORMAT", "LoraTrainer", "TrainerConfig", "configure_torch"]

#: Layout version of :meth:`LoraTrainer.state_bytes`.
STATE_FORMAT = 1
#: A peft LoRA module's path: ``...layers.{i}.self_attn.{module}``.
_LAYER = re.compile(r"\.layers\.(\d+)\.[A-Za-z_]+\.([A-Za-z_]+)$")
#: Label of a position that carries no loss (transformers' ignore index).
_IGNORE = -100


@dataclass(frozen=True)
class TrainerConfig:
    """How adapters are trained; part of the state's fingerprint.

    Attributes:
        rank: LoRA rank ``r``.
        alpha: LoRA alpha; the update is scaled by ``alpha / rank``.
        dropout: LoRA dropout (0: no randomness during a step).
        modules: The projections adapted in every layer.
        learning_rate: AdamW's learning rate.
        weight_decay: AdamW's decoupled weight decay.
        batch_size: Examples per optimizer step.
        seed: Seeds the LoRA initialisation (and torch's RNG from there on).
        threads: torch's intra-op threads; fixed, since results depend on it.
        max_tokens: Most prompt + answer tokens one example may have.
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    modules: tuple[str, ...] = DEFAULT_MODULES
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 4
    seed: int = 0
    threads: int = 1
    max_tokens: int = 512

    def __post_init__(self) -> None:
        problems = [
            f"{name} must be positive"
            for name in ("rank", "alpha", "learning_rate", "batch_size", "threads", "max_tokens")
            if not getattr(self, name) > 0
        ]
        if not 0.0 <= self.dropout < 1.0:
            problems.append("dropout must be in [0, 1)")
        if self.weight_decay < 0:
            problems.append("weight_decay must be >= 0")
        if not self.modules:
            problems.append("modules must name at least one projection")
        if problems:
            raise ValueError(f"bad trainer config {self}: {'; '.join(problems)}")

    def fingerprint(self) -> dict[str, Any]:
        """What must match for a blob to be restored (``threads`` too: results depend on it)."""
        data = asdict(self)
        data["modules"] = list(self.modules)
        return data


def configure_torch(threads: int) -> None:
    """Fix torch's thread count and ask for deterministic kernels (process-wide settings)."""
    torch: Any = require("torch", "torch")
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)


class LoraTrainer:
    """LoRA adapters on a base model, trained one batch at a time.

    Args:
        model: The base transformers causal LM (its weights are frozen; peft wraps it
            in place, so give each trainer its own model).
        base_model: ``model_version`` of the serving export of these weights; adapters
            record it and serving refuses them on another decoder.
        config: The training settings.
    """

    def __init__(self, model: Any, base_model: str, config: TrainerConfig | None = None) -> None:
        torch: Any = require("torch", "torch")
        peft: Any = require("peft", "torch")
        self.config = config or TrainerConfig()
        self.base_model = base_model
        self._torch = torch
        configure_torch(self.config.threads)
        c = self.config
        for p in model.parameters():
            p.requires_grad_(False)
        torch.manual_seed(c.seed)
        lora = peft.LoraConfig(
            r=c.rank,
            lora_alpha=c.alpha,
            lora_dropout=c.dropout,
            target_modules=list(c.modules),
            bias="none",
            task_type="CAUSAL_LM",
        )
        self._model = peft.get_peft_model(model, lora)
        # No dropout anywhere (Llama's attention dropout is 0, LoRA's too): eval mode
        # keeps the forward free of randomness whatever the base config says.
        self._model.eval()
        self._params = [(n, p) for n, p in self._model.named_parameters() if p.requires_grad]
        self._optimizer = torch.optim.AdamW(
            [p for _, p in self._params],
            lr=c.learning_rate,
            weight_decay=c.weight_decay,
            foreach=False,  # one fixed implementation, whatever the default becomes
        )
        self._modules = self._lora_modules()
        self.step = 0
        self.consumed = 0
        self.last_loss: float | None = None

    # -- training --------------------------------------------------------------------

    @property
    def model(self) -> Any:
        """The peft-wrapped model (adapters active)."""
        return self._model

    def train_step(self, batch: Sequence[EncodedExample]) -> float:
        """One optimizer step on ``batch`` (in this order); the mean answer-token loss.

        Rows are padded on the left, so every answer ends at the last position and the
        logits are computed for the last ``longest answer + 1`` positions only: the
        vocabulary projection of every prompt position (most of a row) would cost a
        third of the step and feed no loss.
        """
        torch = self._torch
        if not batch:
            raise ValueError("a training step needs at least one example")
        width = max(len(e.input_ids) for e in batch)
        answer = max(e.answer_tokens for e in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        labels = torch.full((len(batch), answer), _IGNORE, dtype=torch.long)
        for row, e in enumerate(batch):
            n = len(e.input_ids)
            ids[row, width - n :] = torch.tensor(e.input_ids, dtype=torch.long)
            mask[row, width - n :] = 1
            # Loss on the answer only: the model learns what to say, not the prompt.
            labels[row, answer - e.answer_tokens :] = ids[row, width - e.answer_tokens :]
        # Left padding: positions count real tokens only, as an unpadded forward has them.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self._model(input_ids=ids, attention_mask=mask, position_ids=positions,
                          logits_to_keep=answer + 1, use_cache=False)  # fmt: skip
        # logits[:, j] predicts the token after position j: the last `answer` tokens.
        logits = out.logits[:, :-1, :]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
            ignore_index=_IGNORE,
        )  # fmt: skip
        self._optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._optimizer.step()
        self.step += 1
        self.consumed += len(batch)
        self.last_loss = float(loss.detach())
        return self.last_loss

    # -- state -----------------------------------------------------------------------

    def _fingerprint(self) -> dict[str, Any]:
        shapes = {n: list(p.shape) for n, p in self._params}
        return {"config": self.config.fingerprint(), "base_model": self.base_model,
                "params": shapes}  # fmt: skip

    def state_bytes(self) -> bytes:
        """Adapter weights, optimizer state, step, RNG state and examples consumed, as bytes."""
        torch = self._torch
        state = {
            "format": STATE_FORMAT,
            "fingerprint": self._fingerprint(),
            "step": self.step,
            "consumed": self.consumed,
            "last_loss": self.last_loss,
            "params": {n: p.detach().clone() for n, p in self._params},
            "optimizer": self._optimizer.state_dict(),
            "rng": torch.get_rng_state(),
        }
        buf = io.BytesIO()
        torch.save(state, buf)
        return buf.getvalue()

    def load_state_bytes(self, blob: bytes) -> None:
        """Put back everything :meth:`state_bytes` saved.

        Raises:
            TrainerStateError: Not a trainer blob, another layout, or saved by a trainer
                with other settings, another base model or other adapted modules.
        """
        torch = self._torch
        try:
            state = torch.load(io.BytesIO(blob), weights_only=True)
        except Exception as e:  # torch raises RuntimeError/UnpicklingError/EOFError
            raise TrainerStateError(
                "malformed", f"{len(blob)} bytes are not a trainer state: {type(e).__name__}: {e}"
            ) from e
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            got = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise TrainerStateError("format", f"state format {got!r}, expected {STATE_FORMAT}")
        want = self._fingerprint()
        if state.get("fingerprint") != want:
            raise TrainerStateError(
                "mismatch",
                f"the state was saved by a trainer with {state.get('fingerprint')!r}; "
                f"this one has {want!r}",
            )
        with torch.no_grad():
            for name, p in self._params:
                p.copy_(state["params"][name])
        self._optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        self.step = int(state["step"])
        self.consumed = int(state["consumed"])
        loss = state.get("last_loss")
        self.last_loss = None if loss is None else float(loss)

    @classmethod
    def from_state_bytes(
        cls, blob: bytes, model: Any, base_model: str, config: TrainerConfig | None = None
    ) -> LoraTrainer:
        """A trainer on ``model`` continuing from ``blob`` (see :meth:`load_state_bytes`)."""
        trainer = cls(model, base_model, config)
        trainer.load_state_bytes(blob)
        return trainer

    # -- adapters --------------------------------------------------------------------

    def _lora_modules(self) -> list[tuple[int, str, Any]]:
        """(layer, module name, peft LoRA layer) of every adapted projection."""
        found = []
        for path, module in self._model.named_modules():
            lora_a = getattr(module, "lora_A", None)
            if lora_a is None or "default" not in lora_a:
                continue
            m = _LAYER.search(path)
            if m is None:
                raise ValueError(f"cannot tell the layer of LoRA module {path!r}")
            found.append((int(m.group(1)), m.group(2), module))
        return sorted(found, key=lambda t: (t[0], self.config.modules.index(t[1])))

    def spec(self) -> LoraSpec:
        """The LoRA inputs a decoder needs to serve this trainer's adapters."""
        dims: dict[str, tuple[int, int]] = {}
        for _, name, module in self._modules:
            dims.setdefault(name, (int(module.in_features), int(module.out_features)))
        dims = {m: dims[m] for m in self.config.modules}
        return LoraSpec(rank=self.config.rank, n_layers=1 + max(t[0] for t in self._modules),
                        dims=dims)  # fmt: skip

    def params(self) -> dict[str, np.ndarray]:
        """The adapter as the decoder's inputs: ``a = A^T`` [in, r], ``b = scale * B^T`` [r, out].

        peft computes ``x @ A^T @ B^T * scale``; the exported graph adds ``x @ a @ b``.
        """
        out: dict[str, np.ndarray] = {}
        with self._torch.no_grad():
            for layer, name, module in self._modules:
                a = module.lora_A["default"].weight.detach().T.contiguous()
                b = module.lora_B["default"].weight.detach().T * float(module.scaling["default"])
                out[f"lora.{layer}.{name}.a"] = a.numpy().astype(np.float32, copy=True)
                out[f"lora.{layer}.{name}.b"] = b.contiguous().numpy().astype(np.float32, copy=True)
        return out

    def adapter(self, name: str, version: int, extra: Mapping[str, Any] | None = None) -> Adapter:
        """The current adapter as version ``version`` of ``name``.

        Its metadata records the step, the examples consumed and the last loss; nothing
        time-dependent, so the same training gives the same bytes.
        """
        meta = {"step": self.step, "examples": self.consumed, "loss": self.last_loss,
                **dict(extra or {})}  # fmt: skip
        return Adapter(
            name=name,
            version=version,
            base_model=self.base_model,
            rank=self.config.rank,
            params=self.params(),
            extra=meta,
        )
