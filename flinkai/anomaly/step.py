"""The exported forecaster step under ONNX Runtime: no torch at run time.

:class:`StepModel` loads ``step.onnx`` and ``meta.json`` from a model folder
(:mod:`flinkai.anomaly.spec`) and runs one step: the recurrent state goes in and
comes out as plain ``float32`` arrays (:class:`RecurrentState`), which the caller
keeps per key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from flinkai.anomaly.errors import AnomalyModelError
from flinkai.anomaly.spec import ONNX_FILE, ModelSpec, read_meta

__all__ = ["RecurrentState", "StepModel"]

F32 = npt.NDArray[np.float32]


@dataclass
class RecurrentState:
    """A key's model state: LSTM ``h``/``c`` and, for attention, the KV cache.

    Attributes:
        h: LSTM hidden state ``[1, H]``.
        c: LSTM cell state ``[1, H]``.
        k: Attention keys of the last ``window`` steps ``[W, A]`` (hybrid only).
        v: Attention values ``[W, A]`` (hybrid only).
        filled: Cache rows that hold real steps (the newest ``filled`` rows).
    """

    h: F32
    c: F32
    k: F32 | None = None
    v: F32 | None = None
    filled: int = 0

    @classmethod
    def zeros(cls, spec: ModelSpec) -> RecurrentState:
        h = np.zeros((1, spec.hidden), np.float32)
        if not spec.has_attention:
            return cls(h, h.copy())
        kv = np.zeros((spec.window, spec.attn_dim), np.float32)
        return cls(h, h.copy(), kv, kv.copy(), 0)

    def mask(self, window: int) -> F32:
        """The 0/1 validity mask the step model takes (newest rows last)."""
        m = np.zeros(window, np.float32)
        if self.filled:
            m[window - self.filled :] = 1.0
        return m

    def snapshot(self) -> dict[str, Any]:
        """Plain data: arrays as little-endian ``float32`` bytes with their shapes."""
        out: dict[str, Any] = {"filled": self.filled}
        for name in ("h", "c", "k", "v"):
            arr = getattr(self, name)
            out[name] = None if arr is None else (list(arr.shape), arr.astype("<f4").tobytes())
        return out

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any], spec: ModelSpec) -> RecurrentState:
        """Rebuild; a snapshot that does not fit ``spec`` gives a fresh state.

        Raises:
            KeyError: A field is missing.
        """
        arrays: dict[str, F32 | None] = {}
        for name in ("h", "c", "k", "v"):
            item = snap[name]
            arrays[name] = (
                None
                if item is None
                else np.frombuffer(item[1], dtype="<f4").reshape(item[0]).astype(np.float32)
            )
        state = cls(arrays["h"], arrays["c"], arrays["k"], arrays["v"], int(snap["filled"]))  # type: ignore[arg-type]
        return state if state.fits(spec) else cls.zeros(spec)

    def fits(self, spec: ModelSpec) -> bool:
        """Whether the arrays have the shapes ``spec`` asks for."""
        ok = (
            self.h is not None and self.h.shape == (1, spec.hidden) and self.c.shape == self.h.shape
        )
        if spec.has_attention:
            shape = (spec.window, spec.attn_dim)
            return ok and self.k is not None and self.v is not None and self.k.shape == shape \
                and self.v.shape == shape and 0 <= self.filled <= spec.window  # fmt: skip
        return ok and self.k is None


class StepModel:
    """One forecaster step in ONNX Runtime.

    Args:
        folder: A model folder with ``step.onnx`` and ``meta.json``.
        threads: ONNX Runtime intra-op threads (1: a step is far too small to split).

    Raises:
        AnomalyModelError: The folder holds no model or it cannot be loaded.
    """

    def __init__(self, folder: Path, threads: int = 1) -> None:
        import onnxruntime as ort

        meta = read_meta(folder)
        self.folder = folder
        self.spec = meta.spec
        self.model_version = meta.model_version
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        try:
            self._session = ort.InferenceSession(
                str(folder / ONNX_FILE), options, providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # onnxruntime raises its own untyped errors
            raise AnomalyModelError(f"cannot load {folder / ONNX_FILE}: {e}") from e
        self._outputs = [o.name for o in self._session.get_outputs()]

    def step(self, x: F32, state: RecurrentState) -> tuple[float, RecurrentState]:
        """Run one step.

        Args:
            x: One input row ``[F]`` (:func:`flinkai.anomaly.features.feature_row`).
            state: The key's state before this step.

        Returns:
            The forecast of the next normalised value and the state after this step.
        """
        feeds: dict[str, F32] = {"x": x.reshape(1, -1), "h": state.h, "c": state.c}
        spec = self.spec
        if spec.has_attention:
            assert state.k is not None and state.v is not None
            feeds.update(k=state.k, v=state.v, mask=state.mask(spec.window))
        out = self._session.run(self._outputs, feeds)
        y = float(out[0][0])
        if not spec.has_attention:
            return y, RecurrentState(out[1], out[2])
        return y, RecurrentState(out[1], out[2], out[3], out[4], min(state.filled + 1, spec.window))
