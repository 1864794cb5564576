"""``flinkai bench kvcache`` mechanics with the fake decoder (the figures need the real one)."""

from __future__ import annotations

from flinkai_bench.kvcache import MODES, Profile, _table, run_kvcache_bench
from tests.unit.llm_fake import FakeDecoder


def test_every_mode_serves_every_cell_and_the_shared_prefix_is_reused() -> None:
    profile = Profile(
        cells=((40, 0.0), (40, 0.9), (80, 0.0), (80, 0.9)), prompts=2, throughput_mb=()
    )
    rows = run_kvcache_bench(FakeDecoder(), profile, bootstrap=None, block_tokens=8)
    assert [(r["length"], r["share"], r["mode"]) for r in rows] == [
        (n, s, m) for n in (40, 80) for s in (0.0, 0.9) for m in ("none", "memory")
    ]
    for r in rows:
        assert r["n"] == 2 and r["ttft_p50_ms"] > 0 and r["rss_max_mb"] > 0
        if r["mode"] == "none" or r["share"] == 0.0:
            assert r["cached_tokens_mean"] == 0
        else:
            # 90% of 80 = 72 shared tokens: 9 whole blocks of 8
            assert r["cached_tokens_mean"] == (72 if r["length"] == 80 else 32)
    # At 0 % share no mode may find anything, the cold Kafka worker included.
    assert MODES.index("kafka_cold") < MODES.index("kafka_warm")
    table = _table(rows)
    assert table.count("\n") == len(rows) + 1 and "| 80 | 90% | memory |" in table
