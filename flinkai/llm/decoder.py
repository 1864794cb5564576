"""Run the exported ONNX decoder: token ids + a past KV cache -> last logits + new cache.

One ``forward`` prefills any number of new tokens on top of a cache (zero tokens
for a fresh prompt) and returns the logits of the last position with the cache that
now covers past + new tokens. Prefix reuse is therefore just ``forward(suffix, past)``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from flinkai.llm.artifacts import LlmArtifacts, LlmManifest, load_llm_artifacts
from flinkai.llm.batch import StepInputs
from flinkai.llm.cache import KvCache, ModelShape
from flinkai.llm.errors import CacheShapeError, LlmArtifactError, LlmError
from flinkai.llm.lora import Adapter, LoraSpec

__all__ = ["AdaptedDecoder", "DecoderOptions", "OnnxDecoder"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecoderOptions:
    """How the ONNX Runtime session runs.

    Attributes:
        intra_op_threads: Threads per operator; 0 means one per host core.
        verify_checksums: Hash the files against the manifest when loading.
        graph_optimization: ORT graph optimisation (fusions); off only for debugging.
        allow_spinning: Let idle pool threads busy-wait. Off by default, as for the
            embedder (``onnx.allow_spinning``): on cores shared with the JVM and Kafka a
            spinning thread steals the time the working one needs.
    """

    intra_op_threads: int = 0
    verify_checksums: bool = True
    graph_optimization: bool = True
    allow_spinning: bool = False


class OnnxDecoder:
    """The exported decoder with an explicit KV cache (batch 1, fp32, CPU provider).

    Attributes:
        model_id: Model name from the manifest.
        model_version: Content hash of the decoder file from the manifest.
        shape: Cache shape (layers, KV heads, head size, dtype, vocab).
        manifest: The whole manifest (stop ids, special tokens, max tokens).
    """

    def __init__(self, artifacts: LlmArtifacts, options: DecoderOptions | None = None) -> None:
        options = options or DecoderOptions()
        self.artifacts = artifacts
        self.manifest: LlmManifest = artifacts.manifest
        self.model_id = self.manifest.model_id
        self.model_version = self.manifest.model_version
        self.shape: ModelShape = self.manifest.shape
        so = ort.SessionOptions()
        so.intra_op_num_threads = options.intra_op_threads or (os.cpu_count() or 1)
        so.inter_op_num_threads = 1
        so.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if options.allow_spinning else "0"
        )
        so.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            if options.graph_optimization
            else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        )
        try:
            self._session = ort.InferenceSession(
                str(artifacts.decoder_path), so, providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # ORT raises its own Fail/InvalidGraph types
            raise LlmArtifactError(f"{artifacts.decoder_path} does not load: {e}") from e
        if not self.manifest.grouped_attention:
            # Works, but its graph copies every KV head per query head at each step.
            log.warning(
                "%s was exported before the grouped attention: its decode steps copy the KV; "
                "flinkai model export-llm --force rebuilds it faster (docs/llm.md)",
                artifacts.root,
            )
        got_in = [i.name for i in self._session.get_inputs()]
        got_out = [o.name for o in self._session.get_outputs()]
        if got_in != list(self.manifest.inputs) or got_out != list(self.manifest.outputs):
            raise LlmArtifactError(
                f"{artifacts.decoder_path}: graph inputs/outputs differ from the manifest"
            )
        self._past_names = got_in[3 : 3 + 2 * self.shape.n_layers]
        self._output_names = got_out
        self._dtype = np.dtype(self.shape.dtype)
        #: The graph's LoRA inputs (``export-llm --lora-rank``); None: it takes no adapters.
        self.lora: LoraSpec | None = self.manifest.lora
        self._lora_zero = (
            {n: z[None] for n, z in self.lora.zeros().items()} if self.lora is not None else {}
        )

    @classmethod
    def load(
        cls, folder: str | Path | None = None, options: DecoderOptions | None = None
    ) -> OnnxDecoder:
        """Load the export in ``folder`` (the default export folder when None)."""
        options = options or DecoderOptions()
        return cls(load_llm_artifacts(folder, verify_checksums=options.verify_checksums), options)

    def empty_cache(self) -> KvCache:
        """A cache of zero tokens for this model."""
        return self.shape.empty_cache()

    def forward(
        self, token_ids: Sequence[int], past: KvCache | None = None, lora: Adapter | None = None
    ) -> tuple[np.ndarray, KvCache]:
        """Prefill ``token_ids`` after ``past``.

        Args:
            token_ids: New tokens (at least one).
            past: Cache of the tokens before them; None for a fresh sequence.
            lora: The adapter to decode with (checked against :attr:`lora` by whoever
                loaded it); None: the base model.

        Returns:
            Logits of the last new position, shape ``(vocab,)``, and the cache of
            past + new tokens.

        Raises:
            LlmError: No tokens, an id outside the vocabulary, or a sequence longer
                than the model's context.
            CacheShapeError: ``past`` was made for another model shape.
        """
        if past is None:
            past = self.empty_cache()
        elif not past.matches(self.shape):
            raise CacheShapeError(
                f"cache of {past.n_layers} layers x {past.n_kv_heads} heads x {past.head_dim} "
                f"{past.dtype} does not fit {self.model_id} ({self.shape})"
            )
        ids = np.asarray(token_ids, dtype=np.int64).reshape(1, -1)
        n_new, n_past = ids.shape[1], past.seq_len
        if n_new == 0:
            raise LlmError("forward needs at least one new token")
        vocab = self.shape.vocab_size
        if vocab and (ids.min() < 0 or ids.max() >= vocab):
            raise LlmError(f"token ids must be in [0, {vocab}), got {ids.min()}..{ids.max()}")
        total = n_past + n_new
        if total > self.manifest.max_context:
            raise LlmError(
                f"{total} tokens exceed the model's context of {self.manifest.max_context}"
            )
        feed: dict[str, np.ndarray] = {
            "input_ids": ids,
            # Batch 1 has no padding; the mask still covers past + new for the graph.
            "attention_mask": np.ones((1, total), dtype=np.int64),
            "position_ids": np.arange(n_past, total, dtype=np.int64).reshape(1, -1),
        }
        for i in range(past.n_layers):
            feed[self._past_names[2 * i]] = past.keys[i]
            feed[self._past_names[2 * i + 1]] = past.values[i]
        if lora is not None and self.lora is None:
            raise LlmError(f"adapter {lora.tag}: this decoder has no LoRA inputs")
        if self.lora is not None:
            if lora is None:
                feed.update(self._lora_zero)
            else:
                feed.update({n: lora.params[n][None] for n in self.lora.names()})
        outputs = self._session.run(None, feed)
        logits = np.asarray(outputs[0]).reshape(-1)
        cache = KvCache(keys=tuple(outputs[1::2]), values=tuple(outputs[2::2]))
        return logits, cache

    def forward_batch(
        self, inputs: StepInputs, past: Sequence[np.ndarray], present: Sequence[np.ndarray]
    ) -> np.ndarray:
        """One step for a batch of rows (:class:`~flinkai.llm.batch.KvBatch` builds the inputs).

        The present KV is written into ``present`` (contiguous, K then V per layer,
        one column wider than ``past``) through I/O binding, so the batch owns and
        reuses that memory.

        Returns:
            Logits ``[rows, vocab]``.
        """
        io = self._session.io_binding()
        io.bind_cpu_input("input_ids", inputs.input_ids)
        io.bind_cpu_input("attention_mask", inputs.attention_mask)
        io.bind_cpu_input("position_ids", inputs.position_ids)
        for name, arr in zip(self._past_names, past, strict=True):
            io.bind_cpu_input(name, arr)
        if self.lora is not None:
            if inputs.lora is None:
                raise LlmError("this decoder takes LoRA inputs; the batch brought none")
            for name in self.lora.names():
                io.bind_cpu_input(name, inputs.lora[name])
        io.bind_output(self._output_names[0], "cpu")
        for name, arr in zip(self._output_names[1:], present, strict=True):
            io.bind_output(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
        self._session.run_with_iobinding(io)
        # Only the logits are copied out; the present tensors are already in place.
        return np.asarray(io.get_outputs()[0].numpy())

    def with_adapter(self, adapter: Adapter | None) -> AdaptedDecoder:
        """This decoder with ``adapter`` applied to every ``forward`` (batch-1 loops)."""
        return AdaptedDecoder(self, adapter)


class AdaptedDecoder:
    """An :class:`OnnxDecoder` bound to one adapter: ``forward(ids, past)`` as the base has."""

    def __init__(self, decoder: OnnxDecoder, adapter: Adapter | None) -> None:
        self.decoder = decoder
        self.adapter = adapter
        self.manifest = decoder.manifest
        self.shape = decoder.shape
        self.model_id = decoder.model_id
        self.model_version = decoder.model_version

    def forward(
        self, token_ids: Sequence[int], past: KvCache | None = None
    ) -> tuple[np.ndarray, KvCache]:
        return self.decoder.forward(token_ids, past, lora=self.adapter)
