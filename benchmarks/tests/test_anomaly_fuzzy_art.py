"""The dual-vigilance fuzzy ART network, on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from flinkai_bench.research.anomaly.fuzzy_art import DualVigilanceArt


def _art(lb: float = 0.3, ub: float = 0.9) -> DualVigilanceArt:
    art = DualVigilanceArt(2, lb, ub)
    first = art.train(np.array([0.9, 0.9]))
    # the first input only creates the all-ones category; it is not learnt
    assert (first.new_cluster, first.match, first.energy) == (False, 0.0, 0.0)
    assert art.weights.tolist() == [[1.0, 1.0, 1.0, 1.0]]
    return art


def test_a_poor_match_founds_a_new_cluster() -> None:
    art = _art()
    out = art.train(np.array([0.5, 0.25]))
    # against all-ones: feature 2/4, energy (0.25 + 0.75) / 2; match 0.5^3 * 0.5^2
    assert out.match == pytest.approx(0.03125) and out.energy == pytest.approx(0.5)
    assert out.new_cluster
    assert art.weights[-1].tolist() == [0.5, 0.25, 0.5, 0.75]  # complement-coded


def test_the_same_input_resonates_and_learns() -> None:
    art = _art()
    art.train(np.array([0.5, 0.25]))
    out = art.train(np.array([0.5, 0.25]))
    assert (out.new_cluster, out.match, out.energy) == (False, 1.0, 1.0)
    assert art.categories == 2


def test_a_match_between_the_bounds_founds_a_category_not_a_cluster() -> None:
    art = _art()
    art.train(np.array([0.5, 0.25]))
    out = art.train(np.array([0.5, 0.5]))
    # common [0.5, 0.25, 0.5, 0.5]: feature 1.75 / 2, energy (0.25 + 0.5) / (0.25 + 0.75)
    assert out.match == pytest.approx(0.875**3 * 0.75**2)
    assert out.energy == pytest.approx(0.75)
    assert not out.new_cluster and art.categories == 3
    control = _art(lb=0.5)
    control.train(np.array([0.5, 0.25]))
    assert control.train(np.array([0.5, 0.5])).new_cluster  # below a higher lower bound


def test_every_category_above_the_upper_bound_learns() -> None:
    art = _art(lb=0.0, ub=0.0)  # everything resonates
    art.weights = np.array([[1.0, 1.0, 1.0, 1.0], [0.6, 0.6, 0.2, 0.2]])
    art.last_best = np.array([1, 1])
    out = art.train(np.array([0.5, 0.5]))
    assert not out.new_cluster
    # both categories take min(w, x): the fast commit
    assert art.weights.tolist() == [[0.5, 0.5, 0.5, 0.5], [0.5, 0.5, 0.2, 0.2]]


def test_learn_false_reports_the_match_and_changes_nothing() -> None:
    art = _art()
    art.train(np.array([0.5, 0.25]))
    before = art.weights.copy()
    out = art.train(np.array([0.1, 0.1]), learn=False)
    assert not out.new_cluster and 0.0 < out.match < 1.0
    assert np.array_equal(art.weights, before)


def test_past_the_cap_the_least_recently_best_category_goes() -> None:
    art = DualVigilanceArt(2, 0.99, 0.99, max_categories=3)
    art.train(np.array([0.0, 0.0]))  # the all-ones category
    a, b, c = np.array([0.25, 0.25]), np.array([0.75, 0.75]), np.array([0.5, 0.25])
    assert art.train(a).new_cluster and art.train(b).new_cluster  # 3 categories
    # c's best is a (feature 1.75 / 2, energy 1): a was best at input 4, b at input 3
    assert art.train(c).new_cluster
    assert art.categories == 3
    kept = art.weights.tolist()
    assert kept[0] == [1.0] * 4  # the all-ones category is never dropped
    assert kept[1:] == [[0.25, 0.25, 0.75, 0.75], [0.5, 0.25, 0.5, 0.75]]  # b went
    assert art.last_best.tolist() == [3, 4, 4]
