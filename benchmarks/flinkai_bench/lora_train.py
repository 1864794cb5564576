"""The training legs of ``flinkai bench lora``: does the adapter learn, what does exactly-once cost,
how long is recovery.

Three legs, each a function returning a JSON-ready dict (``flinkai bench lora`` calls them):

:func:`accuracy_leg`
    AG News topic labelling (instruction + article -> World, Sports, Business or
    Sci/Tech). The shared file is shuffled with a fixed seed; the first ``eval_rows``
    rows are held back and never trained on, the next ``train_examples`` are streamed
    to the trainer in order, in batches of 4 (peft LoRA r = 8 on q/v, answer-only
    loss; the job's trainer, :class:`~flinkai.finetune.trainer.LoraTrainer`). The
    base model and the adapter answer every held-back row through the serving path:
    the ONNX decoder of the LoRA export (``OnnxDecoder`` with the adapter's matrices as
    inputs, zeros for the base), greedy, up to 16 new tokens, the prompt rendered by
    the serving chat template. The answer's label is the label named first anywhere
    in it (with ``Science``/``Technology``/``Tech``/``Sport`` as aliases): a fair parse
    for a base model that answers in sentences.
:func:`exactly_once_leg`
    ``jobs/finetune_lora.sql`` on the MiniCluster over a backlog of examples, with
    checkpoints every few seconds and transactional publication (exactly-once), and
    with checkpointing off (delivery ``none``), alternating for a few rounds. Examples
    per second come from the create times of the first and last version records: the
    sink writes each record when the operator emits it (inside an open transaction
    for the exactly-once run), so both variants are timed the same way, without
    commit delays.
:func:`recovery_leg`
    The job on a standalone cluster, its TaskManager SIGKILLed late in a checkpoint
    interval and a new one started: the time from the kill to the next version a
    ``read_committed`` reader sees, and whether every version the killed attempt wrote
    (then aborted) was written again by the restored attempt with the same bytes.

The job legs take any LoRA export (``export_dir``): the real SmolLM2 one, or the tiny
random model, whose steps are fast, so checkpointing's share of the time is larger.

Benchmarks measure and report; they never assert on timings.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from flinkai.config import Config, load_config
from flinkai.datasets import load_ag_news
from flinkai.finetune.base import default_lora_dir, load_base
from flinkai.finetune.examples import BadExample, Example, encode_example
from flinkai.finetune.trainer import LoraTrainer, TrainerConfig
from flinkai.kafka.adapter_feed import adapter_topic_configs
from flinkai.kafka.admin import IsolationLevel, Record, create_topics, produce, read_to_end_offsets
from flinkai.llm.lora import Adapter
from flinkai.runtime.runner import RunOptions, run_script

__all__ = [
    "INSTRUCTION",
    "LABELS",
    "AccuracyOptions",
    "accuracy_leg",
    "ag_news_split",
    "evaluate",
    "exactly_once_leg",
    "example_records",
    "instruction",
    "parse_label",
    "recovery_leg",
    "training_legs",
]

Progress = Callable[[str], None]

LABELS = ("World", "Sports", "Business", "Sci/Tech")
#: What the user asks; the article follows it, so every prompt shares this prefix.
INSTRUCTION = (
    "Classify the topic of this news article as World, Sports, Business or Sci/Tech. "
    "Answer with the topic only.\n\nArticle: "
)
#: Words that name a label in a free answer (lower case), besides the label itself.
_ALIASES = {
    "World": ("world",),
    "Sports": ("sports", "sport"),
    "Business": ("business",),
    "Sci/Tech": ("sci/tech", "science", "technology", "tech", "sci"),
}
_ALIAS_RE = re.compile(
    r"\b(" + "|".join(re.escape(a) for a in sorted(
        {a for v in _ALIASES.values() for a in v}, key=len, reverse=True)) + r")\b"
)  # fmt: skip
_LABEL_OF = {a: label for label, aliases in _ALIASES.items() for a in aliases}
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "jobs" / "finetune_lora.sql"


def instruction(text: str) -> str:
    """The user message for one article."""
    return INSTRUCTION + text


def parse_label(answer: str) -> str | None:
    """The label an answer names first (aliases count), or None."""
    m = _ALIAS_RE.search(answer.lower())
    return None if m is None else _LABEL_OF[m.group(1)]


def ag_news_split(
    eval_rows: int, train_examples: int, seed: int = 0
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(held-back, training) rows as (label, text): disjoint, from one seeded shuffle."""
    rows = [(LABELS[cls - 1], text) for cls, text in load_ag_news()]
    random.Random(seed).shuffle(rows)
    if eval_rows + train_examples > len(rows):
        raise ValueError(f"{eval_rows} + {train_examples} rows asked; AG News has {len(rows)}")
    return rows[:eval_rows], rows[eval_rows : eval_rows + train_examples]


