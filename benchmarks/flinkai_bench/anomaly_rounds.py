"""The bench's one runner for every detector with per-key state: the operator's loop.

Every operator model (``zscore``, ``cad``, the forecasters) and every research
detector with plain-data state (ARTime, the CAD variants, through
:class:`~flinkai_bench.research.anomaly.keyed.ValueKeyDetector`) is a
:class:`~flinkai.anomaly.contract.KeyDetector`, and runs here: every ``every``-th point
the key's state takes the operator's round trip (snapshot, pickle, unpickle,
rebuild) and that step is timed as an operator step, the others as detector steps.
``every = 1`` is the operator exactly (a rebuild per point). The stateless Beam and
river baselines (scored, then learnt, with no snapshot) have their own loop in
:func:`flinkai_bench.anomaly.run_detector`.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from flinkai.anomaly.contract import KeyDetector, PointRejected
from flinkai_bench.anomaly_run import DetectorRun

__all__ = ["score_with_round_trips"]


def score_with_round_trips(
    run: DetectorRun,
    key: str,
    stamps: Sequence[int],
    values: np.ndarray,
    det: KeyDetector,
    restore: Callable[[Mapping[str, Any]], KeyDetector],
    every: int,
) -> tuple[KeyDetector, np.ndarray]:
    """Score ``values`` into ``run.scores[key]``, noting timings, rejected points and
    the largest pickled state in ``run``.

    A rejected point (a timestamp not after the last one) scores 0, as no detection;
    the job would dead-letter it.

    Args:
        stamps: Each value's time in epoch ms (or any increasing numbers).
        det: A fresh key's detector.
        restore: Rebuilds a key's detector from an unpickled snapshot.

    Returns:
        The final detector, and per point its ``last_error`` (NaN where none).
    """
    out = np.zeros(len(values))
    errors = np.full(len(values), np.nan)
    for i, (ts, v) in enumerate(zip(stamps, values.tolist(), strict=True)):
        t0 = time.perf_counter()
        if i % every == 0:
            blob = pickle.dumps(det.snapshot())
            det = restore(pickle.loads(blob))
            # a capped store's size moves between its low-water mark and the cap
            run.state_bytes = max(run.state_bytes or 0, len(blob))
        try:
            out[i] = det.update(int(ts), float(v)).score
            if det.last_error is not None:
                errors[i] = det.last_error
        except PointRejected:
            run.rejected += 1
        (run.operator_ms if i % every == 0 else run.step_ms).append(
            (time.perf_counter() - t0) * 1000
        )
    run.state_bytes = max(run.state_bytes or 0, len(pickle.dumps(det.snapshot())))
    run.scores[key] = out
    return det, errors
