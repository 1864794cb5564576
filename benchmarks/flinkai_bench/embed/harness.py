"""Runs one variant in a child process of its own (own process group, own peak RSS)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict
from typing import Any

from flinkai.local.process import kill_stragglers, signal_group
from flinkai_bench.embed.gpu import GPU_VARIANTS
from flinkai_bench.embed.results import VariantResult
from flinkai_bench.embed.variants import VARIANTS, _texts
from flinkai_bench.shared.rss import RssSampler

__all__ = ["VARIANT_TIMEOUT_S", "child", "run_variant"]

#: A variant's child process is killed (with its process group) after this long.
VARIANT_TIMEOUT_S = 1800.0


def run_variant(
    kind: str, limit: int | None, args: dict[str, Any], timeout_s: float = VARIANT_TIMEOUT_S
) -> VariantResult:
    """Run one variant in a child process; returns its result with peak RSS.

    The child gets its own process group, so a timeout ends it together with what it
    started (Kafka, the Flink JVM, a Triton server).
    """
    payload = json.dumps({"kind": kind, "limit": limit, "args": args})
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flinkai_bench.embed", payload],
            stdout=out,
            stderr=err,
            text=True,
            env=env,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return VariantResult(
                args.get("name", kind), note=f"failed: timed out after {timeout_s:.0f} s"
            )
        except BaseException:  # Ctrl-C: take the child's broker and JVM down with it
            _kill_group(proc)
            raise
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if code != 0 or not lines:
        tail = " | ".join(ln.strip() for ln in stderr.strip().splitlines()[-3:])
        return VariantResult(args.get("name", kind), note=f"failed: {tail}")
    data = json.loads(lines[-1])
    return VariantResult(**data)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the group of a variant child that has not been reaped yet (so its pid is its own)."""
    signal_group(proc.pid, signal.SIGKILL)
    proc.wait()
    kill_stragglers(proc.pid)


def child(payload: str) -> None:
    spec = json.loads(payload)
    texts = _texts(spec["limit"])
    events = spec["args"].get("events")
    if events:  # more events than the corpus has rows: cycle through it
        texts = [texts[i % len(texts)] for i in range(int(events))]
    with RssSampler() as rss:
        _SAMPLER = rss
        result = {**VARIANTS, **GPU_VARIANTS}[spec["kind"]](texts, spec["args"])
    result.peak_rss_mb = rss.peak_mb
    print(json.dumps(asdict(result)), flush=True)
