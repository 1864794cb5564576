"""``flinkai bench llm-step``: one batched decode step, by rows and past length.

Each decoder folder gets the same batch: ``rows`` prompts of ``past`` random ids,
prefilled, joined into one :class:`~flinkai.llm.batch.KvBatch`, then timed over
repeated steps (the batch grows one column a step, as in serving). With several
folders the steps are interleaved, so a slow moment of a shared machine hits every
decoder alike; the figure is the median after two warm-up steps.

Its use: compare two exports of the same model (for example one made before and one
after a change to the graph) on the step the scheduler runs.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["register"]


def _batch(decoder: Any, rows: int, past: int) -> Any:
    import numpy as np

    from flinkai.llm.batch import KvBatch

    batch = KvBatch(decoder.shape)
    rng = np.random.default_rng(0)
    for r in range(rows):
        _, cache = decoder.forward([int(i) for i in rng.integers(100, 1000, past)])
        batch.change([], [(f"r{r}", cache)])
    return batch


def _handle(args: argparse.Namespace) -> int:
    import numpy as np

    from flinkai.llm.decoder import DecoderOptions, OnnxDecoder

    folders = [f.strip() for f in args.decoders.split(",")]
    options = DecoderOptions(intra_op_threads=args.threads, verify_checksums=False)
    decoders = [OnnxDecoder.load(None if f == "default" else f, options) for f in folders]
    cells: list[dict[str, Any]] = []
    for rows in (int(r) for r in args.rows.split(",")):
        for past in (int(p) for p in args.pasts.split(",")):
            batches = [_batch(d, rows, past) for d in decoders]
            times: list[list[float]] = [[] for _ in decoders]
            for _ in range(args.repeats + 2):
                for k, (decoder, batch) in enumerate(zip(decoders, batches, strict=True)):
                    t0 = time.perf_counter()
                    batch.step(decoder, [5] * rows)
                    times[k].append(1000 * (time.perf_counter() - t0))
            for folder, decoder, ts in zip(folders, decoders, times, strict=True):
                ms = float(np.median(ts[2:]))
                cells.append({"decoder": folder, "model_version": decoder.model_version,
                              "rows": rows, "past": past, "step_ms": round(ms, 2),
                              "tok_s": round(1000 * rows / ms, 1)})  # fmt: skip
                print(f"{folder} rows {rows} past {past}: {ms:.1f} ms", flush=True)
    first = folders[0]
    summary: dict[str, Any] = {"load_avg_1m": round(os.getloadavg()[0], 2), "steps": cells}
    if len(folders) > 1:
        base = {(c["rows"], c["past"]): c["step_ms"] for c in cells if c["decoder"] == first}
        summary["step_ratio_vs_first"] = [
            {"decoder": c["decoder"], "rows": c["rows"], "past": c["past"],
             "ratio": round(c["step_ms"] / base[(c["rows"], c["past"])], 3)}
            for c in cells if c["decoder"] != first
        ]  # fmt: skip
    result = {"config": vars(args) | {"handler": None}, "summary": summary}
    print(json.dumps(summary.get("step_ratio_vs_first", cells), indent=1))
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {path}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``flinkai bench llm-step``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "llm-step",
        help="one batched decode step of one or more decoder exports, by rows and past length",
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument("--decoders", default="default",
                        help="export folders, comma-separated ('default': the default export)")  # fmt: skip
    parser.add_argument("--rows", default="1,4,16,32", help="batch rows (1,4,16,32)")
    parser.add_argument("--pasts", default="64,140,220", help="past lengths (64,140,220)")
    parser.add_argument("--repeats", type=int, default=10, help="timed steps per cell (10)")
    parser.add_argument("--threads", type=int, default=0, help="threads, 0 = all cores")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.set_defaults(handler=_handle)
