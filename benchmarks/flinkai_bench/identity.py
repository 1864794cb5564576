"""``flinkai bench identity``: the product's deterministic outputs, to compare two trees.

Computes, through public ``flinkai`` APIs that have the same import path before and
after the layout move (issue 36), outputs that must not change when only files move:

* ``embeddings``: 64 AG News texts through the ONNX embedding backend (one thread, so
  the float reduction order is fixed): sha256 of the float32 bytes, vectors kept;
* ``anomaly/<model>/<series>``: the anomaly operator's per-point path
  (``parse_options`` -> ``open_model`` -> ``process_point``, snapshot stored and
  restored at every point, as the keyed operator does) on 3 NAB series, for the
  default model (z-score + likelihood) and for ``cad`` with the series' value range;
* ``drift/cusum``: :class:`~flinkai.drift.sequential.CusumDriftDetector` on a seeded
  synthetic embedding stream with a jump and a ramp: detection indices and events;
* ``llm/<i>``: greedy tokens of the exported SmolLM2 decoder for 4 fixed chats.

``--json OUT`` writes them; ``--compare A B`` reports each item as identical or
different and exits 1 on any difference. To run over another tree's ``flinkai``
(the "before" half), put that tree first on the path and drop the working folder
from it: ``PYTHONSAFEPATH=1 PYTHONPATH=<tree> python -m flinkai_bench.identity ...``.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import json
import platform
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CHATS",
    "IdentityConfig",
    "Item",
    "compare",
    "compute",
    "load",
    "main",
    "register",
]

#: Layout version of the JSON this module writes.
SCHEMA = 1

#: The fixed chats of the ``llm`` items (short, varied instructions).
CHATS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("user", "What is the capital of France?"),),
    (("system", "You are a concise news editor."),
     ("user", "Write a headline: stocks fell sharply on Monday after weak factory data.")),
    (("user", "List three uses of a stream processor."),),
    (("user", "Explain in one sentence what an anomaly score is."),),
)  # fmt: skip


@dataclass(frozen=True)
class IdentityConfig:
    """What :func:`compute` runs.

    Attributes:
        n_texts: AG News texts embedded (file order).
        nab_series: NAB files, relative to ``<datasets>/nab/data``.
        new_tokens: Greedy tokens per chat (no stop token: always this many).
        drift_seed: Seed of the synthetic drift stream.
        parts: Which item groups to compute.
    """

    n_texts: int = 64
    nab_series: tuple[str, ...] = (
        "realAdExchange/exchange-2_cpc_results.csv",
        "realTraffic/speed_7578.csv",
        "artificialWithAnomaly/art_daily_jumpsup.csv",
    )
    new_tokens: int = 16
    drift_seed: int = 7
    parts: tuple[str, ...] = ("embeddings", "anomaly", "drift", "llm")


@dataclass(frozen=True)
class Item:
    """One compared output.

    Attributes:
        sha256: Digest of ``array``'s bytes (if any) and of ``value``'s canonical JSON.
        value: Small exact output (token ids, indices, counts).
        array: The numbers behind the digest, kept so a difference has a size.
    """

    sha256: str
    value: Any = None
    array: np.ndarray | None = None

    @classmethod
    def of(cls, value: Any = None, array: np.ndarray | None = None) -> Item:
        """An item whose digest covers ``array`` (C order, its dtype) then ``value``."""
        h = hashlib.sha256()
        if array is not None:
            array = np.ascontiguousarray(array)
            h.update(array.tobytes())
        h.update(json.dumps(value, sort_keys=True).encode())
        return cls(h.hexdigest(), value, array)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON; the array as base64 of its bytes, so it reads back exactly."""
        out: dict[str, Any] = {"sha256": self.sha256, "value": self.value}
        if self.array is not None:
            # the array's bytes alone (e.g. the embeddings' float32 bytes), for citing
            out["array_sha256"] = hashlib.sha256(self.array.tobytes()).hexdigest()
            out["dtype"] = str(self.array.dtype)
            out["shape"] = list(self.array.shape)
            out["array_b64"] = base64.b64encode(self.array.tobytes()).decode("ascii")
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Item:
        """Inverse of :meth:`to_json`."""
        array = None
        if "array_b64" in data:
            raw = base64.b64decode(data["array_b64"])
            array = np.frombuffer(raw, dtype=data["dtype"]).reshape(data["shape"])
        return cls(str(data["sha256"]), data.get("value"), array)