def example_records(rows: Sequence[tuple[str, str]], adapter: str = "ag-news") -> list[bytes]:
    """The job's input records for training rows."""
    return [
        json.dumps(
            {"id": f"ag-{i}", "instruction": instruction(text), "target": label, "adapter": adapter}
        ).encode()
        for i, (label, text) in enumerate(rows)
    ]


@dataclass(frozen=True)
class AccuracyOptions:
    """Settings of :func:`accuracy_leg`.

    Attributes:
        train_examples: Examples streamed to the trainer (at most 1,000 for the target).
        eval_rows: Held-back rows both models answer (at least 300 for the target).
        learning_rate: AdamW's learning rate.
        threads: torch threads for training and ORT threads for evaluation.
        max_new_tokens: Answer budget of both models.
        seed: Shuffle seed and LoRA init seed.
        export_dir: The LoRA export (default ``export-llm --lora-rank 8``'s folder).
        evaluate_base: Also measure the base model (the slow half of the leg).
        adapter_out: Also write the trained adapter's ``.onnx_adapter`` bytes here.
    """

    train_examples: int = 1000
    eval_rows: int = 300
    learning_rate: float = 2e-3  # the measured run's (docs/finetune.md)
    threads: int = 2
    max_new_tokens: int = 16
    seed: int = 0
    export_dir: str | None = None
    evaluate_base: bool = True
    adapter_out: str | None = None


