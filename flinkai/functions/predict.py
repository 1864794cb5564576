"""``predict``: score rows of numeric features with any tabular/tensor ONNX model.

A batch of feature vectors in, a batch of (score, model version, error) out. Each
row is validated on its own (null, wrong length, non-numeric, NaN or infinite
values); bad rows get an error string and stay in the output, in place, so the
SQL job can route them to the dead-letter topic. The valid rows go through one
batched ``session.run``; if that fails, every valid row of the batch carries the
reason instead of the job crashing.

The model is loaded once per worker process and shared by every function
instance there (:func:`flinkai.backends.shared.acquire_scoring_backend`), like the
embedding backends; every model call goes through :class:`OnnxScoringBackend`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from flinkai.backends.errors import BackendError
from flinkai.backends.scoring import OnnxScoringBackend
from flinkai.backends.shared import acquire_scoring_backend, release_scoring_backend
from flinkai.config import PredictConfig
from flinkai.functions.events import Reason

__all__ = ["PredictFunction", "PredictResult"]

log = logging.getLogger(__name__)


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
        self._model: OnnxScoringBackend | None = None

    def open(self) -> None:
        if self._model is None:
            self._model = acquire_scoring_backend(self.config)

    def close(self) -> None:
        if self._model is not None:
            release_scoring_backend(self._model)
            self._model = None

    @property
    def model(self) -> OnnxScoringBackend:
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
                # The version comes back with the scores, as for embeddings.
                # A matrix is the batch of its rows: no copy into a list.
                batch = cast("Sequence[np.ndarray]", matrix[: len(ok)])
                result, version = model.infer_batch(batch)
            except BackendError as e:
                log.warning("scoring batch of %d failed: %s", len(ok), e)
                detail = f"{Reason.INFERENCE_FAILED.value}: {e}"
                for i in ok:
                    errors[i] = detail
            else:
                for row_no, i in enumerate(ok):
                    scores[i] = result[row_no]
                return PredictResult(scores, version, errors)
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