# -- the items ---------------------------------------------------------------------------


def _embeddings(cfg: IdentityConfig, datasets: Path) -> dict[str, Item]:
    from flinkai.backends.onnx import OnnxEmbeddingBackend
    from flinkai.config import OnnxConfig
    from flinkai.datasets import load_ag_news

    texts = [text for _, text in load_ag_news(datasets / "ag_news" / "news.csv", cfg.n_texts)]
    with OnnxEmbeddingBackend(onnx=OnnxConfig(intra_op_threads=1)) as backend:
        vectors = np.asarray(backend.infer_batch(texts).outputs, dtype=np.float32)
    return {"embeddings": Item.of({"n": len(texts), "dim": int(vectors.shape[1])}, vectors)}


def _read_nab(path: Path) -> tuple[list[int], list[float]]:
    """NAB's ``timestamp,value`` CSV as epoch ms (UTC) and floats."""
    times, values = [], []
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            ts = datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
            times.append(round(ts.timestamp() * 1000))
            values.append(float(row["value"]))
    return times, values


def _operator_scores(options: Mapping[str, str], times: list[int], values: list[float]) -> Item:
    """One key through the operator's Flink-free per-point path."""
    from flinkai.anomaly.keyed import open_model
    from flinkai.operators.anomaly import parse_options, process_point

    config = parse_options({"key": "k", "time": "t", "value": "v", **options}).detector
    model = open_model(config.model, (config.value_min, config.value_max))
    stored: Any = None
    scores = np.full(len(values), np.nan)
    flagged: list[int] = []
    dead: dict[str, int] = {}
    for i, (ts, v) in enumerate(zip(times, values, strict=True)):
        out, snap = process_point(stored, ("series", ts, v, None, None, None), model, config)
        if out[6] is not None:  # a dead letter: the state is unchanged
            dead[str(out[6])] = dead.get(str(out[6]), 0) + 1
            continue
        stored = snap
        scores[i] = out[3]
        if out[4]:
            flagged.append(i)
    value = {"n": len(values), "anomalies": flagged, "dead": dead, "version": str(out[5])}
    return Item.of(value, scores)


def _anomaly(cfg: IdentityConfig, datasets: Path) -> dict[str, Item]:
    items: dict[str, Item] = {}
    for name in cfg.nab_series:
        times, values = _read_nab(datasets / "nab" / "data" / name)
        items[f"anomaly/zscore/{name}"] = _operator_scores({}, times, values)
        # NAB's own input range: the file's min and max.
        cad = {"model": "cad", "value_min": repr(min(values)), "value_max": repr(max(values))}
        items[f"anomaly/cad/{name}"] = _operator_scores(cad, times, values)
    return items


def drift_stream(seed: int, dim: int = 32) -> np.ndarray:
    """1,200 steady events, a jump to a new mix of topics, then a slow ramp to a third.

    Seeded, so both trees see the same vectors; noise large enough that the null
    distances have a real spread.
    """
    rng = np.random.default_rng(seed)
    a, b, c = rng.standard_normal((3, dim))
    steady = a + 1.5 * rng.standard_normal((1200, dim))
    jumped = 0.8 * a + 0.6 * b + 1.5 * rng.standard_normal((900, dim))
    w = np.linspace(0.0, 1.0, 1400)[:, None]
    ramp = (1 - w) * (0.8 * a + 0.6 * b) + w * c + 1.5 * rng.standard_normal((1400, dim))
    stream: np.ndarray = np.concatenate([steady, jumped, ramp])
    return stream


