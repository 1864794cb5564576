"""Text embeddings with ONNX Runtime and ``tokenizers``: the hot path, no torch.

The exported graph already does mean pooling and L2 normalisation, so a batch is
tokenise → pad → one ``session.run`` per sub-batch. Padding is the main waste on
CPU, so texts are sorted by token length and every sub-batch is padded only to
its own longest text; outputs are put back in input order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from flinkai.backends.base import EmbeddingBackend
from flinkai.backends.errors import BackendError, InvalidInputError
from flinkai.config import Config, EmbeddingConfig, ModelConfig, OnnxConfig
from flinkai.errors import ConfigError
from flinkai.models.artifacts import ModelArtifacts, load_artifacts
from flinkai.models.errors import ArtifactError
from flinkai.models.tokens import load_tokenizer, plan_sub_batches

__all__ = [
    "PROVIDERS",
    "OnnxEmbeddingBackend",
]

log = logging.getLogger(__name__)

#: Execution providers to request per ``OnnxConfig.provider``, in priority order.
PROVIDERS: dict[str, tuple[str, ...]] = {
    "cpu": ("CPUExecutionProvider",),
    "cuda": ("CUDAExecutionProvider", "CPUExecutionProvider"),
    "tensorrt": ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"),
}

_WARMUP_TEXTS = ("Warm-up: the first run allocates buffers and picks kernels.", "ok")


class OnnxEmbeddingBackend(EmbeddingBackend):
    """Embeds texts with the exported ONNX model (see :mod:`flinkai.models.artifacts`).

    Build it from a whole :class:`~flinkai.config.Config` or from the three sections
    it reads; keyword sections override those of ``config``.

    Args:
        config: The flinkai config.
        model: Which artifacts to load (name, dir, dim, max_seq_length).
        onnx: Session options: provider, thread counts, model variant.
        embedding: Sub-batch size and whether to sort by token length.

    Example:
        >>> with OnnxEmbeddingBackend(load_config()) as backend:  # doctest: +SKIP
        ...     vectors = backend.infer_batch(["a text", "another one"]).outputs
    """

    name = "onnx"

    def __init__(
        self,
        config: Config | None = None,
        *,
        model: ModelConfig | None = None,
        onnx: OnnxConfig | None = None,
        embedding: EmbeddingConfig | None = None,
    ) -> None:
        super().__init__()
        base = config or Config()
        self.model_config = model or base.model
        self.onnx_config = onnx or base.onnx
        self.embedding_config = embedding or base.embedding
        if self.onnx_config.provider not in PROVIDERS:
            raise ConfigError(
                f"onnx.provider {self.onnx_config.provider!r} is not one of {list(PROVIDERS)}"
            )
        self.dim = self.model_config.dim
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._artifacts: ModelArtifacts | None = None
        self._input_names: tuple[str, ...] = ()
        self._output_name = ""

    # -- lifecycle ---------------------------------------------------------------------

    def load(self) -> None:
        """Verify the artifacts, create the session and tokenizer, run one warm-up batch.

        Raises:
            ArtifactError: Artifacts are missing or corrupted (run ``flinkai model export``).
            ConfigError: The config asks for more tokens than the model was exported with.
            BackendError: ONNX Runtime could not create the session or run the warm-up.
        """
        with self._lock:
            if self._session is not None:
                return
            import onnxruntime as ort

            phases = self.cold_start.phases_s
            t0 = time.perf_counter()
            artifacts = load_artifacts(self.model_config)
            model_path = artifacts.model_file(self.onnx_config.variant)
            if self.model_config.max_seq_length > artifacts.max_seq_length:
                raise ConfigError(
                    f"model.max_seq_length={self.model_config.max_seq_length} exceeds the "
                    f"{artifacts.max_seq_length} tokens {artifacts.root} was exported with"
                )
            phases["artifacts_verify"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            try:
                session = ort.InferenceSession(
                    str(model_path),
                    sess_options=self._session_options(ort),
                    providers=list(self._providers(ort.get_available_providers())),
                )
            except Exception as e:  # onnxruntime's errors share no base class but Exception
                raise BackendError(
                    f"cannot create an ONNX Runtime session for {model_path}: {e}"
                ) from e
            phases["session_create"] = time.perf_counter() - t0
            self._check_graph(session, artifacts)

            t0 = time.perf_counter()
            tokenizer = load_tokenizer(artifacts.tokenizer_path, self.model_config.max_seq_length)
            phases["tokenizer_load"] = time.perf_counter() - t0

            self._session, self._tokenizer, self._artifacts = session, tokenizer, artifacts
            self._input_names = artifacts.input_names
            self._output_name = artifacts.output_name
            self.dim = artifacts.dim
            suffix = "" if self.onnx_config.variant == "fp32" else f"-{self.onnx_config.variant}"
            self._version = f"{artifacts.model_version}{suffix}"

            t0 = time.perf_counter()
            try:
                self._embed(list(_WARMUP_TEXTS))
            except BaseException:
                self._release()
                raise
            phases["warmup_first_batch"] = time.perf_counter() - t0
            log.info(
                "loaded %s from %s on %s in %.2fs (%s)",
                self._version,
                model_path,
                ",".join(session.get_providers()),
                self.cold_start.total_s,
                ", ".join(f"{k} {v:.3f}s" for k, v in phases.items()),
            )

    def close(self) -> None:
        """Drop the session and tokenizer; :meth:`load` may be called again later."""
        with self._lock:
            self._release()

    def _release(self) -> None:
        self._session = None
        self._tokenizer = None
        self._artifacts = None

    @property
    def loaded(self) -> bool:
        return self._session is not None

    # -- inference ---------------------------------------------------------------------

    @property
    def providers(self) -> list[str]:
        """Execution providers the session really uses, best first (empty before load)."""
        return list(self._session.get_providers()) if self._session is not None else []

    @property
    def artifacts(self) -> ModelArtifacts:
        if self._artifacts is None:
            raise BackendError(f"{type(self).__name__} used before load()")
        return self._artifacts

    def _infer(self, batch: Sequence[str]) -> np.ndarray:
        """Embed texts.

        Args:
            batch: Texts; each is truncated to ``model.max_seq_length`` tokens.

        Returns:
            float32 array ``[len(batch), dim]``, L2-normalised rows, in input order.

        Raises:
            InvalidInputError: An element is not a ``str``.
            BackendError: Called before :meth:`load`, or ONNX Runtime failed.
        """
        texts = list(batch)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidInputError(f"batch[{i}] is {type(text).__name__}, expected str")
        if self._session is None:
            raise BackendError(f"{type(self).__name__}.infer_batch called before load()")
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._embed(texts)

    def _embed(self, texts: list[str]) -> np.ndarray:
        # Local references: a concurrent close() must not swap them out mid-batch.
        session, tokenizer = self._session, self._tokenizer
        if session is None:
            raise BackendError(f"{type(self).__name__} was closed")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        cfg = self.embedding_config
        for sub in plan_sub_batches(
            tokenizer, texts, cfg.batch_size, cfg.sort_by_length, cfg.max_padding
        ):
            idx = sub.index
            feed = {name: sub.feed[name] for name in self._input_names}
            try:
                (result,) = session.run([self._output_name], feed)
            except Exception as e:  # onnxruntime's errors share no base class but Exception
                raise BackendError(f"ONNX Runtime failed on a batch of {len(idx)}: {e}") from e
            out[idx] = result
        return out

    # -- helpers -----------------------------------------------------------------------

    def _providers(self, available: Sequence[str]) -> tuple[str, ...]:
        requested = PROVIDERS[self.onnx_config.provider]
        chosen = tuple(p for p in requested if p in available) or ("CPUExecutionProvider",)
        missing = [p for p in requested if p not in available]
        if missing:
            log.warning(
                "onnx.provider=%s: %s not available in this onnxruntime build (available: %s); "
                "using %s",
                self.onnx_config.provider,
                ", ".join(missing),
                ", ".join(available),
                ", ".join(chosen),
            )
        return chosen

    def _session_options(self, ort: Any) -> Any:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = self.onnx_config.intra_op_threads
        opts.inter_op_num_threads = self.onnx_config.inter_op_threads
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        spin = "1" if self.onnx_config.allow_spinning else "0"
        opts.add_session_config_entry("session.intra_op.allow_spinning", spin)
        opts.add_session_config_entry("session.inter_op.allow_spinning", spin)
        return opts

    @staticmethod
    def _check_graph(session: Any, artifacts: ModelArtifacts) -> None:
        inputs = {i.name for i in session.get_inputs()}
        outputs = {o.name for o in session.get_outputs()}
        if inputs != set(artifacts.input_names) or artifacts.output_name not in outputs:
            raise ArtifactError(
                f"{artifacts.root}: graph inputs {sorted(inputs)} / outputs {sorted(outputs)} do "
                f"not match the manifest ({list(artifacts.input_names)} / {artifacts.output_name})"
            )