def evaluate(
    export_dir: Path,
    rows: Sequence[tuple[str, str]],
    adapter: Adapter | None,
    max_new_tokens: int = 16,
    threads: int = 2,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Accuracy of the served decoder (with ``adapter``, or the base) on ``rows``.

    Greedy decoding (argmax, first index on ties, as ``flinkai.llm.generate``) up to
    ``max_new_tokens`` or a stop id. The prompt's shared prefix (template and
    instruction) is prefilled once per model and reused, as the serving prefix cache
    would. A decode also ends as soon as its answer names a label followed by another
    character: later tokens can no longer change the first label named, so the result
    is the one the full budget would give, at a fraction of a chatty base model's cost.
    """
    import numpy as np

    from flinkai.llm.decoder import DecoderOptions, OnnxDecoder
    from flinkai.llm.tokenizer import LlmTokenizer

    decoder = OnnxDecoder.load(export_dir, DecoderOptions(intra_op_threads=threads))
    art = decoder.artifacts
    tok = LlmTokenizer(art.tokenizer_path, art.chat_template_path.read_text(),
                       decoder.manifest.special_tokens)  # fmt: skip
    stops = set(decoder.manifest.eos_token_ids)
    served = decoder.with_adapter(adapter)
    prompts = [tok.apply_chat_template([{"role": "user", "content": instruction(t)}])
               for _, t in rows]  # fmt: skip
    shared = _common_prefix(prompts)
    prefix = served.forward(shared)[1] if shared else None
    correct, answered, tokens, started = 0, 0, 0, time.perf_counter()
    per_class: dict[str, list[int]] = {label: [0, 0] for label in LABELS}
    samples: list[dict[str, Any]] = []
    for i, ((label, _), ids) in enumerate(zip(rows, prompts, strict=True)):
        logits, cache = served.forward(ids[len(shared) :], prefix)
        out: list[int] = []
        text = ""
        while len(out) < max_new_tokens:
            nxt = int(np.argmax(logits))
            if nxt in stops:
                break
            out.append(nxt)
            text = tok.decode(out)
            if _settled(text) or len(out) == max_new_tokens:
                break
            logits, cache = served.forward([nxt], cache)
        tokens += len(out)
        got = parse_label(text)
        answered += got is not None
        correct += got == label
        per_class[label][0] += got == label
        per_class[label][1] += 1
        if i < 8:
            samples.append({"label": label, "answer": text, "parsed": got})
        if progress is not None and (i + 1) % 50 == 0:
            progress(f"  {i + 1}/{len(rows)}: accuracy so far {correct / (i + 1):.3f}")
    return {
        "accuracy": correct / len(rows),
        "rows": len(rows),
        "answered_with_a_label": answered / len(rows),
        "per_class": {k: v[0] / v[1] for k, v in per_class.items() if v[1]},
        "seconds": round(time.perf_counter() - started, 1),
        "new_tokens_mean": tokens / len(rows),
        "max_new_tokens": max_new_tokens,
        "shared_prefix_tokens": len(shared),
        "samples": samples,
    }


def _settled(text: str) -> bool:
    """Whether the first label ``text`` names is final: its match ends before the text does."""
    m = _ALIAS_RE.search(text.lower())
    return m is not None and m.end() < len(text)


def _common_prefix(prompts: Sequence[Sequence[int]]) -> list[int]:
    """The longest token prefix all prompts share, less one token (a forward needs a new one)."""
    first = prompts[0]
    n = min(len(p) for p in prompts) - 1
    for p in prompts[1:]:
        k = 0
        while k < n and p[k] == first[k]:
            k += 1
        n = k
    return list(first[:n])


def accuracy_leg(
    options: AccuracyOptions | None = None,
    progress: Progress | None = None,
    on_partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Base vs adapter accuracy on held-back AG News rows (see the module docstring).

    Trains first, then evaluates the adapter, then the base model; ``on_partial`` gets
    the result so far after each stage (a long run keeps what it measured).
    """
    o = options or AccuracyOptions()
    say = progress or (lambda line: None)
    partial = on_partial or (lambda result: None)
    export_dir = Path(o.export_dir) if o.export_dir else default_lora_dir(8)
    held, train = ag_news_split(o.eval_rows, o.train_examples, o.seed)
    out: dict[str, Any] = {"options": asdict(o), "export_dir": str(export_dir),
                           "eval_via": "onnx decoder of the LoRA export (serving path)",
                           "base_accuracy": None, "adapter_accuracy": None}  # fmt: skip
    base = load_base(export_dir)
    config = TrainerConfig(learning_rate=o.learning_rate, threads=o.threads, seed=o.seed)
    trainer = LoraTrainer(base.model, base.model_version, config)
    encoded = []
    for i, record in enumerate(example_records(train)):
        data = json.loads(record)
        ex = Example(data["id"], data["instruction"], data["target"], data["adapter"])
        e = encode_example(base.tokenizer, ex, base.stop_id, config.max_tokens)
        if isinstance(e, BadExample):
            raise ValueError(f"training row {i} does not encode: {e}")
        encoded.append(e)
    say(f"training on {len(encoded)} examples (batch {config.batch_size}, lr {o.learning_rate})")
    losses, started = [], time.perf_counter()
    for s in range(0, len(encoded) - config.batch_size + 1, config.batch_size):
        losses.append(trainer.train_step(encoded[s : s + config.batch_size]))
        if trainer.step % 10 == 0:
            rate = trainer.consumed / (time.perf_counter() - started)
            say(f"  step {trainer.step}: loss {statistics.fmean(losses[-10:]):.3f}, "
                f"{rate:.3f} examples/s")  # fmt: skip
    train_s = time.perf_counter() - started
    adapter = trainer.adapter("ag-news", 1)
    data = adapter.encode()
    out["training"] = {
        "examples": trainer.consumed,
        "steps": trainer.step,
        "seconds": round(train_s, 1),
        "examples_per_s": trainer.consumed / train_s,
        "threads": o.threads,
        "loss_per_10_steps": [
            round(statistics.fmean(losses[i : i + 10]), 4) for i in range(0, len(losses), 10)
        ],
        "adapter_bytes": len(data),
        "adapter_sha256": hashlib.sha256(data).hexdigest(),
    }
    if o.adapter_out:
        Path(o.adapter_out).write_bytes(data)
    partial(out)
    say(f"adapter on {len(held)} held-back rows")
    out["adapter"] = evaluate(export_dir, held, adapter, o.max_new_tokens, o.threads, say)
    out["adapter_accuracy"] = out["adapter"]["accuracy"]
    say(f"adapter accuracy {out['adapter_accuracy']:.3f}")
    partial(out)
    if o.evaluate_base:
        say(f"base model on {len(held)} held-back rows")
        out["base"] = evaluate(export_dir, held, None, o.max_new_tokens, o.threads, say)
        out["base_accuracy"] = out["base"]["accuracy"]
        say(f"base accuracy {out['base_accuracy']:.3f}")
        partial(out)
    return out


