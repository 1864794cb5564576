"""Scoring with any tabular/tensor ONNX model: the backend behind ``predict``."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.backends.base import InferenceBackend
from flinkai.backends.errors import BackendError, ScoringModelError
from flinkai.config import PredictConfig
from flinkai.errors import ConfigError

__all__ = ["OnnxScoringBackend"]

#: ONNX tensor element types the backend can feed, as ``session.get_inputs()`` spells them.
_INPUT_DTYPES: dict[str, type[np.floating[Any]]] = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
}


class OnnxScoringBackend(InferenceBackend[np.ndarray]):
    """Scores ``[n, features]`` matrices with any ONNX model named by a :class:`PredictConfig`.

    The same contract as the embedding backends: :meth:`load` creates the session
    once per worker process, :meth:`infer_batch` returns the outputs with the version.

    Args:
        config: Model path, tensor names and expected feature count.
    """

    name = "onnx-scoring"

    def __init__(self, config: PredictConfig) -> None:
        super().__init__()
        self.config = config
        self.path = Path(config.model_path).expanduser()
        self._session: Any = None
        self.input_name = ""
        self.output_name = ""
        self.dtype: type[np.floating[Any]] = np.float32
        self.feature_count = 0
        self._version = "unknown"

    def load(self) -> None:
        """Create the session and match its input and output to the config.

        Raises:
            ConfigError: ``config.model_path`` is empty or ``feature_count`` is negative.
            ScoringModelError: The file is missing, not loadable, or its input/output do
                not match the config.
        """
        if self._session is not None:
            return
        config = self.config
        if not config.model_path:
            raise ConfigError("predict.model_path is empty: set it to an .onnx file")
        if config.feature_count < 0:
            raise ConfigError(f"predict.feature_count must be >= 0, got {config.feature_count}")
        path = Path(config.model_path).expanduser()
        if not path.is_file():
            raise ScoringModelError(f"scoring model {path} does not exist")
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = config.intra_op_threads
        opts.inter_op_num_threads = 1
        try:
            session = ort.InferenceSession(
                str(path), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # onnxruntime's errors share no base class but Exception
            raise ScoringModelError(f"cannot load scoring model {path}: {e}") from e
        t0 = time.perf_counter()
        self.input_name, self.dtype, self.feature_count = self._resolve_input(session, config)
        self.output_name = self._resolve_output(session, config)
        self._version = config.model_version or f"{path.stem}@{_sha256(path)[:12]}"
        self._session = session
        self.cold_start.phases_s["model_load"] = time.perf_counter() - t0

    @property
    def model_version(self) -> str:
        return self._version

    def close(self) -> None:
        self._session = None

    def _resolve_input(
        self, session: Any, config: PredictConfig
    ) -> tuple[str, type[np.floating[Any]], int]:
        inputs = {i.name: i for i in session.get_inputs()}
        if config.input_name:
            if config.input_name not in inputs:
                raise ScoringModelError(
                    f"{self.path}: no input {config.input_name!r} (inputs: {sorted(inputs)})"
                )
            spec = inputs[config.input_name]
        elif len(inputs) == 1:
            (spec,) = inputs.values()
        else:
            raise ScoringModelError(
                f"{self.path} has inputs {sorted(inputs)}: set predict.input_name"
            )
        if spec.type not in _INPUT_DTYPES:
            raise ScoringModelError(
                f"{self.path}: input {spec.name!r} is {spec.type}, expected one of "
                f"{sorted(_INPUT_DTYPES)}"
            )
        shape = list(spec.shape)
        if len(shape) != 2:
            raise ScoringModelError(
                f"{self.path}: input {spec.name!r} has shape {shape}, expected [batch, features]"
            )
        graph_width = shape[1] if isinstance(shape[1], int) else None
        width = config.feature_count or graph_width
        if width is None:
            raise ScoringModelError(
                f"{self.path}: input {spec.name!r} has a symbolic feature dimension "
                f"{shape[1]!r}: set predict.feature_count"
            )
        if graph_width is not None and width != graph_width:
            raise ScoringModelError(
                f"predict.feature_count={width}, but {self.path} expects {graph_width} features"
            )
        return spec.name, _INPUT_DTYPES[spec.type], width

    def _resolve_output(self, session: Any, config: PredictConfig) -> str:
        outputs = [o.name for o in session.get_outputs()]
        if not config.output_name:
            return str(outputs[0])
        if config.output_name not in outputs:
            raise ScoringModelError(
                f"{self.path}: no output {config.output_name!r} (outputs: {outputs})"
            )
        return config.output_name

    def _infer(self, batch: Sequence[np.ndarray]) -> np.ndarray:
        """Run one batch.

        Args:
            batch: ``[n, feature_count]`` matrix of the input's dtype, no NaN.

        Returns:
            float32 ``[n, k]``: the output's rows, each flattened.

        Raises:
            BackendError: Not loaded, ONNX Runtime failed, or the output has not one
                row per input.
        """
        session = self._session
        if session is None:
            raise BackendError(f"{type(self).__name__} used before load()")
        features = np.asarray(batch)
        try:
            (out,) = session.run([self.output_name], {self.input_name: features})
        except Exception as e:  # onnxruntime's errors share no base class but Exception
            raise BackendError(f"ONNX Runtime failed: {e}") from e
        result = np.asarray(out)
        if result.ndim == 0 or result.shape[0] != features.shape[0]:
            # Never pad or guess: rows could be misattributed.
            raise BackendError(
                f"output {self.output_name!r} has shape {result.shape} for {features.shape[0]} rows"
            )
        return result.reshape(features.shape[0], -1).astype(np.float32, copy=False)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
