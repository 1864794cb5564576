"""Sub-batch feeds cut from one concatenated id array equal per-text padding."""

import numpy as np
import pytest

from flinkai.models.tokens import TokenizedBatch, plan_sub_batches

TEXTS = [
    "short",
    "a somewhat longer text, with punctuation; and more words than the first",
    "",
    "naïve café déjà vu",
    "x " * 300,  # truncated at max_seq_length
    "mid length text here",
]


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.processors import TemplateProcessing

    words = {w for t in TEXTS for w in t.replace(",", " ").replace(";", " ").split()}
    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, **{w: i + 3 for i, w in enumerate(sorted(words))}}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    tok.enable_truncation(16)
    return tok


def _reference(tokenizer, texts, index):  # type: ignore[no-untyped-def]
    encodings = [tokenizer.encode(texts[i]) for i in index]
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(index), width), dtype=np.int64)
    types = np.zeros_like(ids)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = e.ids
        types[row, : len(e.ids)] = e.type_ids
    lengths = np.array([[len(e.ids)] for e in encodings])
    return ids, np.arange(width)[None, :] < lengths, types


def test_feeds_equal_per_text_padding(tokenizer) -> None:  # type: ignore[no-untyped-def]
    seen = []
    for sub in plan_sub_batches(tokenizer, TEXTS, batch_size=2, sort_by_length=True):
        ids, mask, types = _reference(tokenizer, TEXTS, sub.index)
        np.testing.assert_array_equal(sub.feed["input_ids"], ids)
        np.testing.assert_array_equal(sub.feed["attention_mask"], mask.astype(np.int64))
        np.testing.assert_array_equal(sub.feed["token_type_ids"], types)
        seen.extend(sub.index.tolist())
    assert sorted(seen) == list(range(len(TEXTS)))


def test_non_zero_type_ids_are_kept(tokenizer) -> None:  # type: ignore[no-untyped-def]
    from tokenizers.processors import TemplateProcessing

    tokenizer.post_processor = TemplateProcessing(
        single="[CLS]:1 $A:1 [SEP]:1", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    batch = TokenizedBatch.encode(tokenizer, TEXTS)
    assert batch.type_ids is not None
    feed = batch.feed(np.arange(len(TEXTS)))
    assert (feed["token_type_ids"] == feed["attention_mask"]).all()
