"""``flinkai bench lora``: LoRA adapters hot-plugged while serving, and the fine-tuning job.

Serving legs (the real SmolLM2 export with rank-8 LoRA inputs, ``export-llm
--lora-rank 8``; the worker's scheduler in this process; a real broker and adapters
topic with the worker's :class:`~flinkai.kafka.adapter_feed.AdapterFeed`):

* **throughput**, closed loop (``--clients`` requests always in flight; request ``i``
  decodes a fixed number of tokens around ``--new-tokens``, no stop ids, so every row
  decodes the same work), each for ``--seconds``: the plain graph (no LoRA inputs),
  the LoRA graph without adapters, one adapter, four adapters mixed by event, and one
  adapter whose new versions are published every ``--change-every`` seconds. Rows
  run ``--rounds`` times in alternating order; the figure is the mean.
* **hot-plug latency**, during the changing row: for each version, from its
  commit (the publisher's ``commit_transaction`` returned: ``read_committed``
  consumers may now see it) to the first forward of a request pinned to it. The
  traffic is the closed loop itself (a request finishes and the next one is admitted
  every step or two), so the figure includes the wait for the next admission. Every
  third change is a rollback to the previous version, measured the same way. Publish
  -> commit is reported beside it.

Training legs (``flinkai_bench.lora_train``): accuracy on AG News held-back rows before
and after streaming fine-tuning, the exactly-once cost of the training job, recovery
after a TaskManager kill.

The JSON's ``summary`` holds the keys issue #38 names.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["register", "summarize"]

ADAPTER = "bench"
#: How long a change waits for a request pinned to its version.
WAIT_S = 5.0


@dataclass
class Loop:
    """A closed loop of requests against a running scheduler."""

    scheduler: Any
    pool: Sequence[tuple[int, ...]]
    new_tokens: int
    clients: int
    adapters: Callable[[int], str | None]
    tokens: int = 0
    finished: int = 0
    errors: list[str] = field(default_factory=list)
    _n: int = 0

    def run(self, seconds: float, window_end: Callable[[], None] | None = None) -> float:
        """Keep ``clients`` requests in flight for ``seconds``; returns tokens/s.

        ``window_end`` is called when the window closes, before the drain."""
        from flinkai.llm.scheduler import Request

        def submit() -> None:
            i = self._n
            self._n += 1
            # Lengths vary (the same sequence in every row) so requests do not finish in
            # lockstep: real completions differ in length, and lockstep would leave long
            # gaps with no request starting.
            n = max(1, self.new_tokens // 2 + (i * 37) % (self.new_tokens + 1))
            key = f"loop-{uuid.uuid4().hex[:6]}-{i}"
            prompt = self.pool[i % len(self.pool)]
            self.scheduler.submit(Request(key, prompt, n, frozenset(), adapter=self.adapters(i)))

        for _ in range(self.clients):
            submit()
        start = time.monotonic()
        # Every token decoded in the window counts (not only finished requests'): the
        # scheduler's counter, read at both ends.
        generated = self.scheduler.stats.generated_tokens
        while time.monotonic() - start < seconds:
            time.sleep(0.005)
            for done in self.scheduler.take():
                if done.error:
                    self.errors.append(done.error)
                self.finished += 1
                submit()
        elapsed = time.monotonic() - start
        tokens = self.scheduler.stats.generated_tokens - generated
        if window_end is not None:
            window_end()
        # Whatever is in flight at the end finishes uncounted (same for every row).
        while self.scheduler.pending:
            time.sleep(0.01)
            self.scheduler.take()
        return tokens / elapsed


def _pool(model: Any, n: int, seed: int) -> list[tuple[int, ...]]:
    from flinkai_bench.llm_serve_rows import make_pool

    return [item.ids for item in make_pool(model, n, seed)]


def _random_adapter(decoder: Any, name: str, version: int) -> Any:
    from flinkai.llm.lora import Adapter

    rng = np.random.default_rng(version * 7919 + len(name))
    spec = decoder.lora
    params = {
        n: (0.02 * rng.standard_normal(spec.shape_of(n))).astype(np.float32) for n in spec.names()
    }
    return Adapter(name, version, decoder.model_version, spec.rank, params)


def _first_start(scheduler: Any, tag: str, since: float) -> float | None:
    """Wall time of the first forward pinned to ``tag`` at or after ``since`` (None: none
    within :data:`WAIT_S`). The loop's own requests are the traffic: no probe is sent."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for t, wall in reversed(list(scheduler.stats.adapter_starts)):
            if wall < since:
                break
            if t == tag:
                return float(wall)
        time.sleep(0.002)
    return None


