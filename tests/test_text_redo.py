"""HF redoes only the odd words of a text the fast path cannot take whole: same ids as HF's."""

from __future__ import annotations

import os
import random
import string

import pytest
from tokenizers import BertWordPieceTokenizer

from feedgpu.converters.text.examples import per_text_ids
from feedgpu.converters.text.native import NO_NATIVE_ENV
from feedgpu.converters.text.redo import needs_reference, word_runs
from feedgpu.converters.text.tokenizer import TextTokenizer

# Odd to the fast path: compatibility forms (NFKD differs), case folding, final sigma,
# controls and format characters, a long non-ASCII word (its limit counted in bytes).
ODD = ["…", "ﬁne", "Ⅻ", "ＡＢＣ", "zero\u200bwidth", "bell\x07", "ß", "ΟΔΟΣ", "ΣΑΣ", "é" * 60]
PLAIN = [
    "the",
    "fine",
    "fin",
    "##e",
    "a.b",
    "(x)",
    "don't",
    "Hello",
    "WORLD",
    "café",
    "東京",
    "x" * 120,
]
SEPARATORS = [" ", "  ", "\t", "\n", "\r\n", "", "\x0b", "\u00a0", "\u3000", " . "]


@pytest.mark.parametrize("lowercase", [True, False])
def test_word_runs_give_hf_ids_for_texts_with_odd_words(
    lowercase: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The redo is tensorflow-text's: where the compiled step is built, its table of
    characters is HF's own answers, and it needs none (checked last)."""
    letters = list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "fine", "##ne", "hello", "world", ".", "…"]
    vocab += ["(", ")", "'", "東", "京", "ss", "σ", "ς", "ο", "##ς", "##σ", "café", "cafe"]
    vocab += letters
    hf = BertWordPieceTokenizer({t: i for i, t in enumerate(vocab)}, lowercase=lowercase)
    monkeypatch.setenv(NO_NATIVE_ENV, "1")
    tok = TextTokenizer(hf._tokenizer)
    rng = random.Random(5)
    texts = ["a … b", "…", "ﬁne.", "end ΟΔΟΣ", "ΣΑΣ\tΣ", "\x07", "zero\u200bwidth ok"]
    for _ in range(300):
        words = rng.choices(PLAIN + ODD, k=rng.randint(1, 12))
        texts.append("".join(w + rng.choice(SEPARATORS) for w in words))
    flagged = [t for t in texts if tok.needs_reference(t)]
    assert len(flagged) > 200  # most texts hold an odd word somewhere
    exact = tok.exact_ids(flagged)
    reference = tok.encode_reference(flagged)
    for text, ours, theirs in zip(flagged, exact, reference, strict=True):
        assert ours.tolist() == theirs, repr(text)
    # The test has teeth: the fast path alone gets many of these texts wrong.
    values, lengths, _ = tok.fast_ids(flagged)
    whole = [ids.tolist() for ids in per_text_ids(values, lengths)]
    assert sum(w != r for w, r in zip(whole, reference, strict=True)) > 50
    monkeypatch.delenv(NO_NATIVE_ENV)
    step = TextTokenizer(hf._tokenizer)
    if step.plain_step() is None:  # not built here: CI builds it (test_native.py checks)
        assert not os.environ.get("CI")
        return
    values, lengths, _ = step.fast_ids(flagged)
    assert [ids.tolist() for ids in per_text_ids(values, lengths)] == reference


def test_word_runs_send_only_the_odd_words_to_hf() -> None:
    runs = word_runs("one two … three\tfour ﬁve six\n", lowercase=True)
    expected = [(False, "one two"), (True, "…"), (False, "three four"), (True, "ﬁve")]
    assert runs == [*expected, (False, "six")]
    assert word_runs("plain words only", lowercase=True) == [(False, "plain words only")]
    assert not needs_reference("ﬁve", lowercase=False)  # cased: no case folding to differ
    assert needs_reference("ring\x07", lowercase=False)  # controls differ either way


@pytest.mark.parametrize("lowercase", [True, False])
def test_texts_cleared_in_graph_are_never_ones_python_would_check(lowercase: bool) -> None:
    """RE2 clears most texts of the common scripts, so Python checks only the rest; a text it
    clears that `needs_reference` flags would reach the fast path and get wrong ids."""
    import tensorflow as tf

    from feedgpu.converters.text.redo import (
        CHECKED_BLOCKS,
        FINE_BLOCKS,
        _odd_char,
        cleared_in_graph,
    )

    # The blocks taken whole hold no odd character under this Python's Unicode tables.
    assert not any(_odd_char(chr(c), lowercase) for a, b in FINE_BLOCKS for c in range(a, b + 1))
    rng = random.Random(11)
    alphabet = [chr(c) for a, b in CHECKED_BLOCKS for c in range(a, b + 1, 7)]
    alphabet += [chr(c) for a, b in FINE_BLOCKS for c in range(a, b + 1, 997)]
    alphabet += list("abc XYZ.,\t\n\r")
    alphabet += ["…", "ﬁ", "Σ", "ß", "\u200b", "\x07", "\x7f", "\U000e0001"]
    texts = ["café au lait", "東京 日本語", "привет мир", "naïve ΟΔΟΣ", "é" * 30, "a…b"]
    for _ in range(3000):
        words = [
            "".join(rng.choices(alphabet, k=rng.randint(1, 12))) for _ in range(rng.randint(1, 4))
        ]
        texts.append(" ".join(words))
    cleared = cleared_in_graph(tf.constant(texts), lowercase).numpy().tolist()
    wrongly = [
        t for t, ok in zip(texts, cleared, strict=True) if ok and needs_reference(t, lowercase)
    ]
    assert not wrongly, wrongly[:3]
    assert cleared[:3] == [True, True, True]  # accents, CJK, Cyrillic: no Python check
    assert not cleared[4]  # a 60-byte word of 30 characters
    assert cleared[5] is not lowercase  # "…": odd when lowercasing (NFKD differs), else fine
    assert sum(cleared) > 300  # random texts of fine characters are cleared too


def test_splicing_redone_texts_changes_those_texts_only() -> None:
    """A batch's redone texts replace their fast ids in place, whatever their new lengths (none
    at all included), first and last texts too; every other text's ids stay as they were."""
    import numpy as np

    from feedgpu.converters.text.examples import flat_ids, splice_ids

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
    # One table for the redo path and the vocabulary learner (which had its own, starting a
    # block early at U+2B820): HF pads exactly these code points.
    from tokenizers.normalizers import BertNormalizer

    from feedgpu.converters.text.redo import is_cjk
    from feedgpu.converters.text.wordpiece_vocab import _stands_alone

    normalize = BertNormalizer(lowercase=False, strip_accents=False).normalize_str
    for code in (0x4DFF, 0x4E00, 0x2B81F, 0x2B820, 0x2B91F, 0x2B920, 0x2CEAF, 0x2CEB0, 0xF900):
        padded = normalize(chr(code)) == f" {chr(code)} "
        assert is_cjk(code) == padded, hex(code)
        assert _stands_alone(chr(code)) == padded, hex(code)  # letters of no category P
