"""LoRA adapters of the exported decoder: the graph's inputs, the file format, the checks.

A decoder exported with ``--lora-rank R`` takes two extra inputs per adapted module
and layer, with a leading batch axis, so that every row of a batch brings its own
adapter (rows without one bring zeros)::

    lora.{layer}.{module}.a   [rows, in,  R]
    lora.{layer}.{module}.b   [rows, R,  out]     (the LoRA scale alpha/R folded in)

and adds ``x @ a @ b`` to the module's output. Why inputs rather than ONNX Runtime's
own ``RunOptions.add_active_adapter``: that applies one adapter set to a whole run and
does not work with the I/O binding the batched decode step relies on; per-row inputs
keep one forward per step whatever the mix of adapters (S-LoRA's idea, done by
batched matmuls).

An adapter travels as an ONNX Runtime ``.onnx_adapter`` file (flatbuffers, read with
``onnxruntime.AdapterFormat``). Besides the matrices it holds one uint8 tensor,
``flinkai.meta``: JSON with the adapter's name, version, rank, modules and the
``model_version`` of the decoder it was trained for.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort

from flinkai.llm.errors import LlmError

__all__ = [
    "DEFAULT_MODULES",
    "META_PARAM",
    "Adapter",
    "AdapterError",
    "LoraSpec",
]

#: The modules a default export adapts (the LoRA paper's choice).
DEFAULT_MODULES = ("q_proj", "v_proj")
#: The uint8 tensor that carries the adapter's metadata inside the file.
META_PARAM = "flinkai.meta"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class AdapterError(LlmError, ValueError):
    """An adapter that cannot be served; ``reason`` is a short machine-readable word."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def check_adapter_name(name: str) -> str:
    """``name`` if it is a valid adapter name (letters, digits, ``._-``, at most 64)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise AdapterError(
            "invalid_name", f"adapter name {name!r} must match {_NAME.pattern} (at most 64)"
        )
    return name


@dataclass(frozen=True)
class LoraSpec:
    """Which modules of which layers take LoRA inputs, and their rank.

    Attributes:
        rank: The adapters' rank ``R``.
        n_layers: Decoder layers (every one is adapted).
        dims: Module name -> (in features, out features), e.g. ``q_proj: (576, 576)``.
    """

    rank: int
    n_layers: int
    dims: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.rank < 1 or self.n_layers < 1 or not self.dims:
            raise ValueError(f"a LoRA spec needs rank >= 1, layers >= 1 and modules, got {self}")

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(self.dims)

    def names(self) -> list[str]:
        """Graph input / adapter parameter names, in feed order."""
        return [
            f"lora.{layer}.{module}.{ab}"
            for layer in range(self.n_layers)
            for module in self.dims
            for ab in ("a", "b")
        ]

    def shape_of(self, name: str) -> tuple[int, int]:
        """The shape of one parameter (no batch axis)."""
        _, _, module, ab = name.split(".")
        n_in, n_out = self.dims[module]
        return (n_in, self.rank) if ab == "a" else (self.rank, n_out)

    @property
    def nbytes(self) -> int:
        """Bytes of one adapter's matrices in fp32."""
        return 4 * sum(int(np.prod(self.shape_of(n))) for n in self.names())

    def zeros(self) -> dict[str, np.ndarray]:
        """The no-adapter row: every matrix zero, so ``x @ a @ b`` adds exactly 0."""
        return {n: np.zeros(self.shape_of(n), dtype=np.float32) for n in self.names()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "n_layers": self.n_layers,
            "dims": {m: list(d) for m, d in self.dims.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoraSpec:
        dims = {str(m): (int(d[0]), int(d[1])) for m, d in data["dims"].items()}
        return cls(rank=int(data["rank"]), n_layers=int(data["n_layers"]), dims=dims)


@dataclass(frozen=True)
class Adapter:
    """One version of a named adapter.

    Attributes:
        name: The adapter's name (what events ask for).
        version: Its version, increasing per name.
        base_model: ``model_version`` of the decoder it was trained for.
        rank: Its rank.
        params: Parameter name -> fp32 matrix, as :meth:`LoraSpec.names` lists them.
        extra: Free metadata (training step, examples seen...).
    """

    name: str
    version: int
    base_model: str
    rank: int
    params: Mapping[str, np.ndarray]
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        """``name@version``: what completions record and what snapshot keys carry."""
        return f"{self.name}@{self.version}"

    @property
    def nbytes(self) -> int:
        return sum(int(p.nbytes) for p in self.params.values())

    def meta(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "base_model": self.base_model,
            "rank": self.rank,
            "extra": dict(self.extra),
        }

    def encode(self) -> bytes:
        """The ``.onnx_adapter`` bytes (the same adapter always gives the same bytes)."""
        fmt = ort.AdapterFormat()
        fmt.set_adapter_version(int(self.version))
        fmt.set_model_version(0)  # the base model is named in the metadata (a hash, not an int)
        meta = json.dumps(self.meta(), sort_keys=True).encode()
        values = {
            META_PARAM: ort.OrtValue.ortvalue_from_numpy(np.frombuffer(meta, np.uint8).copy())
        }
        for name in sorted(self.params):
            arr = np.ascontiguousarray(self.params[name], dtype=np.float32)
            values[name] = ort.OrtValue.ortvalue_from_numpy(arr)
        fmt.set_parameters(values)
        # ONNX Runtime writes adapters to a path only.
        fd, path = tempfile.mkstemp(suffix=".onnx_adapter")
        os.close(fd)
        try:
            fmt.export_adapter(path)
            with open(path, "rb") as f:
                return f.read()
        finally:
            os.unlink(path)

    @classmethod
    def decode(cls, data: bytes) -> Adapter:
        """Parse ``.onnx_adapter`` bytes.

        Raises:
            AdapterError: ``malformed`` (truncated or not an adapter file, no metadata).
        """
        fd, path = tempfile.mkstemp(suffix=".onnx_adapter")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            try:
                fmt = ort.AdapterFormat.read_adapter(path)
                values = {k: np.array(v.numpy()) for k, v in fmt.get_parameters().items()}
            except Exception as e:  # ORT raises RuntimeError for a bad buffer
                raise AdapterError(
                    "malformed", f"{len(data)} bytes are not an .onnx_adapter file: {e}"
                ) from e
        finally:
            os.unlink(path)
        raw = values.pop(META_PARAM, None)
        if raw is None:
            raise AdapterError("malformed", f"the adapter file has no {META_PARAM} tensor")
        try:
            meta = json.loads(bytes(raw.astype(np.uint8)).decode())
            return cls(
                name=check_adapter_name(str(meta["name"])),
                version=int(meta["version"]),
                base_model=str(meta["base_model"]),
                rank=int(meta["rank"]),
                params=values,
                extra=dict(meta.get("extra", {})),
            )
        except AdapterError:
            raise
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise AdapterError("malformed", f"bad {META_PARAM}: {type(e).__name__}: {e}") from e

    def check(self, spec: LoraSpec, base_model: str) -> None:
        """Raise :class:`AdapterError` unless this adapter fits a decoder of ``spec``.

        Reasons: ``base_model_mismatch``, ``rank_mismatch``, ``missing_params``,
        ``unexpected_params``, ``shape_mismatch``, ``not_finite``.
        """
        if self.base_model != base_model:
            raise AdapterError(
                "base_model_mismatch",
                f"{self.tag} was trained for model {self.base_model}; this decoder is {base_model}",
            )
        if self.rank != spec.rank:
            raise AdapterError(
                "rank_mismatch", f"{self.tag} has rank {self.rank}; the decoder takes {spec.rank}"
            )
        want = set(spec.names())
        missing, extra = sorted(want - set(self.params)), sorted(set(self.params) - want)
        if missing:
            raise AdapterError("missing_params", f"{self.tag} lacks {missing[:3]} ({len(missing)})")
        if extra:
            raise AdapterError("unexpected_params", f"{self.tag} has {extra[:3]} ({len(extra)})")
        for name in spec.names():
            arr = self.params[name]
            if tuple(arr.shape) != spec.shape_of(name):
                raise AdapterError(
                    "shape_mismatch",
                    f"{self.tag}: {name} is {tuple(arr.shape)}, expected {spec.shape_of(name)}",
                )
            if not np.isfinite(arr).all():
                raise AdapterError("not_finite", f"{self.tag}: {name} holds NaN or inf")
