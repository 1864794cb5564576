"""A dual-vigilance fuzzy ART network, in the compact form ARTime uses.

Fuzzy ART (Carpenter, Grossberg and Rosen, 1991) keeps one weight vector per
category over complement-coded inputs ``[x, 1 - x]``; learning is the fast commit
``w = min(w, x)``. The dual-vigilance form (da Silva, Elnabarawy and Wunsch, 2019)
has two thresholds on the match:

* at or above ``rho_ub`` the category resonates and learns the input;
* between ``rho_lb`` and ``rho_ub`` the input founds a new category of the best
  one's cluster (no new cluster);
* below ``rho_lb`` the input founds a new cluster.

ARTime's variant, reproduced here: the match is ``feature^3 * energy^2``, where
``feature`` is the usual ``|min(x, w)| / |w|`` and ``energy`` the same ratio over the
input's last feature and its complement only (the newest sample); every category
above ``rho_ub`` learns, not just the best; the network starts with one all-ones
category and its first input is recorded with match 0 and not learnt.

ARTime never drops a category, so its weights grow with the series' variety (up to
831 categories, 213 KB, on one NAB file). ``max_categories`` bounds them for a
per-key state budget: past the cap, the category that was least recently the best
match is dropped (never the all-ones one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DualVigilanceArt", "TrainResult"]

#: Norm used for an all-zero category weight (avoids dividing by zero).
_ZERO_NORM = 0.001


@dataclass(frozen=True)
class TrainResult:
    """One input's outcome.

    Attributes:
        new_cluster: The input founded a new cluster (matched no category at ``rho_lb``).
        match: The best category's match (0 for the very first input).
        energy: The best category's energy similarity.
    """

    new_cluster: bool
    match: float
    energy: float


class DualVigilanceArt:
    """Categories over ``dim`` features in ``[0, 1]``; see the module docstring."""

    def __init__(
        self, dim: int, rho_lb: float = 0.0, rho_ub: float = 0.0, max_categories: int = 0
    ) -> None:
        self.dim = dim
        self.rho_lb = rho_lb
        self.rho_ub = rho_ub
        self.max_categories = max_categories  # 0: unbounded
        self.weights = np.empty((0, 2 * dim))
        # per category, the input count when it was last the best match (or was made)
        self.last_best = np.empty(0, dtype=np.int64)
        self.inputs = 0

    @property
    def categories(self) -> int:
        """Categories held, the initial all-ones one included."""
        return len(self.weights)

    def train(self, features: np.ndarray, learn: bool = True) -> TrainResult:
        """Present one input; learn from it unless ``learn`` is false."""
        x = np.concatenate([features, 1.0 - features])
        self.inputs += 1
        if not len(self.weights):
            self.weights = np.ones((1, 2 * self.dim))
            self.last_best = np.array([self.inputs], dtype=np.int64)
            return TrainResult(False, 0.0, 0.0)
        w = self.weights
        common = np.minimum(w, x)
        norm = w.sum(axis=1)
        norm[norm == 0] = _ZERO_NORM
        feature = common.sum(axis=1) / norm
        last, comp = self.dim - 1, 2 * self.dim - 1
        with np.errstate(invalid="ignore", divide="ignore"):
            energy = (common[:, last] + common[:, comp]) / (w[:, last] + w[:, comp])
        energy = np.nan_to_num(energy, nan=0.0)
        match = feature * feature * feature * (energy * energy)
        best = int(np.argmax(match))  # the first of equal matches, as a stable sort
        self.last_best[best] = self.inputs
        top, top_energy = (float(match[best]), float(energy[best]))
        if top <= 0.0:
            top, top_energy = 0.0, 0.0
        if not learn:
            return TrainResult(False, top, top_energy)
        if top >= self.rho_ub:
            resonant = match >= self.rho_ub
            self.weights[resonant] = common[resonant]
            return TrainResult(False, top, top_energy)
        # no resonance: a new category, in the best one's cluster or a cluster of its own
        self.weights = np.vstack([w, x])
        self.last_best = np.append(self.last_best, self.inputs)
        if self.max_categories and len(self.weights) > self.max_categories:
            stale = 1 + int(np.argmin(self.last_best[1:]))  # the all-ones category stays
            self.weights = np.delete(self.weights, stale, axis=0)
            self.last_best = np.delete(self.last_best, stale)
        return TrainResult(top < self.rho_lb, top, top_energy)
