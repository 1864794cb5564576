"""``flinkai bench identity``: the compare verdicts, and the drift item's determinism."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flinkai_bench.identity import SCHEMA, IdentityConfig, Item, compare, compute, load, main


def _write(path: Path, items: dict[str, Item]) -> Path:
    data = {"schema": SCHEMA, "items": {name: item.to_json() for name, item in items.items()}}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _items(tokens: list[int], scores: list[float], vectors: np.ndarray) -> dict[str, Item]:
    return {
        "llm/0": Item.of({"prompt_tokens": 5, "tokens": tokens}),
        "anomaly/zscore/s.csv": Item.of({"n": len(scores)}, np.asarray(scores)),
        "embeddings": Item.of({"n": 2}, vectors),
    }


VECTORS = np.asarray([[0.25, -1.0], [0.5, 2.0]], dtype=np.float32)


def test_items_read_back_exactly_and_identical_files_pass(tmp_path: Path) -> None:
    items = _items([1, 2, 3], [0.1, float("nan"), 0.7], VECTORS)
    a = _write(tmp_path / "a.json", items)
    b = _write(tmp_path / "b.json", _items([1, 2, 3], [0.1, float("nan"), 0.7], VECTORS.copy()))
    back = load(a)
    assert back["embeddings"].array is not None
    assert back["embeddings"].array.dtype == np.float32
    np.testing.assert_array_equal(back["embeddings"].array, VECTORS)
    assert back["embeddings"].sha256 == items["embeddings"].sha256
    lines, same = compare(back, load(b))
    assert same and all(": identical" in line for line in lines) and len(lines) == 3
    md = tmp_path / "identity.md"
    assert main(["--compare", str(a), str(b), "--markdown", str(md)]) == 0
    table = md.read_text(encoding="utf-8")
    assert "| `llm/0` | identical |" in table and "**all identical**" in table


@pytest.mark.parametrize(
    ("tokens", "scores", "vectors", "item", "reason"),
    [
        ([1, 2, 4], [0.1, float("nan"), 0.7], VECTORS, "llm/0", "value differs (tokens)"),
        ([1, 2, 3], [0.1, float("nan"), 0.75], VECTORS, "anomaly/zscore/s.csv", "max abs diff 0.05"),
        ([1, 2, 3], [0.1, float("nan"), 0.7], VECTORS + np.float32(1e-3), "embeddings",
         "max abs diff 0.001"),
    ],
)  # fmt: skip
def test_a_changed_token_score_or_vector_is_a_difference(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tokens: list[int],
    scores: list[float],
    vectors: np.ndarray,
    item: str,
    reason: str,
) -> None:
    a = _write(tmp_path / "a.json", _items([1, 2, 3], [0.1, float("nan"), 0.7], VECTORS))
    b = _write(tmp_path / "b.json", _items(tokens, scores, vectors))
    assert main(["--compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith(f"{item}:"))
    assert "different" in line and reason in line, line
    # only the changed item is reported as different
    assert sum("different" in x for x in out.splitlines()) == 1
    assert "DIFFERENCES FOUND" in out


def test_an_item_on_one_side_only_is_a_difference() -> None:
    items = _items([1], [0.5], VECTORS)
    fewer = {k: v for k, v in items.items() if k != "llm/0"}
    lines, same = compare(items, fewer)
    assert not same and "llm/0: different (only in A)" in lines


def test_the_drift_item_is_deterministic_and_detects_the_shifts() -> None:
    cfg = IdentityConfig(parts=("drift",))
    first = compute(cfg, Path("."))["items"]["drift/cusum"]
    again = compute(cfg, Path("."))["items"]["drift/cusum"]
    assert first["sha256"] == again["sha256"]
    # the jump comes at event 1200 and the ramp after 2100: both are found, after them
    hits = first["value"]["detections"]
    assert hits and 1200 <= hits[0] < 1300 and any(h > 2100 for h in hits), hits


def test_timing_table_pairs_rounds_and_reports_ratios(tmp_path: Path) -> None:
    from flinkai_bench.identity_timing import timing_markdown

    def write(kind: str, side: str, i: int, scale: float) -> None:
        if kind == "embed":
            body = {"rows": [{"texts_per_s": 50.0 * scale, "extra": {"cpu_ms_per_text": 16.0}}]}
        else:
            body = {
                "machine": {"loadavg_start": [1.0, 1.0, 1.0]},
                "rows": [
                    {"length": 256, "mode": "none", "ttft_ms": [600.0 * scale, 700.0 * scale]},
                    {"length": 256, "mode": "memory", "share": 0.9, "ttft_p50_ms": 200.0},
                    {"length": 64, "mode": "none", "ttft_ms": [1.0]},  # another length: ignored
                ],
            }
        (tmp_path / f"{kind}-{side}-{i}.json").write_text(json.dumps(body))

    for i in (1, 2):
        for kind in ("embed", "kvcache"):
            write(kind, "before", i, 1.0)
            write(kind, "after", i, 2.0)
    write("embed", "before", 3, 1.0)  # an incomplete round is left out
    text = timing_markdown(tmp_path)
    assert "before 1, after 1, before 2, after 2;" in text
    assert "| embed raw_ort texts/s | 50.0 | 100.0 | 2.000 | 2.000 (2.00 to 2.00) |" in text
    assert "| kvcache TTFT ms, 256 tok, no cache (median) | 650.0 | 1300.0 | 2.000 |" in text
    with pytest.raises(FileNotFoundError):
        timing_markdown(tmp_path / "empty")
