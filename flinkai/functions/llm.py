"""What the ``parse_prompt`` and ``llm_complete`` SQL functions do, without PyFlink.

``parse_prompt`` turns a raw Kafka record ``{"id": ..., "prompt": ...}`` into the
prompt, or a dead-letter reason. ``llm_complete`` renders the prompt with the model's
chat template, restores the longest cached prefix (:mod:`flinkai.llm.prefix`),
prefills the rest and decodes greedily. Failures are data: an over-long prompt or
a decoder error comes back as the row's ``error`` (``reason: detail``), and the job
routes the row to the dead-letter topic.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from flinkai.config import Config, LlmConfig
from flinkai.functions.events import Invalid, Reason, decode_object, is_utf8_safe
from flinkai.llm.artifacts import default_llm_dir, load_llm_artifacts
from flinkai.llm.decoder import OnnxDecoder
from flinkai.llm.prefix import Decoder, PrefixCache, PrefixCompletion
from flinkai.llm.tokenizer import LlmTokenizer
from flinkai.state import (
    CodecConfig,
    InMemorySnapshotStore,
    KafkaSnapshotStore,
    KafkaStoreConfig,
    ReopeningStore,
    SnapshotStore,
)

__all__ = [
    "CompletionRow",
    "LlmCompleteFunction",
    "LlmReason",
    "LoadedModel",
    "Prompt",
    "PromptModel",
    "Rejected",
    "build_store",
    "kafka_store_config",
    "load_chat_tokenizer",
    "load_prompt_model",
    "parse_options",
    "parse_prompt",
]

log = logging.getLogger(__name__)


class LlmReason(StrEnum):
    """Dead-letter reasons of the LLM job, beside the shared :class:`Reason` codes."""

    EMPTY_PROMPT = "empty_prompt"
    #: Over ``llm.max_prompt_bytes`` before tokenising, or ``llm.max_prompt_tokens`` after.
    PROMPT_TOO_LONG = "prompt_too_long"
    #: The options argument is not a JSON object of known, valid options.
    INVALID_OPTIONS = "invalid_options"
    #: The event names an adapter this worker does not serve.
    UNKNOWN_ADAPTER = "unknown_adapter"
    #: The prompt plus its token budget needs more KV than ``llm.kv_budget_bytes``.
    KV_BUDGET_EXCEEDED = "kv_budget_exceeded"
    #: ``llm.max_waiting`` prompts (or ``llm.max_waiting_bytes``) already wait in this worker.
    QUEUE_FULL = "queue_full"


#: Priority range of an event's ``priority`` field (higher is admitted first).
PRIORITY_RANGE = (-100, 100)


@dataclass(frozen=True)
class Prompt:
    """A valid prompt record.

    Attributes:
        id: The record's id (string or integer in the JSON).
        prompt: The user's message.
        priority: Higher is admitted first (``PRIORITY_RANGE``; default 0).
        session: Turns with the same session continue one conversation, in order.
        adapter: The LoRA adapter to decode with (None: the base model).
        max_new_tokens: The event's token budget (None: ``llm.max_new_tokens``).
        meta: Any JSON the event carries in ``meta``, as JSON text: passed through to
            the output untouched (``jobs/rag_answer.sql`` carries its passages in it).
    """

    id: str
    prompt: str
    priority: int = 0
    session: str | None = None
    adapter: str | None = None
    max_new_tokens: int | None = None
    meta: str | None = None


@dataclass(frozen=True)
class Rejected:
    """Why a prompt record cannot be completed: a reason code and a detail."""

    reason: str
    detail: str


def parse_prompt(payload: bytes | None, max_prompt_bytes: int) -> Prompt | Rejected:
    """A raw record value -> :class:`Prompt`, or why it cannot be completed.

    Reasons: those of :func:`~flinkai.functions.events.decode_object` (empty, invalid
    UTF-8, not JSON, not an object, too deeply nested), ``missing_field``,
    ``invalid_field``, ``empty_prompt`` and ``prompt_too_long``.
    """
    obj = decode_object(payload)
    if isinstance(obj, Invalid):
        return Rejected(obj.reason.value, obj.detail)
    missing = [f for f in ("id", "prompt") if obj.get(f) is None]
    if missing:
        return Rejected(Reason.MISSING_FIELD.value, ", ".join(missing))
    pid, prompt = obj["id"], obj["prompt"]
    if not isinstance(pid, str | int) or isinstance(pid, bool):
        return Rejected(Reason.INVALID_FIELD.value, "id must be a string or an integer")
    if not isinstance(prompt, str):
        return Rejected(Reason.INVALID_FIELD.value, "prompt must be a string")
    for name, value in (("id", pid), ("prompt", prompt)):
        if isinstance(value, str) and not is_utf8_safe(value):
            return Rejected(Reason.INVALID_FIELD.value, f"{name} holds a lone UTF-16 surrogate")
    if not prompt.strip():
        return Rejected(LlmReason.EMPTY_PROMPT.value, "prompt is empty or whitespace")
    size = len(prompt.encode("utf-8"))
    if size > max_prompt_bytes:
        return Rejected(
            LlmReason.PROMPT_TOO_LONG.value,
            f"prompt is {size} bytes; limit {max_prompt_bytes} (llm.max_prompt_bytes)",
        )
    fields = _event_fields(obj)
    if isinstance(fields, Rejected):
        return fields
    meta = obj.get("meta")
    if meta is not None and not isinstance(meta, str):
        meta = json.dumps(meta, ensure_ascii=False)
    return Prompt(str(pid), prompt, *fields, meta=meta)


def _event_fields(
    obj: Mapping[str, object],
) -> tuple[int, str | None, str | None, int | None] | Rejected:
    """``priority``, ``session``, ``adapter`` and ``max_new_tokens``, each optional."""
    priority = obj.get("priority", 0)
    low, high = PRIORITY_RANGE
    if priority is None:
        priority = 0
    if not isinstance(priority, int) or isinstance(priority, bool) or not low <= priority <= high:
        return Rejected(
            Reason.INVALID_FIELD.value,
            f"priority must be an integer in {low}..{high}, got {priority!r}",
        )
    texts: list[str | None] = []
    for name in ("session", "adapter"):
        value = obj.get(name)
        if value is not None and (
            not isinstance(value, str) or not value.strip() or len(value) > 256
            or not is_utf8_safe(value)
        ):  # fmt: skip
            return Rejected(
                Reason.INVALID_FIELD.value,
                f"{name} must be a non-empty string of at most 256 chars",
            )
        texts.append(value)
    max_new = obj.get("max_new_tokens")
    if max_new is not None and (
        not isinstance(max_new, int) or isinstance(max_new, bool) or not 1 <= max_new <= 4096
    ):
        return Rejected(
            Reason.INVALID_FIELD.value,
            f"max_new_tokens must be an integer in 1..4096, got {max_new!r}",
        )
    return priority, texts[0], texts[1], max_new


def parse_options(text: str | None, config: LlmConfig) -> int:
    """``max_new_tokens`` from the options argument (a JSON object), capped by config.

    Raises:
        ValueError: Not a JSON object, an unknown key, or a value out of range.
    """
    if text is None or not text.strip():
        return config.max_new_tokens
    try:
        options = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"options are not JSON: {e.msg}") from e
    if not isinstance(options, dict):
        raise ValueError("options must be a JSON object")
    unknown = set(options) - {"max_new_tokens"}
    if unknown:
        raise ValueError(f"unknown options {sorted(unknown)}; known: max_new_tokens")
    value = options.get("max_new_tokens", config.max_new_tokens)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 4096:
        raise ValueError(f"max_new_tokens must be an integer in 1..4096, got {value!r}")
    return value


class PromptModel(Protocol):
    """The decoder plus what turns text into ids and back (the real one: ``flinkai.llm``)."""

    @property
    def decoder(self) -> Decoder: ...

    @property
    def stop_ids(self) -> Sequence[int]: ...

    def prompt_ids(self, prompt: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class CompletionRow:
    """One ``llm_complete`` result; ``error`` is ``reason: detail`` or None."""

    completion: str | None
    model_version: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    ttft_ms: float | None
    error: str | None


def kafka_store_config(config: Config) -> KafkaStoreConfig:
    """The Kafka store's settings from ``llm`` and ``kafka`` (``kafka.security`` included)."""
    llm = config.llm
    return KafkaStoreConfig(
        bootstrap=config.kafka.bootstrap_servers,
        topic=llm.topic,
        max_record_bytes=llm.max_record_bytes,
        cache_max_bytes=llm.cache_max_bytes,
        cache_ttl_s=llm.cache_ttl_s,
        security=config.kafka.security,
        codec=CodecConfig(
            codec=llm.store_codec, checksum=llm.store_checksum, store_dtype=llm.store_dtype
        ),
    )


