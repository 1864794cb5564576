"""The training job's result computed in one process: the reference for the job's output.

:func:`replay` trains over example records in order exactly as the job's operator does
(:mod:`flinkai.operators.finetune`): the same parsing and dead-letter reasons, one
adapter per name, one optimizer step per ``batch_size`` examples of a name, a version
every ``publish_every`` examples. Training is deterministic, so the versions it returns
are byte for byte what the job publishes for the same records, with or without
failures in between (the tests compare them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from flinkai.finetune.base import BaseModel
from flinkai.finetune.examples import BadExample, EncodedExample, encode_example, parse_example
from flinkai.finetune.trainer import LoraTrainer, TrainerConfig

__all__ = ["Published", "Replay", "replay"]


@dataclass(frozen=True)
class Published:
    """One adapter version: its name, number, ``.onnx_adapter`` bytes and progress."""

    adapter: str
    version: int
    data: bytes
    examples: int
    loss: float


@dataclass(frozen=True)
class Replay:
    """What :func:`replay` made: the versions in publication order, and the dead letters
    as ``(index of the record, reason)``."""

    versions: list[Published]
    dead: list[tuple[int, BadExample]]


def replay(
    base: BaseModel,
    payloads: Iterable[bytes | None],
    config: TrainerConfig,
    publish_every: int,
    default_adapter: str = "default",
    on_version: Callable[[Published], None] | None = None,
) -> Replay:
    """Train over ``payloads`` in order as the job does; see the module docstring.

    ``base`` is wrapped in place by the trainer: give each call its own.
    """
    if publish_every % config.batch_size:
        raise ValueError(f"publish_every {publish_every} is not a multiple of {config.batch_size}")
    trainer = LoraTrainer(base.model, base.model_version, config)
    initial = trainer.state_bytes()
    states: dict[str, bytes] = {}
    pending: dict[str, list[EncodedExample]] = {}
    loaded: str | None = None
    versions: list[Published] = []
    dead: list[tuple[int, BadExample]] = []
    for i, payload in enumerate(payloads):
        got = parse_example(payload, default_adapter)
        encoded = (
            got
            if isinstance(got, BadExample)
            else encode_example(base.tokenizer, got, base.stop_id, config.max_tokens)
        )
        if isinstance(encoded, BadExample):
            dead.append((i, encoded))
            continue
        assert not isinstance(got, BadExample)
        name = got.adapter
        queue = pending.setdefault(name, [])
        queue.append(encoded)
        if len(queue) < config.batch_size:
            continue
        if loaded != name:
            # One trainer for every adapter, as in the operator: swap states by name.
            if loaded is not None:
                states[loaded] = trainer.state_bytes()
            trainer.load_state_bytes(states.get(name, initial))
            loaded = name
        loss = trainer.train_step(queue[: config.batch_size])
        del queue[: config.batch_size]
        if trainer.consumed % publish_every == 0:
            version = trainer.consumed // publish_every
            data = trainer.adapter(name, version).encode()
            published = Published(name, version, data, trainer.consumed, loss)
            versions.append(published)
            if on_version is not None:
                on_version(published)
    return Replay(versions, dead)