# -- the job on Flink ------------------------------------------------------------------


@contextmanager
def _broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from flinkai.testing import session_broker

    with session_broker() as broker:
        yield broker.bootstrap


def _job_vars(topics: tuple[str, str, str], bootstrap: str, export_dir: Path, publish_every: int,
              threads: int, learning_rate: float, delivery: str) -> dict[str, str]:  # fmt: skip
    return {
        "KAFKA_BOOTSTRAP": bootstrap,
        "EXAMPLES_TOPIC": topics[0],
        "ADAPTERS_TOPIC": topics[1],
        "DLQ_TOPIC": topics[2],
        "GROUP_ID": f"g-{topics[0]}",
        "SCAN_BOUNDED_MODE": "unbounded",
        "FINETUNE_MODEL": str(export_dir),
        "ADAPTER": "ag-news",
        "PUBLISH_EVERY": str(publish_every),
        "LEARNING_RATE": str(learning_rate),
        "TORCH_THREADS": str(threads),
        "DELIVERY_GUARANTEE": delivery,
    }


def _topics(tag: str, bootstrap: str) -> tuple[str, str, str]:
    run = uuid.uuid4().hex[:8]
    topics = (f"lora-ex-{tag}-{run}", f"lora-adapters-{tag}-{run}", f"lora-dlq-{tag}-{run}")
    create_topics(bootstrap, [topics[0], topics[2]])
    create_topics(bootstrap, [topics[1]], configs=adapter_topic_configs())
    return topics


def _versions(bootstrap: str, topic: str, committed: bool = True) -> list[Record]:
    isolation: IsolationLevel = "read_committed" if committed else "read_uncommitted"
    return read_to_end_offsets(bootstrap, topic, isolation, timeout_s=30.0).records


def _wait_versions(bootstrap: str, topic: str, n: int, timeout_s: float, committed: bool) -> list:
    deadline = time.monotonic() + timeout_s
    got: list[Record] = []
    while time.monotonic() < deadline:
        got = _versions(bootstrap, topic, committed)
        if len(got) >= n:
            return got
        time.sleep(2.0)
    raise TimeoutError(f"{len(got)} of {n} versions on {topic} after {timeout_s:.0f} s")


def _rate(records: Sequence[Record], publish_every: int) -> dict[str, Any]:
    """Examples/s between the first and the last version, from their create times."""
    span_s = (records[-1].timestamp_ms - records[0].timestamp_ms) / 1000
    examples = (len(records) - 1) * publish_every
    gaps = [(b.timestamp_ms - a.timestamp_ms) / 1000 for a, b in itertools.pairwise(records)]
    return {"versions": len(records), "examples_timed": examples, "seconds": round(span_s, 2),
            "examples_per_s": examples / span_s if span_s > 0 else None,
            "version_gap_s_median": statistics.median(gaps) if gaps else None}  # fmt: skip


def _run_once(bootstrap: str, config: Config, export_dir: Path, records: list[bytes],
              publish_every: int, threads: int, learning_rate: float, delivery: str,
              tag: str, timeout_s: float) -> dict[str, Any]:  # fmt: skip
    topics = _topics(tag, bootstrap)
    produce(bootstrap, topics[0], records)  # a backlog: training is the bottleneck
    variables = _job_vars(topics, bootstrap, export_dir, publish_every, threads, learning_rate,
                          delivery)  # fmt: skip
    result = run_script(SCRIPT, config, RunOptions(variables=variables, wait=False))
    want = len(records) // publish_every
    try:
        # Timed on what the sink wrote (read_uncommitted): both runs alike, no commit wait.
        got = _wait_versions(bootstrap, topics[1], want, timeout_s, committed=False)
    finally:
        if result.job_client is not None:
            with suppress(Exception):  # a job that already ended
                result.job_client.cancel().result()
    return {"delivery": delivery, **_rate(got[:want], publish_every)}