def changing_row(
    scheduler: Any, loop: Loop, publisher: Any, decoder: Any, seconds: float, every: float,
    first_version: int, adapters: Any, log: Callable[[str], None],
) -> tuple[float, list[dict[str, Any]]]:  # fmt: skip
    """The loop for ``seconds`` while versions change every ``every`` s; (tok/s, changes)."""
    changes: list[dict[str, Any]] = []
    stop = threading.Event()

    def change() -> None:
        version = first_version
        k = 0
        while not stop.wait(every):
            k += 1
            rollback = k % 3 == 0
            started = time.time()
            if rollback:
                committed = publisher.rollback(ADAPTER)
                tag = f"{ADAPTER}@{version - 1}"
            else:
                version += 1
                committed = publisher.publish(_random_adapter(decoder, ADAPTER, version))
                tag = f"{ADAPTER}@{version}"
            used = _first_start(scheduler, tag, committed)
            version_now = int(tag.split("@")[1])
            loaded = next((e.at_s for e in reversed(list(adapters.events))
                           if e.version == version_now and e.action == k_action(rollback)), None)  # fmt: skip
            changes.append({
                "action": "rollback" if rollback else "publish",
                "tag": tag,
                "publish_to_commit_ms": round((committed - started) * 1000, 1),
                "commit_to_first_step_ms": None if used is None else round((used - committed) * 1000, 1),
                "commit_to_loaded_ms": None if loaded is None else round((loaded - committed) * 1000, 1),
            })  # fmt: skip

    thread = threading.Thread(target=change, daemon=True)
    thread.start()
    tok_s = loop.run(seconds, stop.set)
    thread.join(WAIT_S + every + 5)
    log(f"  changing: {tok_s:.1f} tok/s, {len(changes)} changes")
    return tok_s, changes


def k_action(rollback: bool) -> str:
    return "rollback" if rollback else "publish"


def _pcts(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None, "n": 0}
    arr = np.asarray(values, dtype=float)
    return {"p50": round(float(np.percentile(arr, 50)), 1),
            "p99": round(float(np.percentile(arr, 99)), 1),
            "max": round(float(arr.max()), 1), "n": len(values)}  # fmt: skip