def build_store(config: Config, *, retry_s: float = 30.0) -> SnapshotStore | None:
    """The snapshot store ``llm.store`` names; ``None`` for ``none``.

    The Kafka store is wrapped in a :class:`ReopeningStore`: a broker that is down
    when the worker starts leaves it without the prefix cache (every lookup a miss,
    counted as ``store_unavailable``) instead of failing the job, and the store is
    opened again every ``retry_s`` seconds until the broker answers.
    """
    llm = config.llm
    if llm.store == "none":
        return None
    if llm.store == "memory":
        # In one process the bytes never leave memory: compressing them buys nothing.
        return InMemorySnapshotStore(CodecConfig(codec="none"))
    store_config = kafka_store_config(config)
    return ReopeningStore(
        lambda: KafkaSnapshotStore(store_config),
        describe=f"Kafka {store_config.bootstrap} (topic {store_config.topic!r})",
        retry_s=retry_s,
    )


class LlmCompleteFunction:
    """Completes prompts with prefix reuse; one instance per worker.

    Args:
        config: The ``llm`` and ``kafka`` sections are used.
        model: The loaded model (the real one: :func:`load_prompt_model`).
        store: The prefix store; by default the one ``llm.store`` names.
        count_miss: Called with ``(reason, n)`` after each prompt for the prefix
            lookups and snapshots that failed: the store's refusals (``checksum``,
            ``model_version``...) and failed store calls (``store_unavailable``...).
            The SQL function feeds a Prometheus counter labelled by reason.
    """

    def __init__(
        self,
        config: Config,
        model: PromptModel,
        store: SnapshotStore | None = None,
        count_miss: Callable[[str, int], None] | None = None,
    ) -> None:
        self.config = config
        self.model = model
        self.store = store
        self._count_miss = count_miss
        self._counted: Counter[str] = Counter()
        self.prefix = PrefixCache.for_decoder(
            model.decoder, store, block_tokens=config.llm.block_tokens, publish=config.llm.publish
        )
        # One decoder per worker process; the cache is not safe for concurrent use.
        self._lock = threading.Lock()

    @property
    def model_version(self) -> str:
        return self.model.decoder.model_version

    def __call__(self, prompt: str | None, options: str | None = None) -> CompletionRow:
        """Complete one prompt; invalid input comes back as the row's error."""
        llm = self.config.llm
        if prompt is None:
            return _error(Reason.MISSING_FIELD.value, "prompt is null")
        if not prompt.strip():
            return _error(LlmReason.EMPTY_PROMPT.value, "prompt is empty or whitespace")
        size = len(prompt.encode("utf-8", "surrogatepass"))
        if size > llm.max_prompt_bytes:
            return _error(
                LlmReason.PROMPT_TOO_LONG.value,
                f"prompt is {size} bytes; limit {llm.max_prompt_bytes}",
            )
        try:
            max_new = parse_options(options, llm)
        except ValueError as e:
            return _error(LlmReason.INVALID_OPTIONS.value, str(e))
        ids = self.model.prompt_ids(prompt)
        if len(ids) > llm.max_prompt_tokens:
            return _error(
                LlmReason.PROMPT_TOO_LONG.value,
                f"prompt is {len(ids)} tokens after the chat template; limit "
                f"{llm.max_prompt_tokens} (llm.max_prompt_tokens)",
            )
        with self._lock:
            done: PrefixCompletion = self.prefix.complete(
                self.model.decoder, ids, max_new_tokens=max_new, stop_ids=self.model.stop_ids
            )
            self._report_misses()
        return CompletionRow(
            completion=self.model.decode(done.token_ids),
            model_version=self.model_version,
            prompt_tokens=done.prompt_tokens,
            cached_tokens=done.cached_tokens,
            ttft_ms=round(done.ttft_ms, 3),
            error=None,
        )

    def _report_misses(self) -> None:
        if self._count_miss is None:
            return
        total = self.prefix.stats.rejected + self.prefix.stats.store_errors
        for reason, n in (total - self._counted).items():
            self._count_miss(reason, n)
        self._counted = total

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