def exactly_once_leg(
    bootstrap: str | None = None,
    export_dir: str | None = None,
    examples: int = 240,
    publish_every: int = 20,
    checkpoint_interval_ms: int = 5000,
    threads: int = 2,
    learning_rate: float = 1e-3,
    rounds: int = 2,
    timeout_s: float = 900.0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The job's examples/s with checkpoints + transactional publication vs checkpointing off.

    The two variants alternate for ``rounds`` rounds (a shared machine's load drifts);
    the loss compares their mean rates.
    """
    say = progress or (lambda line: None)
    folder = Path(export_dir) if export_dir else default_lora_dir(8)
    _, train = ag_news_split(300, examples)
    records = example_records(train)
    base = load_config(env={})
    runs: dict[str, list[dict[str, Any]]] = {"exactly_once": [], "no_checkpoints": []}
    variants = (("exactly_once", checkpoint_interval_ms, "exactly-once"),
                ("no_checkpoints", 0, "none"))  # fmt: skip
    with _broker(bootstrap) as servers, tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for name, interval, delivery in variants if r % 2 == 0 else variants[::-1]:
                say(f"round {r + 1}, {name}: {examples} examples, a version every {publish_every}")
                # Checkpoints to files: SmolLM2's trainer state (about 5.6 MB) is above the
                # 5 MB that the MiniCluster's default in-memory checkpoint storage takes.
                folder_uri = (Path(tmp) / f"checkpoints-{name}-{r}").as_uri()
                conf = {**base.runtime.flink_conf, "execution.checkpointing.dir": folder_uri}
                config = base.with_overrides(
                    runtime={"checkpoint_interval_ms": interval, "flink_conf": conf}
                )
                got = _run_once(servers, config, folder, records, publish_every, threads,
                                learning_rate, delivery, f"{name}-{r}", timeout_s)  # fmt: skip
                runs[name].append(got)
                say(f"  {got['examples_per_s']:.3f} examples/s")
    mean = {k: statistics.fmean(x["examples_per_s"] for x in v) for k, v in runs.items()}
    eo, off = mean["exactly_once"], mean["no_checkpoints"]
    return {
        "runs": runs,
        "examples_per_s_mean": mean,
        "export_dir": str(folder),
        "examples": examples,
        "publish_every": publish_every,
        "checkpoint_interval_ms": checkpoint_interval_ms,
        "throughput_loss_pct": 100.0 * (1 - eo / off) if eo and off else None,
    }


def recovery_leg(
    bootstrap: str | None = None,
    export_dir: str | None = None,
    examples: int = 600,
    publish_every: int = 4,
    per_second: float = 4.0,
    checkpoint_interval_ms: int = 2000,
    threads: int = 2,
    learning_rate: float = 1e-3,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """TaskManager SIGKILL mid-stream -> the next committed version (see the module docstring).

    The input (``examples`` at ``per_second``) must still be flowing after the restore:
    a restored job resumes training with the next example that arrives
    (docs/finetune.md, "Figures").
    """
    from flinkai.runtime.cluster import LocalFlinkCluster
    from flinkai.runtime.environment import Target

    say = progress or (lambda line: None)
    folder = Path(export_dir) if export_dir else default_lora_dir(8)
    _, train = ag_news_split(300, examples)
    records = example_records(train)
    config = load_config(env={}).with_overrides(
        runtime={"checkpoint_interval_ms": checkpoint_interval_ms, "restart_attempts": 12,
                 "restart_delay_ms": 1000}
    )  # fmt: skip
    with (
        _broker(bootstrap) as servers,
        tempfile.TemporaryDirectory() as tmp,
        LocalFlinkCluster(Path(tmp) / "flink", slots=1) as cluster,
    ):
        topics = _topics("recovery", servers)
        variables = _job_vars(topics, servers, folder, publish_every, threads,
                              learning_rate, "exactly-once")  # fmt: skip
        result = run_script(SCRIPT, config, RunOptions(target=Target(cluster.jobmanager),
                                                       variables=variables, wait=False))  # fmt: skip
        job_id = result.job_id or ""
        try:
            producer = _paced(servers, topics[0], records, per_second)
            before = _wait_versions(servers, topics[1], 3, 600.0, committed=True)
            say(f"{len(before)} versions committed; killing late in a checkpoint interval")
            first_ack = cluster.api.latest_checkpoint_ack_ms(job_id)
            while cluster.api.latest_checkpoint_ack_ms(job_id) <= first_ack:
                time.sleep(0.2)
            # Late in the interval, so the open transaction holds a version or two that
            # the restored attempt must write again (the replay check needs them).
            time.sleep(0.9 * checkpoint_interval_ms / 1000)
            # The next version is one trained after the restore: numbered above every
            # version written before the kill (a transaction of a checkpoint that
            # completed just before the kill may still be committed after it).
            written = [_version_of(r) for r in _versions(servers, topics[1], committed=False)]
            seen = len(_versions(servers, topics[1]))
            cluster.kill_taskmanager()
            killed = time.time()
            cluster.start_taskmanager(wait=False)
            last_before = max(written, default=0)
            next_at = None
            while time.time() - killed < 600:
                if any(_version_of(r) > last_before for r in _versions(servers, topics[1])):
                    next_at = time.time()
                    break
                time.sleep(0.5)
            restored = (cluster.api.checkpoints(job_id).get("latest") or {}).get("restored")
            # Let the job publish a few more versions after the restore: the versions the
            # killed attempt wrote (aborted) are written again by the restored one.
            with suppress(TimeoutError):
                _wait_versions(servers, topics[1], last_before + 3, 120.0, committed=True)
            committed = _versions(servers, topics[1])
            raw = _versions(servers, topics[1], committed=False)
            producer.join(timeout=1)
        finally:
            if result.job_client is not None:
                with suppress(Exception):  # a job that already ended
                    result.job_client.cancel().result()
    copies: dict[int, set[bytes]] = {}
    for r in raw:
        copies.setdefault(_version_of(r), set()).add(r.value or b"")
    final = {_version_of(r): r.value or b"" for r in committed}
    replayed = sorted(v for v in copies if sum(1 for r in raw if _version_of(r) == v) > 1)
    out = {
        "kill_to_next_version_s": None if next_at is None else round(next_at - killed, 2),
        "versions_written_twice": replayed,
        # Each version the killed attempt wrote (then aborted) and the restored attempt
        # wrote again: the same bytes both times, and the same as the committed copy.
        "replay_identical": (
            all(copies[v] == {final[v]} for v in replayed if v in final) if replayed else None
        ),
        "versions_committed_at_kill": seen,
        "versions_written_before_kill": last_before,
        "restored_checkpoint": restored,
        "publish_every": publish_every,
        "checkpoint_interval_ms": checkpoint_interval_ms,
        "note": "includes the replacement TaskManager's start, the Python worker's start, "
        "loading the base model, the restore and one training step",
    }
    say(f"kill -> next committed version: {out['kill_to_next_version_s']} s")
    return out


def _version_of(record: Record) -> int:
    return int(dict(record.headers)["version"].decode())


def training_legs(
    args: Any, bootstrap: str, log: Progress, save_partial: Callable[[dict], None] | None = None
) -> dict[str, Any]:
    """The legs ``args.legs`` names (accuracy, exactly-once, recovery), for ``flinkai bench lora``.

    ``args`` carries ``legs``, ``lora_model`` (the LoRA export's folder name under the
    models folder), ``train_examples``, ``eval_rows`` and ``seed``; ``save_partial`` is
    called with the result so far after each leg.
    """
    from flinkai.llm.artifacts import default_llm_dir

    legs = set(str(args.legs).split(","))
    folder = str(default_llm_dir(args.lora_model))
    lr = float(getattr(args, "learning_rate", None) or AccuracyOptions.learning_rate)
    out: dict[str, Any] = {"export_dir": folder, "learning_rate": lr}

    def saved() -> None:
        if save_partial is not None:
            save_partial(out)

    if "accuracy" in legs:
        acc = accuracy_leg(
            AccuracyOptions(train_examples=args.train_examples, eval_rows=args.eval_rows,
                            learning_rate=lr, seed=args.seed, export_dir=folder),
            progress=log,
        )  # fmt: skip
        out.update(accuracy=acc, base_accuracy=acc["base_accuracy"],
                   adapter_accuracy=acc["adapter_accuracy"], eval_rows=args.eval_rows,
                   train_examples=acc["training"]["examples"])  # fmt: skip
        saved()
    if "exactly-once" in legs:
        eo = exactly_once_leg(bootstrap, folder, learning_rate=lr, progress=log)
        out.update(exactly_once=eo, throughput_loss_pct=eo["throughput_loss_pct"])
        saved()
    if "recovery" in legs:
        rec = recovery_leg(bootstrap, folder, learning_rate=lr, progress=log)
        out.update(recovery=rec, recovery_s=rec["kill_to_next_version_s"],
                   replay_identical=rec["replay_identical"])  # fmt: skip
        saved()
    return out


def _paced(bootstrap: str, topic: str, records: list[bytes], per_second: float) -> Any:
    import threading

    def run() -> None:
        for r in records:
            produce(bootstrap, topic, [r])
            time.sleep(1 / per_second)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