def serving_legs(args: argparse.Namespace, bootstrap: str, log: Callable[[str], None]) -> dict:
    """Throughput rows and hot-plug/rollback latency (see the module docstring)."""
    from flinkai.config import load_config
    from flinkai.functions.llm import load_prompt_model
    from flinkai.kafka.adapter_feed import AdapterFeed, AdapterPublisher, adapter_topic_configs
    from flinkai.kafka.admin import create_topics
    from flinkai.llm.adapters import AdapterSet
    from flinkai.llm.scheduler import Scheduler, SchedulerConfig

    config = load_config().with_overrides(llm={"store": "none"})
    plain_model = load_prompt_model(config)
    lora_model = load_prompt_model(config.with_overrides(llm={"model": args.lora_model}))
    decoder = lora_model.decoder
    if decoder.lora is None:
        raise SystemExit(
            f"{args.lora_model} has no LoRA inputs: flinkai model export-llm --lora-rank 8"
        )
    pool = _pool(lora_model, args.pool, args.seed)
    topic = f"bench-adapters-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, [topic], configs=adapter_topic_configs())
    adapters = AdapterSet(decoder.lora, decoder.model_version, keep_versions=8)
    feed = AdapterFeed(bootstrap, topic, adapters).start()
    publisher = AdapterPublisher(bootstrap, topic, transactional_id=f"{topic}-pub")
    names = [ADAPTER, "b", "c", "d"]
    for name in names:
        publisher.publish(_random_adapter(decoder, name, 1))
    if not feed.wait_ready(30):
        raise SystemExit("the adapter feed did not start")
    deadline = time.monotonic() + 30
    while set(adapters.names()) != set(names) and time.monotonic() < deadline:
        time.sleep(0.05)
    sched_cfg = SchedulerConfig(max_running=args.clients, step_tokens=64)

    def scheduler_for(model: Any) -> Any:
        s = Scheduler(model.decoder, sched_cfg, adapters=adapters if model is lora_model else None)
        s.start()
        return s

    rows: dict[str, list[float]] = {k: [] for k in args.rows.split(",")}
    changes: list[dict[str, Any]] = []
    version = 1
    try:
        for rnd in range(args.rounds):
            order = list(rows) if rnd % 2 == 0 else list(reversed(rows))
            for row in order:
                model = plain_model if row == "plain" else lora_model
                scheduler = scheduler_for(model)
                pick: Callable[[int], str | None] = {
                    "plain": lambda i: None, "lora_base": lambda i: None,
                    "single": lambda i: ADAPTER, "changing": lambda i: ADAPTER,
                    "mixed4": lambda i: names[i % 4],
                }[row]  # fmt: skip
                loop = Loop(scheduler, pool, args.new_tokens, args.clients, pick)
                loop.run(min(5.0, args.seconds / 4))  # warm-up, uncounted
                if row == "changing":
                    tok_s, got = changing_row(scheduler, loop, publisher, decoder, args.seconds,
                                              args.change_every, version, adapters, log)  # fmt: skip
                    changes.extend(got)
                    version = max([version] + [int(c["tag"].split("@")[1]) for c in got])
                else:
                    tok_s = loop.run(args.seconds)
                    log(f"  round {rnd + 1} {row}: {tok_s:.1f} tok/s")
                if loop.errors:
                    log(f"  {row}: {len(loop.errors)} errors, first {loop.errors[0]}")
                rows[row].append(tok_s)
                scheduler.close()
    finally:
        feed.close()
        publisher.close()
    hot = [c["commit_to_first_step_ms"] for c in changes if c["action"] == "publish"]
    back = [c["commit_to_first_step_ms"] for c in changes if c["action"] == "rollback"]
    return {
        "tok_s": {k: [round(v, 2) for v in vs] for k, vs in rows.items()},
        "tok_s_mean": {k: round(statistics.fmean(vs), 2) for k, vs in rows.items() if vs},
        "changes": changes,
        "hotplug_ms": _pcts([v for v in hot if v is not None]),
        "loaded_ms": _pcts(
            [c["commit_to_loaded_ms"] for c in changes if c["commit_to_loaded_ms"] is not None]
        ),
        "rollback_ms": _pcts([v for v in back if v is not None]),
        "publish_to_commit_ms": _pcts([c["publish_to_commit_ms"] for c in changes]),
        "missed": sum(1 for c in changes if c["commit_to_first_step_ms"] is None),
        "adapter_bytes": decoder.lora.nbytes,
        "rejected": dict(adapters.rejected),
    }


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """The issue's summary keys from the legs that ran (None where a leg did not)."""
    serving = result.get("serving") or {}
    mean = serving.get("tok_s_mean", {})
    train = result.get("training") or {}

    def ratio(a: str, b: str) -> float | None:
        return round(mean[a] / mean[b], 3) if mean.get(a) and mean.get(b) else None

    change = ratio("changing", "single")
    return {
        "hotplug_ms_p50": (serving.get("hotplug_ms") or {}).get("p50"),
        "hotplug_ms_p99": (serving.get("hotplug_ms") or {}).get("p99"),
        "rollback_ms_p50": (serving.get("rollback_ms") or {}).get("p50"),
        "rollback_ms_p99": (serving.get("rollback_ms") or {}).get("p99"),
        "publish_to_commit_ms_p99": (serving.get("publish_to_commit_ms") or {}).get("p99"),
        "serving_change_loss_pct": None if change is None else round(100 * (1 - change), 2),
        "mixed_vs_single_tok_s_ratio": ratio("mixed4", "single"),
        "lora_base_vs_plain_tok_s_ratio": ratio("lora_base", "plain"),
        "single_vs_lora_base_tok_s_ratio": ratio("single", "lora_base"),
        "throughput_loss_pct": train.get("throughput_loss_pct"),
        "recovery_s": train.get("recovery_s"),
        "base_accuracy": train.get("base_accuracy"),
        "adapter_accuracy": train.get("adapter_accuracy"),
        "eval_rows": train.get("eval_rows"),
        "train_examples": train.get("train_examples"),
        "replay_identical": train.get("replay_identical"),
    }