def _error(reason: str, detail: str) -> CompletionRow:
    return CompletionRow(None, None, None, None, None, f"{reason}: {detail}")


def stats_summary(fn: LlmCompleteFunction) -> Mapping[str, object]:
    """Prefix counters for logs and tests."""
    s = fn.prefix.stats
    return {
        "lookups": s.lookups,
        "hits": s.hits,
        "restored_tokens": s.restored_tokens,
        "published_blocks": s.published_blocks,
        "rejected": dict(s.rejected),
        "store_errors": dict(s.store_errors),
    }


@dataclass(frozen=True)
class LoadedModel:
    """The exported decoder, its tokenizer and stop ids (a :class:`PromptModel`)."""

    decoder: OnnxDecoder
    tokenizer: LlmTokenizer
    stop_ids: tuple[int, ...]

    def prompt_ids(self, prompt: str) -> list[int]:
        """The prompt as one user message through the model's own chat template."""
        return self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids)

    def turn_ids(self, prompt: str, *, ended: bool) -> list[int]:
        """Ids that follow a conversation's last completion to ask ``prompt`` next.

        Rendered by the model's own template: what it puts after an assistant message
        (less the stop token when the completion ``ended`` with it), then the new user
        message and the generation prompt.
        """
        user, reply = "\x00u\x00", "\x00r\x00"
        before = self.tokenizer.render_chat(
            [{"role": "user", "content": user}, {"role": "assistant", "content": reply}],
            add_generation_prompt=False,
        )
        after = self.tokenizer.render_chat(
            [
                {"role": "user", "content": user},
                {"role": "assistant", "content": reply},
                {"role": "user", "content": prompt},
            ]
        )
        closing = before[before.index(reply) + len(reply) :]
        eos = self.tokenizer.special_tokens.get("eos_token", "")
        if ended and eos and closing.startswith(eos):
            closing = closing[len(eos) :]
        return self.tokenizer.encode(closing + after[len(before) :])


