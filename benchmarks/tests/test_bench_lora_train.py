"""The training legs' pure parts: the label parse, the held-back split, the shared prefix."""

from __future__ import annotations

import json

import pytest

from flinkai.datasets import datasets_dir
from flinkai_bench.lora_train import (
    INSTRUCTION,
    _common_prefix,
    _settled,
    ag_news_split,
    example_records,
    parse_label,
)


@pytest.mark.parametrize(
    ("answer", "label"),
    [
        ("Sports", "Sports"),
        ("Sci/Tech<|im_end|>", "Sci/Tech"),
        ("The topic of this article is Business.", "Business"),
        ("This is about science and the world economy", "Sci/Tech"),  # the first one named
        ("I'd say world news, not sports.", "World"),
        ("technology", "Sci/Tech"),
        ("A worldly matter", None),  # whole words only
        ("", None),
    ],
)
def test_the_first_label_named_anywhere(answer: str, label: str | None) -> None:
    assert parse_label(answer) == label


def test_held_back_rows_are_never_trained_on() -> None:
    if not (datasets_dir() / "ag_news" / "news.csv").is_file():
        pytest.skip("AG News is not in the shared datasets")
    held, train = ag_news_split(300, 1000, seed=0)
    assert len(held) == 300 and len(train) == 1000
    assert not {t for _, t in held} & {t for _, t in train}
    assert ag_news_split(300, 1000, seed=0) == (held, train)  # the same split every run
    assert len({label for label, _ in held}) == 4
    record = json.loads(example_records(train[:1])[0])
    assert record["instruction"].startswith(INSTRUCTION) and record["target"] == train[0][0]


def test_common_prefix_leaves_a_token_to_feed() -> None:
    assert _common_prefix([[1, 2, 3, 4], [1, 2, 3, 5, 6]]) == [1, 2, 3]
    assert _common_prefix([[1, 2, 3], [1, 2, 3, 4]]) == [1, 2]
    assert _common_prefix([[7, 8], [1, 2]]) == []


def test_a_decode_stops_only_when_more_tokens_cannot_change_the_label() -> None:
    assert not _settled("The topic is")
    assert not _settled("The topic is World")  # "Worldwide" would not name it
    assert _settled("The topic is World.")
    assert _settled("Sci/Tech and")
    # Whatever follows a settled answer, its first label stays the same.
    for text, more in [("Sports,", " World"), ("science ", "World"), ("tech-", "nology")]:
        assert _settled(text) and parse_label(text + more) == parse_label(text)
