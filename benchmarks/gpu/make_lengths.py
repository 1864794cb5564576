"""Write ``ag_news_lengths.json``: the token-length histogram that ``check.py`` samples.

The GPU machine has no datasets and no tokenizer files, so the encoder rows there draw
sequence lengths from this histogram. It counts the real all-MiniLM-L6-v2 tokenizer's
tokens ([CLS] and [SEP] included, no truncation) of every AG News article as the
project embeds it: ``title + ". " + description`` (:func:`flinkai.datasets.load_ag_news`).

Run from the repository root with the project's venv, after ``flinkai model export``
(or anything else that puts ``tokenizer.json`` under the model folder)::

    .venv/bin/python benchmarks/gpu/make_lengths.py
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

__all__ = ["histogram", "main"]

OUT = Path(__file__).with_name("ag_news_lengths.json")


def histogram(lengths: list[int]) -> dict[str, int]:
    """``{length: count}`` with string keys (JSON), in ascending length order."""
    counts = Counter(lengths)
    return {str(n): counts[n] for n in sorted(counts)}


def main(argv: list[str] | None = None) -> int:
    from tokenizers import Tokenizer

    from flinkai.datasets import load_ag_news
    from flinkai.paths import models_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, help="tokenizer.json (the exported model's)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    path = args.tokenizer or models_dir() / "all-MiniLM-L6-v2" / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    texts = [text for _, text in load_ag_news()]
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    doc = {
        "source": "AG News test subset (../shared/datasets/ag_news/news.csv), "
        'text = title + ". " + description',
        "tokenizer": "sentence-transformers/all-MiniLM-L6-v2 tokenizer.json, [CLS]/[SEP] "
        "included, no truncation",
        "made_by": "benchmarks/gpu/make_lengths.py",
        "texts": len(lengths),
        "max_seq_length": 256,
        "histogram": histogram(lengths),
    }
    args.out.write_text(json.dumps(doc, indent=0) + "\n")
    print(f"wrote {args.out}: {len(lengths)} texts, lengths {min(lengths)}-{max(lengths)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
