"""Texts that are not plain (compatibility forms, case folding, final sigma, controls, long
words beyond ASCII): the compiled step and HF for the chunks it leaves give HF's own ids."""

from __future__ import annotations

import os
import random
import string

import pytest
from tokenizers import BertWordPieceTokenizer

from feedgpu.converters.text.plain_wordpiece import per_text_ids
from feedgpu.converters.text.tokenizer import TextTokenizer

ODD = ["…", "ﬁne", "Ⅻ", "ＡＢＣ", "zero\u200bwidth", "bell\x07", "ß", "ΟΔΟΣ", "ΣΑΣ", "é" * 60]
PLAIN = ["the", "fine", "fin", "##e", "a.b", "(x)", "don't", "Hello", "WORLD", "café", "東京"]
PLAIN += ["x" * 120, "[1913", "Webster]", "<b>", "{x}", "#", "|"]
SEPARATORS = [" ", "  ", "\t", "\n", "\r\n", "", "\x0b", "\u00a0", "\u3000", " . "]


@pytest.mark.parametrize("lowercase", [True, False])
def test_texts_with_odd_words_get_hfs_ids(lowercase: bool) -> None:
    letters = list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "fine", "##ne", "hello", "world", ".", "…"]
    vocab += ["(", ")", "'", "東", "京", "ss", "σ", "ς", "ο", "##ς", "##σ", "café", "cafe", "["]
    vocab += letters
    hf = BertWordPieceTokenizer({t: i for i, t in enumerate(vocab)}, lowercase=lowercase)
    tok = TextTokenizer(hf._tokenizer)
    if tok.plain_step() is None:  # not built here: CI builds it (test_native.py checks)
        assert not os.environ.get("CI")
        pytest.skip("the compiled step is not built in this install")
    rng = random.Random(5)
    texts = ["a … b", "…", "ﬁne.", "end ΟΔΟΣ", "ΣΑΣ\tΣ", "\x07", "zero\u200bwidth ok", "a [SEP] b"]
    for _ in range(300):
        words = rng.choices(PLAIN + ODD, k=rng.randint(1, 12))
        texts.append("".join(w + rng.choice(SEPARATORS) for w in words))
    values, lengths = tok.ids(texts)
    reference = tok.encode_reference(texts)
    assert [ids.tolist() for ids in per_text_ids(values, lengths)] == reference


def test_splicing_texts_changes_those_texts_only() -> None:
    """A batch's texts given other ids replace theirs in place, whatever their new lengths (none
    at all included), first and last texts too; every other text's ids stay as they were."""
    import numpy as np

    from feedgpu.converters.text.plain_wordpiece import flat_ids, splice_ids

    rng = random.Random(5)
    for _ in range(50):
        per_text = [list(range(rng.randint(0, 6))) for _ in range(rng.randint(1, 12))]
        values, lengths = flat_ids(per_text)
        at = sorted(rng.sample(range(len(per_text)), rng.randint(1, len(per_text))))
        replaced = [np.arange(100, 100 + rng.randint(0, 4)) for _ in at]
        for i, ids in zip(at, replaced, strict=True):
            per_text[i] = ids.tolist()
        got_values, got_lengths = splice_ids(values, lengths, at, replaced)
        assert got_values.dtype == np.int64
        assert [ids.tolist() for ids in per_text_ids(got_values, got_lengths)] == per_text


def test_cjk_ranges_are_hfs_at_their_bounds() -> None:
    from tokenizers.normalizers import BertNormalizer

    from feedgpu.converters.text.wordpiece_vocab import _stands_alone, is_cjk

    normalize = BertNormalizer(lowercase=False, strip_accents=False).normalize_str
    for code in (0x4DFF, 0x4E00, 0x2B81F, 0x2B820, 0x2B91F, 0x2B920, 0x2CEAF, 0x2CEB0, 0xF900):
        padded = normalize(chr(code)) == f" {chr(code)} "
        assert is_cjk(code) == padded, hex(code)
        assert _stands_alone(chr(code)) == padded, hex(code)  # letters of no category P
