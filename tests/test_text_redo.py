"""HF redoes only the odd words of a text the fast path cannot take whole: same ids as HF's."""

from __future__ import annotations

import random
import string

import pytest
from tokenizers import BertWordPieceTokenizer

from feedgpu.converters.text_examples import per_text_ids
from feedgpu.converters.text_redo import needs_reference, word_runs
from feedgpu.converters.tokenizer import TextTokenizer

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
def test_word_runs_give_hf_ids_for_texts_with_odd_words(lowercase: bool) -> None:
    letters = list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "fine", "##ne", "hello", "world", ".", "…"]
    vocab += ["(", ")", "'", "東", "京", "ss", "σ", "ς", "ο", "##ς", "##σ", "café", "cafe"]
    vocab += letters
    hf = BertWordPieceTokenizer({t: i for i, t in enumerate(vocab)}, lowercase=lowercase)
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


def test_word_runs_send_only_the_odd_words_to_hf() -> None:
    runs = word_runs("one two … three\tfour ﬁve six\n", lowercase=True)
    expected = [(False, "one two"), (True, "…"), (False, "three four"), (True, "ﬁve")]
    assert runs == [*expected, (False, "six")]
    assert word_runs("plain words only", lowercase=True) == [(False, "plain words only")]
    assert not needs_reference("ﬁve", lowercase=False)  # cased: no case folding to differ
    assert needs_reference("ring\x07", lowercase=False)  # controls differ either way
