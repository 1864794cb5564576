"""The micro-batch baseline of flinkai bench rag: scheduling, dedup, visibility, pairing."""

from __future__ import annotations

import argparse
from dataclasses import replace
from types import SimpleNamespace

import pytest

from flinkai.functions.doc_events import DocEvent, DocOp
from flinkai_bench.rag import PROFILES, PhaseResult, _intervals, _Pair, _Segment, _segments, _table
from flinkai_bench.rag_microbatch import (
    latest_per_document,
    next_tick,
    ticks_missed,
    visibility,
)


def test_runs_are_due_on_fixed_ticks_and_an_overrun_skips_to_the_next_one() -> None:
    assert next_tick(100.0, 5.0, 100.0) == 105.0  # the first run waits one interval
    assert next_tick(100.0, 5.0, 103.2) == 105.0
    assert next_tick(100.0, 5.0, 105.0) == 105.0  # exactly on a tick: that tick
    assert next_tick(100.0, 5.0, 105.1) == 110.0  # a run that ended late: next tick ahead
    assert next_tick(100.0, 1.0, 107.4) == 108.0  # a 7.4 s run at 1 s skips ticks 102-107
    assert ticks_missed(100.0, 105.0, 5.0) == 0
    assert ticks_missed(101.0, 108.0, 1.0) == 6
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        next_tick(0.0, 0.0, 1.0)


def test_only_the_newest_version_of_each_changed_document_is_embedded() -> None:
    a1 = DocEvent("a", DocOp.UPSERT, 1, "old")
    b5 = DocEvent("b", DocOp.UPSERT, 5, "b")
    a3 = DocEvent("a", DocOp.UPSERT, 3, "new")
    a2 = DocEvent("a", DocOp.UPSERT, 2, "late, out of order")
    assert latest_per_document([a1, b5, a3, a2]) == [a3, b5]
    assert latest_per_document([]) == []


def test_visibility_is_seen_minus_sent_and_counts_the_unseen() -> None:
    times, unseen = visibility({"a": 10.0, "b": 11.0, "c": 12.0}, {"a": 10.5, "b": 14.0})
    assert times == pytest.approx([0.5, 3.0]) and unseen == ["c"]
    with pytest.raises(ValueError, match=r"seen 1\.000 s before it was sent"):
        visibility({"a": 10.0}, {"a": 9.0})


def test_documents_split_evenly_over_the_intervals_or_run_alone() -> None:
    opts = PROFILES["quick"]
    assert opts.baseline == "microbatch" and opts.intervals_s == (1.0, 5.0, 10.0)
    assert _segments(10, opts) == [(0, 3, 1.0), (3, 7, 5.0), (7, 10, 10.0)]
    assert _segments(10, replace(opts, baseline="rebuild")) == [(0, 10, None)]
    with pytest.raises(ValueError, match="cannot be split"):
        _segments(2, opts)


def test_pair_ratio_rows_and_table() -> None:
    seg = _Segment(0, 4, 5.0, first_send=100.0, sent_at={"ag-0": 100.0, "ag-2": 100.5})
    assert seg.rate(102.0) == 2.0 and seg.rate(None) is None
    stream = PhaseResult("stream beside 5 s", "job", 4, 2.0)
    base = PhaseResult("micro-batch 5 s", "every 5 s", 4, 2.0, fresh_s=[3.0, 6.0])
    pair = _Pair(seg, stream, base)

    probe = SimpleNamespace(seen_at={"ag-0": 100.4})  # what the probe saw: ag-2 never
    pair.fill_stream(probe)  # type: ignore[arg-type]
    assert stream.fresh_s == pytest.approx([0.4]) and stream.missing == 1
    assert pair.ratio_p99() == pytest.approx(base.row()["freshness_p99_s"] / 0.4)
    stream.fresh_s = []
    assert pair.ratio_p99() is None  # no stream figure: no ratio, never a division by 0
    stream.fresh_s = [0.4]
    result = {
        "phases": [stream.row(), base.row()],
        "baseline_over_stream_freshness_p99": {"5": pair.ratio_p99(), "10": None},
        "notes": {"micro-batch 5 s": ["3 runs"]},
        "recall": {"recall@10": 0.99, "queries": 10},
        "freshness_path": "through the Flink job",
        "gpu": "n/a (no GPU)",
    }
    text = _table(result)
    assert "| micro-batch 5 s | 2 | 4.50 |" in text
    assert "baseline 5 / stream (same documents): 14.9x" in text
    assert "baseline 10 / stream (same documents): n/a" in text and "3 runs" in text


def test_intervals_argument() -> None:
    assert _intervals("1,5,10") == (1.0, 5.0, 10.0)
    for bad in ("", "1,x", "0,5"):
        with pytest.raises(argparse.ArgumentTypeError):
            _intervals(bad)