def _drift(cfg: IdentityConfig, datasets: Path) -> dict[str, Item]:
    from flinkai.drift.sequential import CusumConfig, CusumDriftDetector

    # Fewer, shorter calibration chains than the default: the same code path, in seconds.
    det = CusumDriftDetector(CusumConfig(settle_s=30.0, chains=64, chain_events=1000))
    hits: list[int] = []
    numbers: list[list[float]] = []
    thresholds: list[list[float]] = []
    for i, x in enumerate(drift_stream(cfg.drift_seed)):
        event = det.update(x, event_time_s=0.5 * i)
        if det.thresholds is not None and (
            not thresholds or thresholds[-1] != list(det.thresholds)
        ):
            thresholds.append(list(det.thresholds))
        if event is not None:
            hits.append(i)
            numbers.append([event.period_start_s, event.period_end_s, event.jsd, event.z,
                            float(event.n), event.significance, event.shift])  # fmt: skip
    value = {"detections": hits, "drift_count": det.drift_count}
    array = np.asarray([v for row in numbers + thresholds for v in row], dtype=np.float64)
    return {"drift/cusum": Item.of(value, array)}


def _llm(cfg: IdentityConfig, datasets: Path) -> dict[str, Item]:
    from flinkai.llm.decoder import DecoderOptions, OnnxDecoder
    from flinkai.llm.generate import greedy
    from flinkai.llm.tokenizer import LlmTokenizer

    decoder = OnnxDecoder.load(options=DecoderOptions(intra_op_threads=1))
    artifacts = decoder.artifacts
    tokenizer = LlmTokenizer(
        artifacts.tokenizer_path,
        artifacts.chat_template_path.read_text(encoding="utf-8"),
        decoder.manifest.special_tokens,
    )
    items: dict[str, Item] = {}
    for i, chat in enumerate(CHATS):
        ids = tokenizer.apply_chat_template([{"role": r, "content": c} for r, c in chat])
        got = greedy(decoder, ids, max_new_tokens=cfg.new_tokens, stop_ids=())
        value = {"prompt_tokens": len(ids), "tokens": [int(t) for t in got.token_ids]}
        items[f"llm/{i}"] = Item.of(value)
    return items


_PARTS: dict[str, Callable[[IdentityConfig, Path], dict[str, Item]]] = {
    "embeddings": _embeddings,
    "anomaly": _anomaly,
    "drift": _drift,
    "llm": _llm,
}


