"""``predict``: score rows of numeric features with any tabular/tensor ONNX model.

A batch of feature vectors in, a batch of (score, model version, error) out. Each
row is validated on its own (null, wrong length, non-numeric, NaN or infinite
values); bad rows get an error string and stay in the output, in place, so the
SQL job can route them to the dead-letter topic. The valid rows go through one
batched ``session.run``; if that fails, every valid row of the batch carries the
reason instead of the job crashing.

The model is loaded once per worker process and shared by every function
instance there (see :func:`acquire_scoring_model`), like the embedding backends.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.config import PredictConfig
from flinkai.errors import ConfigError
from flinkai.functions.errors import ScoringModelError
from flinkai.functions.events import Reason
from flinkai.sharing import SharedPool

__all__ = [
    "PredictFunction",
    "PredictResult",
    "ScoringModel",
    "acquire_scoring_model",
    "live_scoring_models",
    "release_scoring_model",
]

log = logging.getLogger(__name__)

#: ONNX tensor element types the function can feed, as ``session.get_inputs()`` spells them.
_INPUT_DTYPES: dict[str, type[np.floating[Any]]] = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
}


@dataclass(frozen=True)
class PredictResult:
    """Column-wise result of one batch; ``errors[i]`` is None when row i was scored.

    Attributes:
        scores: One float32 vector per row (the model output's row, flattened), or
            None for a failed row.
        model_version: The version of the model that produced the scores.
        errors: ``"<reason>: <detail>"`` per failed row, None per scored row.
    """

    scores: list[np.ndarray | None]
    model_version: str
    errors: list[str | None]


class ScoringModel:
    """One ONNX Runtime session for a :class:`PredictConfig`.

    Args:
        config: Model path, tensor names and expected feature count.

    Raises:
        ConfigError: ``config.model_path`` is empty or ``feature_count`` is negative.
        ScoringModelError: The file is missing, not loadable, or its input/output do
            not match the config.
    """

    def __init__(self, config: PredictConfig) -> None:
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
        self.config = config
        self.path = path
        self._session = session
        self.input_name, self.dtype, self.feature_count = self._resolve_input(session, config)
        self.output_name = self._resolve_output(session, config)
        self.model_version = config.model_version or f"{path.stem}@{_sha256(path)[:12]}"

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

    def score(self, features: np.ndarray) -> np.ndarray:
        """Run one batch.

        Args:
            features: ``[n, feature_count]`` matrix of the input's dtype, no NaN.

        Returns:
            float32 ``[n, k]``: the output's rows, each flattened.

        Raises:
            RuntimeError: ONNX Runtime failed, or the output has not one row per input.
        """
        try:
            (out,) = self._session.run([self.output_name], {self.input_name: features})
        except Exception as e:  # onnxruntime's errors share no base class but Exception
            raise RuntimeError(f"ONNX Runtime failed: {e}") from e
        result = np.asarray(out)
        if result.ndim == 0 or result.shape[0] != features.shape[0]:
            # Never pad or guess: rows could be misattributed.
            raise RuntimeError(
                f"output {self.output_name!r} has shape {result.shape} for {features.shape[0]} rows"
            )
        return result.reshape(features.shape[0], -1).astype(np.float32, copy=False)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# -- one model per process ---------------------------------------------------------------


_pool: SharedPool[PredictConfig, ScoringModel] = SharedPool(what="scoring model")


def acquire_scoring_model(config: PredictConfig) -> ScoringModel:
    """The process's model for ``config``, loaded on first use.

    Several UDF instances in one Python worker (chained operators, several queries)
    then share one session instead of each loading the model.
    """
    return _pool.acquire(config, lambda: ScoringModel(config))


def release_scoring_model(model: ScoringModel) -> None:
    """Give a model back; the last release drops the session.

    Raises:
        ValueError: ``model`` is not held (released twice, or never acquired).
    """
    _pool.release(model)


def live_scoring_models() -> int:
    """How many models this process holds (for tests and diagnostics)."""
    return len(_pool)


# -- the function ------------------------------------------------------------------------


class PredictFunction:
    """Holds a shared scoring model between ``open`` and ``close``; call it per batch.

    Args:
        config: The model to run.

    Example:
        >>> fn = PredictFunction(PredictConfig(model_path="model.onnx"))  # doctest: +SKIP
        >>> fn.open()  # doctest: +SKIP
        >>> fn([[0.1, 0.2, 0.3], None]).errors  # doctest: +SKIP
        [None, 'invalid_field: features is null']
    """

    def __init__(self, config: PredictConfig) -> None:
        self.config = config
        self._model: ScoringModel | None = None

    def open(self) -> None:
        if self._model is None:
            self._model = acquire_scoring_model(self.config)

    def close(self) -> None:
        if self._model is not None:
            release_scoring_model(self._model)
            self._model = None

    @property
    def model(self) -> ScoringModel:
        if self._model is None:
            raise RuntimeError("PredictFunction used before open()")
        return self._model

    def __call__(self, rows: Sequence[object]) -> PredictResult:
        """Score a batch.

        Args:
            rows: One feature vector per row (list or array of numbers); anything else,
                None included, becomes that row's error.

        Returns:
            Scores and errors in input order, one per row.
        """
        model = self.model
        n = len(rows)
        scores: list[np.ndarray | None] = [None] * n
        errors: list[str | None] = [None] * n
        matrix = np.empty((n, model.feature_count), dtype=model.dtype)
        ok: list[int] = []
        for i, row in enumerate(rows):
            problem = _check_row(row, model.feature_count, matrix, len(ok))
            if problem is None:
                ok.append(i)
            else:
                errors[i] = f"{Reason.INVALID_FIELD.value}: {problem}"
        if ok:
            try:
                result = model.score(matrix[: len(ok)])
            except RuntimeError as e:
                log.warning("scoring batch of %d failed: %s", len(ok), e)
                detail = f"{Reason.INFERENCE_FAILED.value}: {e}"
                for i in ok:
                    errors[i] = detail
            else:
                for row_no, i in enumerate(ok):
                    scores[i] = result[row_no]
        return PredictResult(scores, model.model_version, errors)


def _check_row(row: object, width: int, matrix: np.ndarray, slot: int) -> str | None:
    """Validate one row and copy it into ``matrix[slot]``; the problem, or None if valid."""
    if row is None:
        return "features is null"
    try:
        # In the model's dtype, so a float64 value too large for float32 shows up as inf.
        with np.errstate(over="ignore"):
            values = np.asarray(row, dtype=matrix.dtype)
    except (TypeError, ValueError) as e:
        return f"features are not numeric ({e})"
    if values.ndim != 1:
        return f"features must be a flat array, got shape {values.shape}"
    if values.shape[0] != width:
        return f"expected {width} features, got {values.shape[0]}"
    finite = np.isfinite(values)
    if not finite.all():
        # Name the first offender: that is what someone fixing the producer needs.
        bad = int(np.argmin(finite))
        kind = "NaN" if math.isnan(float(values[bad])) else "infinite value"
        return f"{kind} at feature {bad}"
    matrix[slot] = values
    return None
