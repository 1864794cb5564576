"""CAD OSE (flinkai.anomaly.cad): encoding, hand-traced steps, learning, state, bad input."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from flinkai.anomaly.cad import (
    BELOW_RANGE_FACT,
    NEURON_FACT_BASE,
    CadConfig,
    CadDetector,
    encode_level,
)
from flinkai.anomaly.errors import DetectorInputError


def _cfg(**kw: object) -> CadConfig:
    return CadConfig(0.0, 7.0, **kw)  # type: ignore[arg-type]


def test_levels_and_facts() -> None:
    det = CadDetector(_cfg())
    # 5 = 0b101: bit 0 set (fact 1), bit 1 clear (fact 2), bit 2 set (fact 5)
    assert det.facts_of(5.0) == (1, 2, 5)
    assert det.facts_of(0.0) == (0, 2, 4)
    assert det.facts_of(7.0) == (1, 3, 5)
    assert det.facts_of(6.99) == (0, 3, 5)  # level 6: a level is floor((x - min) / step)
    # outside the range: more bit positions above, an extra fact below
    assert det.facts_of(8.0) == (0, 2, 4, 7)
    assert det.facts_of(-1.0) == (BELOW_RANGE_FACT, 1, 2, 4)
    assert encode_level(2**80, 3)[-1] == 2 * 61 + 1  # clamped to 62 bit positions
    # a flat range uses step 1, as published
    assert CadConfig(3.0, 3.0).step == 1.0
    assert CadConfig(0.0, 14.0).step == 2.0


def test_first_steps_match_a_hand_trace() -> None:
    # Levels 0 and 7 share no fact, so every context can be followed by hand:
    # 1: nothing stored yet: nothing selected, raw (1 - 0 + 0) / 2 = 0.5
    # 2: (0 -> 7) is a new zero-level context, nothing selected: (1 - 0 + 1/1) / 2 = 1
    # 3: (7 -> 0) new, the left semi-context {7} did not exist at step 2's end: 1
    # 4: (0 -> 7) exists; it is context 0, only considered on novel steps: 0.5
    # 5: (7 -> 0) selected and active: (1 - 1/1 + 0) / 2 = 0
    # 6: left side {0, neuron 1} is new: (0 -> 7) selected and active, added 1/1: 0.5
    det = CadDetector(_cfg(rest_period=1))
    raws, scores = [], []
    for x in (0.0, 7.0, 0.0, 7.0, 0.0, 7.0):
        scores.append(det.update(x))
        raws.append(det.last_raw)
    assert raws == [0.5, 1.0, 1.0, 0.5, 0.0, 0.5]
    # rest: step 1 follows the initial 1.0; steps 3 and 4 follow a raw >= 0.75
    assert scores == [0.0, 1.0, 0.0, 0.0, 0.0, 0.5]
    assert det.context_count == 3

    # control: context 0 treated like any other changes step 4 (selected and active)
    plain = CadDetector(_cfg(rest_period=1, first_context_needs_novelty=False))
    for x in (0.0, 7.0, 0.0):
        plain.update(x)
    plain.update(7.0)
    assert plain.last_raw == 0.0


def _pattern(cycles: int) -> list[float]:
    return [float(v) for v in (0, 2, 4, 6, 4, 2) * cycles]


def test_repeated_pattern_scores_low_and_a_novel_value_high() -> None:
    det = CadDetector(_cfg(rest_period=5))
    scores, raws = [], []
    for x in _pattern(60):
        scores.append(det.update(x))
        raws.append(det.last_raw)
    assert max(raws[:12]) >= 0.75  # still learning at first
    learnt = scores[-60:]
    assert max(learnt) < 0.15, learnt  # was up to 1.0 while learning
    novel = det.update(7.0)  # level 7 never seen, in place of the expected 0
    assert novel >= 0.75
    assert novel > 5 * max(learnt)


def test_snapshot_round_trip_mid_stream_gives_identical_scores() -> None:
    xs = [float(v) for v in np.random.default_rng(3).integers(0, 8, size=120)] + _pattern(20)
    ref = CadDetector(_cfg(rest_period=3))
    want = [ref.update(x) for x in xs]
    for cut in (1, 57, 125, 200):
        det = CadDetector(_cfg(rest_period=3))
        got = [det.update(x) for x in xs[:cut]]
        state = pickle.loads(pickle.dumps(det.snapshot()))
        det = CadDetector.from_snapshot(state, _cfg(rest_period=3))
        got += [det.update(x) for x in xs[cut:]]
        assert got == want, cut
        assert det.snapshot() == ref.snapshot()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "abc", None])
def test_bad_values_are_rejected_and_leave_the_state_alone(bad: object) -> None:
    det, ref = CadDetector(_cfg(rest_period=2)), CadDetector(_cfg(rest_period=2))
    for x in _pattern(3):
        det.update(x)
        ref.update(x)
    with pytest.raises(DetectorInputError, match="value must be"):
        det.update(bad)  # type: ignore[arg-type]
    assert det.snapshot() == ref.snapshot()
    assert [det.update(x) for x in _pattern(2)] == [ref.update(x) for x in _pattern(2)]


def test_bad_settings_and_snapshots_are_rejected() -> None:
    with pytest.raises(DetectorInputError, match="value_max"):
        CadConfig(2.0, 1.0)
    with pytest.raises(DetectorInputError, match="finite"):
        CadConfig(0.0, math.inf)
    with pytest.raises(DetectorInputError, match="rest_period"):
        CadConfig(0.0, 1.0, rest_period=0)
    good = CadDetector(_cfg())
    for x in _pattern(2):
        good.update(x)
    state = good.snapshot()
    with pytest.raises(DetectorInputError, match="version"):
        CadDetector.from_snapshot({**state, "version": 99}, _cfg())
    with pytest.raises(DetectorInputError, match="malformed"):
        CadDetector.from_snapshot({**state, "contexts": state["contexts"][:-1]}, _cfg())
    with pytest.raises(DetectorInputError, match="malformed"):
        CadDetector.from_snapshot({k: v for k, v in state.items() if k != "left"}, _cfg())
    # control: the untouched snapshot is accepted
    assert CadDetector.from_snapshot(state, _cfg()).snapshot() == state


def _noisy(n: int) -> list[float]:
    return np.random.default_rng(11).uniform(0.0, 7.0, n).round(1).tolist()


def test_capped_store_stays_bounded_evicts_lru_and_round_trips() -> None:
    xs = _noisy(400)
    unbounded = CadDetector(_cfg(rest_period=3))
    loose = CadDetector(_cfg(rest_period=3, max_contexts=100_000))
    capped = CadDetector(_cfg(rest_period=3, max_contexts=40))
    ref = CadDetector(_cfg(rest_period=3, max_contexts=40))
    free_scores, loose_scores, capped_scores = [], [], []
    seen_ids: set[int] = set()
    for i, x in enumerate(xs):
        free_scores.append(unbounded.update(x))
        loose_scores.append(loose.update(x))
        if i % 50 == 25:  # the operator's state round trip, at a few cuts
            state = pickle.loads(pickle.dumps(capped.snapshot()))
            capped = CadDetector.from_snapshot(state, _cfg(rest_period=3, max_contexts=40))
        capped_scores.append(capped.update(x))
        assert ref.update(x) == capped_scores[-1]
        assert capped.context_count <= 40
        ids = set(capped.snapshot()["contexts"][0::6])
        # ids only grow: an evicted id never comes back as a new context's
        assert all(c > max(seen_ids, default=-1) for c in ids - seen_ids)
        seen_ids |= ids
    assert capped.snapshot() == ref.snapshot()
    assert unbounded.context_count > 200  # the cap was reached many times over
    # a cap never reached changes nothing; one that evicts changes the scores
    assert loose_scores == free_scores
    assert capped_scores != free_scores
    # the most recently used contexts are the ones kept
    used = capped.snapshot()["contexts"][5::6]
    assert min(used) >= capped.steps - 200


def test_bad_caps_are_rejected() -> None:
    for bad in (-1, 3):
        with pytest.raises(DetectorInputError, match="max_contexts"):
            _cfg(max_contexts=bad)
    assert _cfg(max_contexts=4).max_contexts == 4  # control


def test_snapshot_stores_neuron_facts_as_context_ids_and_still_reads_layout_2() -> None:
    det = CadDetector(_cfg())
    for x in _pattern(6):
        det.update(x)
    state = det.snapshot()
    assert state["version"] == 3
    internal = det._left_facts  # the facts as the detector holds them
    neurons = [f for facts in internal.values() for f in facts if f >= NEURON_FACT_BASE]
    assert neurons  # the pattern made neuron facts, so the packing is exercised
    for row in state["left"]:
        sid, n = row[0], row[1]
        assert tuple(row[2 : 2 + n]) == internal[sid][:n]
        assert all(0 <= c < NEURON_FACT_BASE for c in row[2 + n :])
    # the same state in layout 2 (every fact whole) reads back to the same detector
    old = {
        **state,
        "version": 2,
        "left": [[sid, *facts] for sid, facts in sorted(internal.items())],
        "prev_facts": list(det._prev_facts),
    }
    assert CadDetector.from_snapshot(old, _cfg()).snapshot() == state
    assert len(pickle.dumps(state)) < len(pickle.dumps(old))
    bad = {**state, "left": [[state["left"][0][0], 99]]}
    with pytest.raises(DetectorInputError, match="sensor fact count"):
        CadDetector.from_snapshot(bad, _cfg())