def _handle(args: argparse.Namespace) -> int:
    from flinkai_bench.shared.broker import broker

    def log(line: str) -> None:
        print(line, flush=True)

    config = {k: v for k, v in vars(args).items() if k != "handler"}
    path = Path(args.json) if args.json else None
    result: dict[str, Any] = {}
    if args.update and path is not None and path.is_file():
        # Legs run now replace theirs; the others' results (and configs) stay.
        result = json.loads(path.read_text())
    result.setdefault("configs", {})[",".join(sorted(args.legs.split(",")))] = config

    def save() -> None:
        result["summary"] = summarize(result)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result, indent=2, default=str) + "\n")

    with broker(args.bootstrap) as bootstrap:
        if "serving" in args.legs:
            log("serving legs")
            result["serving"] = serving_legs(args, bootstrap, log)
            save()
        if {"accuracy", "exactly-once", "recovery"} & set(args.legs.split(",")):
            from flinkai_bench.lora_train import training_legs

            before = dict(result.get("training") or {})

            def partial(training: dict[str, Any]) -> None:
                result["training"] = {**before, **training}
                save()

            partial(training_legs(args, bootstrap, log, partial))
    save()
    log(json.dumps(result["summary"], indent=2))
    if path is not None:
        log(f"wrote {path}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``flinkai bench lora``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "lora",
        help="LoRA adapters: hot-plug and rollback latency, serving with changing and mixed "
        "adapters, and the streaming fine-tuning job (accuracy, exactly-once cost, recovery)",
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument("--legs", default="serving,accuracy,exactly-once,recovery",
                        help="legs to run (serving,accuracy,exactly-once,recovery)")  # fmt: skip
    parser.add_argument("--lora-model", default="SmolLM2-135M-Instruct-lora-r8",
                        help="the LoRA export (flinkai model export-llm --lora-rank 8)")  # fmt: skip
    parser.add_argument("--rows", default="plain,lora_base,single,mixed4,changing",
                        help="throughput rows (plain,lora_base,single,mixed4,changing)")  # fmt: skip
    parser.add_argument(
        "--seconds", type=float, default=15.0, help="seconds per throughput row (15)"
    )
    parser.add_argument("--rounds", type=int, default=4, help="rounds of the throughput rows (4)")
    parser.add_argument("--clients", type=int, default=16, help="requests in flight (16)")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens per request (32)")
    parser.add_argument("--change-every", type=float, default=2.0,
                        help="seconds between adapter changes in the changing row (2)")  # fmt: skip
    parser.add_argument("--pool", type=int, default=64, help="distinct prompts (64)")
    parser.add_argument("--train-examples", type=int, default=1000, help="streamed examples (1000)")
    parser.add_argument("--eval-rows", type=int, default=300, help="held-back rows (300)")
    parser.add_argument("--bootstrap", help="Kafka bootstrap (default: a local broker)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--update", action="store_true",
                        help="keep the other legs' results already in --json PATH")  # fmt: skip
    parser.set_defaults(handler=_handle)


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