def _tree() -> dict[str, Any]:
    """Which ``flinkai`` ran: its folder and that checkout's commit and dirtiness."""
    import flinkai

    root = Path(flinkai.__file__).resolve().parent.parent
    info: dict[str, Any] = {"flinkai": str(root / "flinkai")}
    try:
        git = ["git", "-C", str(root)]
        info["commit"] = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True,
                                        text=True, check=True).stdout.strip()  # fmt: skip
        status = subprocess.run([*git, "status", "--porcelain", "--", "flinkai"],
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
        info["dirty_flinkai_files"] = [line[3:] for line in status.splitlines()]
    except (OSError, subprocess.CalledProcessError):
        info["commit"] = None
    return info


def compute(cfg: IdentityConfig, datasets: Path) -> dict[str, Any]:
    """Every item of ``cfg.parts``, with where it ran, as JSON-ready data."""
    import onnxruntime

    items: dict[str, Item] = {}
    for part in cfg.parts:
        items.update(_PARTS[part](cfg, datasets))
    return {
        "schema": SCHEMA,
        "tree": _tree(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "onnxruntime": onnxruntime.__version__,
        "items": {name: item.to_json() for name, item in items.items()},
    }


# -- comparing ---------------------------------------------------------------------------


def load(path: Path) -> dict[str, Item]:
    """The items of a JSON file :func:`compute`'s output was written to."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA}")
    return {name: Item.from_json(item) for name, item in data["items"].items()}


def _difference(a: Item, b: Item) -> str:
    """What differs between two items with different digests."""
    parts = []
    if a.value != b.value:
        parts.append("value differs")
        if isinstance(a.value, dict) and isinstance(b.value, dict):
            keys = sorted(k for k in a.value.keys() | b.value.keys()
                          if a.value.get(k) != b.value.get(k))  # fmt: skip
            parts[-1] += f" ({', '.join(keys)})"
    if a.array is not None and b.array is not None:
        if a.array.shape != b.array.shape:
            parts.append(f"shape {list(a.array.shape)} vs {list(b.array.shape)}")
        else:
            x, y = a.array.astype(np.float64), b.array.astype(np.float64)
            nan_x, nan_y = np.isnan(x), np.isnan(y)
            both = ~(nan_x | nan_y)
            diff = float(np.abs(x[both] - y[both]).max()) if both.any() else 0.0
            parts.append(f"max abs diff {diff:.3g}")
            if (nan_x != nan_y).any():
                parts.append(f"{int((nan_x != nan_y).sum())} NaN positions differ")
    elif (a.array is None) != (b.array is None):
        parts.append("one side has no array")
    return "; ".join(parts) or "digest differs"


def compare(a: Mapping[str, Item], b: Mapping[str, Item]) -> tuple[list[str], bool]:
    """One line per item (``identical`` or ``different: ...``) and whether all match.

    An item present on one side only is a difference.
    """
    lines: list[str] = []
    same = True
    for name in sorted(a.keys() | b.keys()):
        if name not in a or name not in b:
            lines.append(f"{name}: different (only in {'B' if name not in a else 'A'})")
            same = False
        elif a[name].sha256 == b[name].sha256:
            extra = ""
            if a[name].array is not None:
                extra = f" (sha256 {a[name].sha256[:12]})"
            lines.append(f"{name}: identical{extra}")
        else:
            lines.append(f"{name}: different ({_difference(a[name], b[name])})")
            same = False
    return lines, same


def _markdown(paths: Sequence[Path], lines: Sequence[str], verdict: str) -> str:
    """The verdicts as a markdown table (generated; do not edit by hand)."""
    out = [
        f"# flinkai bench identity: {paths[0].name} (A) vs {paths[1].name} (B)",
        "",
        "Generated by `flinkai bench identity --compare A B --markdown OUT`.",
        "",
        "| item | verdict |",
        "|---|---|",
    ]
    for line in lines:
        name, _, verdict_text = line.partition(": ")
        out.append(f"| `{name}` | {verdict_text} |")
    out += ["", f"**{verdict}**", ""]
    return "\n".join(out)


# -- command line ------------------------------------------------------------------------


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, help="compute the items and write them here")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"),
                        help="compare two such files; exit 1 on any difference")  # fmt: skip
    parser.add_argument("--markdown", type=Path,
                        help="with --compare: also write the verdicts here as markdown")  # fmt: skip
    parser.add_argument("--parts", default=",".join(IdentityConfig().parts),
                        help="comma-separated item groups (default: all)")  # fmt: skip
    parser.add_argument("--datasets", type=Path, default=None,
                        help="data sets root (default: flinkai.datasets.datasets_dir())")  # fmt: skip
    parser.add_argument("--timing", type=Path, metavar="DIR",
                        help="tabulate DIR's interleaved embed/kvcache before/after runs "
                        "(to --markdown, else stdout)")  # fmt: skip
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    if args.timing:
        from flinkai_bench.identity_timing import timing_markdown

        text = timing_markdown(args.timing)
        if args.markdown:
            args.markdown.write_text(text, encoding="utf-8")
        print(text)
        return 0
    if args.compare:
        lines, same = compare(load(args.compare[0]), load(args.compare[1]))
        verdict = "all identical" if same else "DIFFERENCES FOUND"
        print("\n".join(lines))
        print(verdict)
        if args.markdown:
            args.markdown.write_text(_markdown(args.compare, lines, verdict), encoding="utf-8")
        return 0 if same else 1
    if args.json is None:
        print("flinkai bench identity: give --json OUT or --compare A B", file=sys.stderr)
        return 2
    from flinkai.datasets import datasets_dir

    parts = tuple(p for p in args.parts.split(",") if p)
    unknown = [p for p in parts if p not in _PARTS]
    if unknown:
        print(f"unknown part(s) {unknown}; known: {list(_PARTS)}", file=sys.stderr)
        return 2
    datasets = args.datasets or datasets_dir()
    result = compute(IdentityConfig(parts=parts), datasets)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for name, item in result["items"].items():
        print(f"{name}: {item['sha256'][:16]}")
    print(f"flinkai from {result['tree']['flinkai']}; wrote {args.json}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``flinkai bench identity``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "identity",
        help="deterministic product outputs (embeddings, anomaly, drift, LLM) to compare trees",
        description=__doc__.split("\n")[0] if __doc__ else None,
    )
    _add_arguments(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m flinkai_bench.identity``: the same command without the product's CLI."""
    parser = argparse.ArgumentParser(prog="python -m flinkai_bench.identity")
    _add_arguments(parser)
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
