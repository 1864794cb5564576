"""The LSTM + attention forecaster in torch: full-window training forward and the ONNX step.

Offline only (needs the ``torch`` extra); the job runs the exported step with ONNX
Runtime (:mod:`flinkai.anomaly.step`).

Architecture (:class:`Forecaster`), per time step ``t`` with input ``x_t``:

1. ``h_t = LSTM(x_t, h_{t-1})``: local dependencies.
2. ``hybrid`` only: a pre-norm causal self-attention layer over the last ``window``
   LSTM outputs, ``a_t = h_t + Attn(LN(h_t), LN(h_{t-W+1..t}))``, then a
   feed-forward layer, ``u_t = a_t + FF(LN(a_t))``: long periodic patterns (the time
   features in ``x`` let a query find the same phase a day earlier). Both are
   residual, so the LSTM path is kept and attention adds to it. With
   ``spec.gate`` each residual branch is scaled by a learned scalar that starts
   at 0 (``a_t = h_t + g_a Attn(...)``, ``u_t = a_t + g_f FF(...)``): the model
   starts as the LSTM-only forecaster.
3. ``y_t = Linear(u_t)``: the forecast of the next normalised value.

:meth:`Forecaster.forward` runs a whole sequence with a banded causal mask (each
step sees at most ``window`` steps, itself included). :class:`StepModule` computes
the same thing one step at a time: the LSTM state and the attention keys/values
of the last ``window`` steps (the KV cache, with a 0/1 validity mask) go in and
come out, so each new point costs one step.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from flinkai.anomaly.spec import ModelSpec

__all__ = ["Forecaster", "StepModule", "band_mask", "step_input_names", "step_output_names"]


def band_mask(length: int, window: int) -> Tensor:
    """Boolean ``[length, length]``: ``True`` where step ``i`` may attend to step ``j``."""
    i = torch.arange(length).unsqueeze(1)
    j = torch.arange(length).unsqueeze(0)
    return (j <= i) & (j > i - window)


class Forecaster(nn.Module):
    """One-step-ahead forecaster (see the module docstring).

    Args:
        spec: Model shape.
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        h, a = spec.hidden, spec.attn_dim
        self.lstm = nn.LSTM(spec.n_features, h, batch_first=True)
        if spec.has_attention:
            self.norm_attn = nn.LayerNorm(h)
            self.query = nn.Linear(h, a)
            self.key = nn.Linear(h, a)
            self.value = nn.Linear(h, a)
            self.out = nn.Linear(a, h)
            self.norm_ff = nn.LayerNorm(h)
            self.ff = nn.Sequential(nn.Linear(h, 2 * h), nn.GELU(), nn.Linear(2 * h, h))
            if spec.gate:
                # Zero at the start: the attention branch opens only as far as it helps.
                self.gate_attn = nn.Parameter(torch.zeros(1))
                self.gate_ff = nn.Parameter(torch.zeros(1))
        self.head = nn.Linear(h, 1)

    def _split(self, t: Tensor) -> Tensor:
        # [B, T, A] -> [B, heads, T, A / heads]
        b, n, _ = t.shape
        return t.view(b, n, self.spec.heads, -1).transpose(1, 2)

    def scale_attn(self, t: Tensor) -> Tensor:
        """The attention branch's residual, gated when ``spec.gate``."""
        return t * self.gate_attn if self.spec.gate else t

    def scale_ff(self, t: Tensor) -> Tensor:
        """The feed-forward branch's residual, gated when ``spec.gate``."""
        return t * self.gate_ff if self.spec.gate else t

    def forward(self, x: Tensor) -> Tensor:
        """Forecasts for every step of ``x`` (``[B, T, F]``), shape ``[B, T]``."""
        hs, _ = self.lstm(x)
        if self.spec.has_attention:
            z = self.norm_attn(hs)
            q, k, v = (self._split(m(z)) for m in (self.query, self.key, self.value))
            allowed = band_mask(x.shape[1], self.spec.window).to(x.device)
            # The fused kernel: same softmax(q k^T / sqrt(d)) v under the band mask,
            # about half the time and memory of the explicit [B, heads, T, T] scores.
            att = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
            att = att.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
            hs = hs + self.scale_attn(self.out(att))
            hs = hs + self.scale_ff(self.ff(self.norm_ff(hs)))
        out: Tensor = self.head(hs).squeeze(-1)
        return out


def step_input_names(spec: ModelSpec) -> list[str]:
    """ONNX input names of the step model, in order."""
    return ["x", "h", "c", "k", "v", "mask"] if spec.has_attention else ["x", "h", "c"]


def step_output_names(spec: ModelSpec) -> list[str]:
    """ONNX output names of the step model: the forecast, then the new state."""
    return ["y"] + [f"{n}_out" for n in step_input_names(spec)[1:]]


class StepModule(nn.Module):
    """One streaming step of a :class:`Forecaster`, sharing its weights.

    Inputs: ``x [1, F]``, ``h [1, H]``, ``c [1, H]`` and for ``hybrid`` also
    ``k [W, A]``, ``v [W, A]`` (the KV cache, oldest first) and ``mask [W]`` (1.0
    where the cache holds a real step). Outputs: the forecast ``y [1]`` and the
    new state, the cache shifted by one with this step's key and value appended.
    """

    def __init__(self, model: Forecaster) -> None:
        super().__init__()
        self.model = model

    def _lstm_cell(self, x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        lstm = self.model.lstm
        w_ih, w_hh = lstm.get_parameter("weight_ih_l0"), lstm.get_parameter("weight_hh_l0")
        b_ih, b_hh = lstm.get_parameter("bias_ih_l0"), lstm.get_parameter("bias_hh_l0")
        gates = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
        i, f, g, o = gates.chunk(4, dim=-1)  # torch's gate order
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        return h_new, c_new

    def forward(self, x: Tensor, h: Tensor, c: Tensor, *cache: Tensor) -> Any:
        m, spec = self.model, self.model.spec
        h_new, c_new = self._lstm_cell(x, h, c)
        u = h_new
        if not spec.has_attention:
            return m.head(u).reshape(1), h_new, c_new
        k_cache, v_cache, mask = cache
        z = m.norm_attn(h_new)
        k_all = torch.cat([k_cache[1:], m.key(z)], dim=0)
        v_all = torch.cat([v_cache[1:], m.value(z)], dim=0)
        mask_new = torch.cat([mask[1:], torch.ones(1, dtype=mask.dtype)], dim=0)
        d = spec.attn_dim // spec.heads
        q = m.query(z).reshape(spec.heads, 1, d)
        kh = k_all.reshape(spec.window, spec.heads, d).transpose(0, 1)
        vh = v_all.reshape(spec.window, spec.heads, d).transpose(0, 1)
        scores = q @ kh.transpose(-1, -2) / math.sqrt(d)
        # A large negative bias, not -inf: an all-masked row cannot happen (this
        # step is always valid), and ONNX Runtime keeps it finite.
        scores = scores + (1.0 - mask_new) * -1e9
        att = (torch.softmax(scores, dim=-1) @ vh).reshape(1, spec.attn_dim)
        u = u + m.scale_attn(m.out(att))
        u = u + m.scale_ff(m.ff(m.norm_ff(u)))
        return m.head(u).reshape(1), h_new, c_new, k_all, v_all, mask_new
