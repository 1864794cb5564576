"""The pure parts of ``benchmarks/gpu/check.py``: length sampling, KV break-even, device choice."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

CHECK = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "check.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", CHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


check = _load()


def test_committed_histogram_is_the_ag_news_corpus() -> None:
    sampler = check.LengthSampler.from_file()
    draw = sampler.sample(2000, seed=1)
    assert draw == sampler.sample(2000, seed=1)
    assert draw != sampler.sample(2000, seed=2)
    assert min(draw) >= 19 and max(draw) <= 256
    # AG News title + description: a few dozen tokens on average, not uniform noise
    assert 40 < sampler.mean() < 80
    assert abs(sum(draw) / len(draw) - sampler.mean()) < 3


def test_lengths_over_the_model_limit_are_capped() -> None:
    sampler = check.LengthSampler({10: 1, 300: 3}, max_seq_length=256)
    assert set(sampler.sample(200, seed=0)) == {10, 256}
    assert sampler.mean() == pytest.approx((10 + 3 * 256) / 4)


@pytest.mark.parametrize("histogram", [{}, {0: 5}, {12: -1}, {12: 0}])
def test_bad_histogram_is_refused(histogram: dict[int, int]) -> None:
    with pytest.raises(ValueError):
        check.LengthSampler(histogram, 256)


def test_sorting_within_the_window_cuts_padding() -> None:
    lengths = [10, 100, 12, 98, 11, 97, 13, 99]
    arrival = check.round_windows(lengths, 2, "arrival")
    ordered = check.round_windows(lengths, 2, "sorted")
    assert arrival[0] == [10, 100] and ordered[0] == [10, 11]
    flat = sorted(lengths)
    assert sorted(n for b in arrival for n in b) == sorted(n for b in ordered for n in b) == flat
    assert check.padded_fraction(ordered) < 0.05 < check.padded_fraction(arrival)
    with pytest.raises(ValueError):
        check.round_windows(lengths, 3, "arrival")
    with pytest.raises(ValueError):
        check.round_windows(lengths, 2, "random")


def test_kv_bytes_per_token_of_smollm2() -> None:
    assert check.kv_bytes_per_token(30, 3, 64, 2) == 23_040
    assert check.kv_bytes_per_token(30, 3, 64, 4) == 46_080
    assert check.HEAD_DIM == 64


def test_break_even_bandwidth() -> None:
    # 23,040 bytes per token, 0.01 ms per token of prefill: 2.304 GB/s to break even
    assert check.break_even_gb_s(23_040, 0.01) == pytest.approx(2.304)
    assert check.break_even_gb_s(46_080, 1.3) == pytest.approx(0.035446, rel=1e-4)
    with pytest.raises(ValueError):
        check.break_even_gb_s(23_040, 0.0)


def _result() -> dict[str, Any]:
    enc = [
        {"dtype": "fp32", "batch": 32, "order": "arrival", "texts_per_s_median": 900.0},
        {"dtype": "fp16", "batch": 256, "order": "sorted", "texts_per_s_median": 5000.0},
        {"dtype": "fp16", "batch": 32, "order": "sorted", "texts_per_s_median": 2000.0},
        {"dtype": "bf16", "batch": 512, "order": "sorted", "skipped": "time budget spent"},
    ]
    dec = [
        {"dtype": "fp32", "prompt_tokens": 1024, "prefill_ms_per_token": 0.02},
        {"dtype": "bf16", "prompt_tokens": 1024, "prefill_ms_per_token": 0.01},
        {"dtype": "bf16", "prompt_tokens": 2048, "error": "OutOfMemoryError: ..."},
    ]
    copies = [
        {"mib": 16, "pinned": True, "gb_s_median": 20.0},
        {"mib": 64, "pinned": True, "gb_s_median": 50.0},
        {"mib": 64, "pinned": False, "gb_s_median": 8.0},
    ]
    return {"encoder": {"rows": enc}, "decoder": {"rows": dec}, "copy": {"rows": copies}}


def test_derive_takes_only_measured_rows() -> None:
    derived = check.derive(_result())
    slot = derived["slot_events_per_s"]
    assert (slot["texts_per_s"], slot["dtype"], slot["batch"]) == (5000.0, "fp16", 256)
    assert set(slot["per_dtype"]) == {"fp32", "fp16"}
    kv = derived["kv_cache"]
    assert kv["bytes_per_token"] == {"fp16": 23_040, "fp32": 46_080}
    fp32, bf16 = kv["break_even"]  # the errored 2,048-token row gives none
    assert fp32["restore_gb_s_break_even"] == pytest.approx(46_080 / 0.02e-3 / 1e9)
    assert bf16["kv_bytes_per_token"] == 23_040
    assert bf16["restore_gb_s_break_even"] == pytest.approx(2.304)
    # 1,024 tokens x 46,080 B = 45 MiB: nearest pinned size is 64 MiB (50 GB/s > 2.3)
    assert fp32["pinned_copy_mib"] == 64 and fp32["pinned_copy_beats_recompute"] is True


def test_derive_without_figures_has_no_slot_rate() -> None:
    empty: dict[str, Any] = {"encoder": {"rows": []}, "decoder": {"rows": []}, "copy": {"rows": []}}
    derived = check.derive(empty)
    assert derived["slot_events_per_s"]["texts_per_s"] is None
    assert derived["kv_cache"]["break_even"] == []


def test_device_choice_never_falls_back_silently() -> None:
    assert check.pick_device(want_cpu=False, cuda_available=True) == "cuda"
    assert check.pick_device(want_cpu=True, cuda_available=False) == "cpu"
    with pytest.raises(check.NoDeviceError, match="--cpu"):
        check.pick_device(want_cpu=False, cuda_available=False)


def test_without_cuda_main_exits_non_zero_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(check, "_cuda_available", lambda: False)
    out = tmp_path / "gpu.json"
    assert check.main(["--out", str(out)]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not out.exists()
