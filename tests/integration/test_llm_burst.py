"""jobs/llm_complete.sql through a burst: checkpoints keep completing, no restart, each prompt once.

A checkpoint timeout of 3 s, and a burst of prompts (with a few bad records) sent at
once whose single-sequence decoding alone takes several times that: the test
measures it first, so the load is proven heavy enough. While the job drains the
burst, checkpoints must keep completing (read from Flink's REST API), none may
fail, and the job must not restart. Then every prompt has exactly one completion on
the ``read_committed`` topic, identical to single-sequence greedy, and every bad
record exactly one dead letter.

The decoder is the tiny random one (:class:`flinkai.models.llm_export.TinyLlm`): the
machinery is the point, not the model. Before the scheduler, the per-row UDF decoded
this burst inside one bundle; the checkpoint behind it expired and the job restarted
(``FLINKAI_BURST_SCRIPT`` runs this test against another script to show it).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from flinkai import metrics
from flinkai.config import Config
from flinkai.functions.llm import load_prompt_model
from flinkai.kafka.admin import create_topics, produce, read_to_end_offsets
from flinkai.kafka.broker import LocalKafka
from flinkai.llm.compare import greedy_with_margins
from flinkai.local.process import free_port
from flinkai.runtime.runner import RunOptions, run_script
from flinkai.testing import check_exactly_once, dead_letter_id

from .llm import tiny_decoder_dir
from .streaming import REPO, StreamingJob, wait_until, with_rest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BURST = 200
NEW_TOKENS = 48
CHECKPOINT_TIMEOUT_MS = 3000
CHECKPOINT_INTERVAL_MS = 1000
POISON = {
    b"not json": "not_json",
    b'{"id": "bad-1"}': "missing_field",
    b'{"id": "bad-2", "prompt": "  "}': "empty_prompt",
    b'{"id": "bad-3", "prompt": "hi", "priority": "urgent"}': "invalid_field",
}


def prompts(n: int, seed: int = 0) -> dict[str, str]:
    """Mixed lengths: a few words up to a few hundred characters."""
    rng = random.Random(seed)
    words = [
        "stream",
        "state",
        "kafka",
        "flink",
        "token",
        "batch",
        "window",
        "model",
        "event",
        "checkpoint",
    ]
    return {
        f"p{i}": " ".join(rng.choice(words) for _ in range(rng.choice([2, 5, 20, 60])))
        for i in range(n)
    }


@dataclass
class LlmJob(StreamingJob):
    """``jobs/llm_complete.sql`` (or ``FLINKAI_BURST_SCRIPT``), unbounded, on fresh topics."""

    script: Path = Path(
        os.environ.get("FLINKAI_BURST_SCRIPT") or REPO / "jobs" / "llm_complete.sql"
    )

    def start(self) -> None:
        create_topics(self.bootstrap, list(self.topics))
        variables = {
            "KAFKA_BOOTSTRAP": self.bootstrap,
            "PROMPTS_TOPIC": self.topics[0],
            "COMPLETIONS_TOPIC": self.topics[1],
            "DLQ_TOPIC": self.topics[2],
            "GROUP_ID": f"g-{self.run_id}",
            "SCAN_BOUNDED_MODE": "unbounded",
        }
        options = RunOptions(target=self.target, variables=variables, wait=False)
        self.result = run_script(self.script, self.config, options)


def llm_config(base: Config, tiny: Path, **runtime: object) -> Config:
    return base.with_overrides(
        llm={"dir": str(tiny), "max_new_tokens": NEW_TOKENS, "store": "memory"},
        runtime=runtime,
    )


def expected(config: Config, texts: dict[str, str]) -> tuple[dict[str, str], int, float]:
    """Single-sequence greedy completions, their tokens in all, and how long decoding
    them one by one took.

    Prompts whose greedy path passes a near-tie (top two logits within 1e-3) are left
    out: batching may flip those legitimately (:mod:`flinkai.llm.compare`), and this
    test is about the stream, not float rounding. The random tiny model has a few.
    """
    model = load_prompt_model(config)
    started = time.perf_counter()
    out, n_tokens = {}, 0
    for pid, text in texts.items():
        ids = model.prompt_ids(text)
        tokens, margin = greedy_with_margins(model.decoder, ids, NEW_TOKENS, model.stop_ids)
        if margin >= 1e-3:
            out[pid] = model.decode(tokens)
            n_tokens += len(tokens)
    return out, n_tokens, time.perf_counter() - started


def scrape_llm(port: int) -> dict[str, float]:
    """The LLM operator's metrics as Flink's Prometheus reporter exports them."""
    scraped = metrics.scrape(f"http://127.0.0.1:{port}/metrics")
    out = {}
    for spec in metrics.LLM_GAUGES:
        samples = scraped.get(metrics.prometheus_name(spec), [])
        if samples:
            out[spec.name] = sum(value for _, value in samples)  # one series per subtask
    return out


def test_a_burst_slows_the_job_and_checkpoints_keep_completing(kafka_broker: LocalKafka) -> None:
    tiny = tiny_decoder_dir()
    base, api = with_rest()
    reporter = free_port()
    # Keep every checkpoint of the burst in the REST history (Flink keeps the last 10).
    flink_conf = {**base.runtime.flink_conf, "web.checkpoints.history": "1000"}
    config = llm_config(
        base,
        tiny,
        checkpoint_interval_ms=CHECKPOINT_INTERVAL_MS,
        checkpoint_timeout_ms=CHECKPOINT_TIMEOUT_MS,
        flink_conf=flink_conf,
        prometheus_port=reporter,
    )
    want, want_tokens, serial_s = expected(config, prompts(BURST))
    texts = {k: v for k, v in prompts(BURST).items() if k in want}
    assert len(texts) >= 0.9 * BURST, f"{BURST - len(texts)} near-tie prompts"
    # The burst is heavy enough to matter: decoded one by one it outlasts the
    # checkpoint timeout several times over (in this process, without Flink's share).
    assert serial_s * 1000 >= 3 * CHECKPOINT_TIMEOUT_MS, f"burst too light: {serial_s:.1f} s"

    job = LlmJob(kafka_broker.bootstrap, config=config)
    job.start()
    try:
        warm = [json.dumps({"id": "warm", "prompt": "warm up"}).encode()]
        job.warm_up(warm, n=1, timeout_s=120)
        # Restarts count from here: with a 3 s timeout, a start-up checkpoint on a loaded
        # machine can expire while the Python worker is still starting; the burst is
        # what this test loads the job with.
        warm_restarts = api.restarts(job.job_id)
        records = [json.dumps({"id": k, "prompt": v}).encode() for k, v in texts.items()]
        records += list(POISON)
        burst_at = time.time() * 1000
        produce(job.bootstrap, job.topics[0], records)
        drained = job.wait_for(lambda n: n >= len(texts) + 1, timeout_s=240)
        drained_at = time.time() * 1000
        assert drained >= len(texts) + 1, f"{drained - 1} of {len(texts)} completions committed"
        history = api.checkpoints(job.job_id).get("history") or []
        counts = api.checkpoints(job.job_id).get("counts") or {}
        restarts = api.restarts(job.job_id) - warm_restarts
        for e in api.job_exceptions(job.job_id)[:2]:
            print(e.get("exceptionName"), (e.get("stacktrace") or "")[:3000])
        # The operator's gauges reach Flink's reporter; the last one is set when the
        # final completion leaves, so poll until it shows the queue empty.
        gauges: dict[str, float] = {}

        def settled() -> bool:
            nonlocal gauges
            try:
                gauges = scrape_llm(reporter)
            except OSError:  # the reporter is not answering yet
                return False
            return gauges.get("llm_held_prompts") == 0 and gauges.get("llm_generated_tokens", 0) > 0

        wait_until(settled, 30, interval_s=1.0)
        job.stop(api)
    finally:
        job.cancel()

    during = [
        c for c in history
        if burst_at <= int(c.get("trigger_timestamp") or 0) <= drained_at
    ]  # fmt: skip
    durations = [int(c.get("end_to_end_duration") or 0) for c in during]
    print(
        f"burst of {len(texts)} drained in {(drained_at - burst_at) / 1000:.1f} s (serial decode "
        f"{serial_s:.1f} s); {len(during)} checkpoints during it, longest {max(durations or [0])} "
        f"ms; counts {counts}; restarts {restarts} (before the burst: {warm_restarts}); "
        f"scraped {gauges}"
    )
    # Evidence of the load: the drain took longer than the checkpoint timeout.
    assert drained_at - burst_at > CHECKPOINT_TIMEOUT_MS
    # Outcome: no restart during the burst, and every checkpoint triggered mid-burst completed. (The
    # REST counts also hold start-up triggers refused while the operator was still
    # opening, "not all required tasks are running"; those have no history entry.)
    assert restarts == 0
    assert during and all(c.get("status") == "COMPLETED" for c in during), during

    results = read_to_end_offsets(job.bootstrap, job.topics[1], timeout_s=60).records
    dead = read_to_end_offsets(job.bootstrap, job.topics[2], timeout_s=60).records
    check_exactly_once(
        Counter([*texts, "warm"]), results, lambda r: json.loads(r.value or b"")["id"]
    ).assert_ok()
    got = {d["id"]: d for d in (json.loads(r.value or b"") for r in results)}
    differ = [k for k in texts if got[k]["completion"] != want[k]]
    assert not differ, [(k, got[k]["completion"], want[k]) for k in differ[:3]]
    # Every token generated is counted once: the burst's own (identical to greedy
    # above, so the same count) plus the warm-up prompt's 1..NEW_TOKENS.
    assert set(gauges) == {spec.name for spec in metrics.LLM_GAUGES}, sorted(gauges)
    generated = gauges["llm_generated_tokens"]
    assert want_tokens + 1 <= generated <= want_tokens + NEW_TOKENS, (generated, want_tokens)
    assert gauges["llm_running"] == 0 and gauges["llm_waiting"] == 0, gauges
    assert gauges["llm_held_prompts"] == 0 and gauges["llm_queue_full"] == 0, gauges
    assert gauges["llm_kv_budget_bytes"] == config.llm.kv_budget_bytes, gauges
    assert 0 < gauges["llm_ttft_ms_p50"] <= gauges["llm_e2e_ms_p99"], gauges

    source = read_to_end_offsets(job.bootstrap, job.topics[0], timeout_s=60).records
    poison_ids = {f"{r.topic}:{r.partition}:{r.offset}": POISON[r.value or b""]
                  for r in source if (r.value or b"") in POISON}  # fmt: skip
    check_exactly_once(Counter(poison_ids.keys()), dead, dead_letter_id).assert_ok()
    for r in dead:
        d = json.loads(r.value or b"")
        assert d["reason"] == poison_ids[dead_letter_id(r)], d
