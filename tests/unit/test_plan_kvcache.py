"""KV-cache planner: the formula, the GQA correction and the L9 design."""

from __future__ import annotations

import itertools

import pytest

from flinkai.plan import PlanError
from flinkai.plan.kvcache import (
    L9,
    L9_FACTORS,
    MINILM_L6,
    SMOLLM2_135M,
    kv_cache_bytes,
    kv_cache_bytes_gqa,
    kv_heads_per_device,
    l9_design,
)


def test_formula_at_fp16_is_seq_hidden_layers_two_two_bytes() -> None:
    assert kv_cache_bytes(1024, 576, 30) == 1024 * 576 * 30 * 2 * 2


def test_formula_scales_by_tp_compression_and_bits() -> None:
    base = kv_cache_bytes(512, 384, 6)
    assert kv_cache_bytes(512, 384, 6, tp=4) == base / 4
    assert kv_cache_bytes(512, 384, 6, compression=0.5) == base / 2
    assert kv_cache_bytes(512, 384, 6, bits=8) == base / 2
    assert kv_cache_bytes(512, 384, 6, bits=6) == base * 6 / 16
    assert kv_cache_bytes(512, 384, 6, batch=3) == base * 3


def test_gqa_correction_is_three_times_for_smollm2() -> None:
    assert SMOLLM2_135M.kv_width == 192
    assert SMOLLM2_135M.formula_overstatement == 3.0
    formula = kv_cache_bytes(1024, SMOLLM2_135M.hidden, SMOLLM2_135M.n_layers, bits=32)
    true = kv_cache_bytes_gqa(SMOLLM2_135M, 1024, bits=32)
    assert formula / true == 3.0
    # 1,024 tokens in fp32: about 47 MB (46 KB per token)
    assert true == 1024 * 3 * 64 * 30 * 2 * 4 == pytest.approx(47.2e6, rel=0.01)


def test_without_gqa_both_agree() -> None:
    assert MINILM_L6.formula_overstatement == 1.0
    assert kv_cache_bytes_gqa(MINILM_L6, 300, bits=8, tp=2) == kv_cache_bytes(
        300, MINILM_L6.hidden, MINILM_L6.n_layers, bits=8, tp=2
    )


def test_tp_splits_whole_kv_heads() -> None:
    assert [kv_heads_per_device(3, tp) for tp in (1, 2, 3, 4)] == [3, 2, 1, 1]
    # 3 KV heads on TP 2: the busiest device holds 2 of 3, not half
    one = kv_cache_bytes_gqa(SMOLLM2_135M, 512)
    assert kv_cache_bytes_gqa(SMOLLM2_135M, 512, tp=2) == one * 2 / 3


@pytest.mark.parametrize("bad", [{"seq_len": -1}, {"tp": 0}, {"compression": 0}, {"bits": 0}])
def test_nonsense_settings_are_refused(bad: dict[str, float]) -> None:
    settings = {"seq_len": 8, "tp": 1, "compression": 1.0, "bits": 16, **bad}
    with pytest.raises(PlanError):
        kv_cache_bytes(
            int(settings["seq_len"]),
            64,
            2,
            bits=int(settings["bits"]),
            tp=int(settings["tp"]),
            compression=settings["compression"],
        )


def test_l9_is_orthogonal() -> None:
    assert len(L9) == 9
    for a, b in itertools.combinations(range(4), 2):
        pairs = sorted((row[a], row[b]) for row in L9)
        assert pairs == sorted(itertools.product(range(3), repeat=2))


def test_l9_design_maps_the_issue_factors() -> None:
    runs = l9_design()
    assert len(runs) == 9 and set(runs[0]) == set(L9_FACTORS)
    for name, levels in L9_FACTORS.items():
        # every level of every factor appears three times
        assert sorted(map(str, (r[name] for r in runs))) == sorted(map(str, levels * 3))
    assert runs[0] == {"compression": 0.5, "tp": 1, "precision": "int8", "seq_len": 512}


def test_l9_design_leaves_missing_columns_out_and_checks_levels() -> None:
    runs = l9_design({"a": (1, 2, 3), "b": ("x", "y", "z")})
    assert {tuple(r) for r in runs} == {("a", "b")}
    assert len({(r["a"], r["b"]) for r in runs}) == 9
    with pytest.raises(PlanError, match="three levels"):
        l9_design({"a": (1, 2)})
    with pytest.raises(PlanError, match="four columns"):
        l9_design({k: (1, 2, 3) for k in "abcde"})