def load_chat_tokenizer(config: Config) -> LlmTokenizer:
    """The tokenizer and chat template of ``llm.model``, without loading its decoder.

    Raises:
        LlmArtifactError: The export is missing or damaged.
    """
    folder = config.llm.dir or default_llm_dir(config.llm.model)
    # The decoder's hash is checked where it is loaded; reading 650 MB here buys nothing.
    artifacts = load_llm_artifacts(folder, verify_checksums=False)
    return LlmTokenizer(
        artifacts.tokenizer_path,
        artifacts.chat_template_path.read_text(encoding="utf-8"),
        artifacts.manifest.special_tokens,
    )


def load_prompt_model(config: Config) -> LoadedModel:
    """Load ``llm.model`` from ``llm.dir`` (default: the ``export-llm`` folder).

    Raises:
        LlmArtifactError: The export is missing or damaged; it names the command to fix it.
    """
    folder = config.llm.dir or default_llm_dir(config.llm.model)
    decoder = OnnxDecoder.load(folder)
    artifacts = decoder.artifacts
    tokenizer = LlmTokenizer(
        artifacts.tokenizer_path,
        artifacts.chat_template_path.read_text(encoding="utf-8"),
        decoder.manifest.special_tokens,
    )
    return LoadedModel(decoder, tokenizer, tuple(decoder.manifest.eos_token_ids))
