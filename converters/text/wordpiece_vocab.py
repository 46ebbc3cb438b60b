"""A WordPiece vocabulary learned from a corpus, the same on every run, at HF's speed.

Kept apart from `tokenizer` (loading and running tokenizers): training is needed only for
`--tokenizer train:wordpiece:SIZE`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def is_cjk(code: int) -> bool:
    """Whether HF's BERT normaliser puts spaces around this code point (its
    `handle_chinese_chars`: `is_chinese_char` in tokenizers' bert.rs, these bounds)."""
    return any(low <= code <= high for low, high in _CJK)


_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _stands_alone(char: str) -> bool:
    """Punctuation and CJK characters, which BERT's pre-tokenizer makes words of their own:
    never inside a word, so no "##c" of theirs is ever made or needed (none is seeded: on a
    CJK corpus thousands of entries would be spent on pieces nothing uses)."""
    import unicodedata

    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    if unicodedata.category(char).startswith("P"):
        return True
    return is_cjk(code)


def learn_wordpiece(
    texts: Iterable[str], vocab_size: int, lowercase: bool, special: Sequence[str]
) -> list[str]:
    """A WordPiece vocabulary from HF's trainer, made deterministic; texts are read twice.

    HF's trainer alone is not deterministic (huggingface/tokenizers#1794): it creates each
    continuing piece ("##a") when first met while iterating a randomly seeded hash map, so its id
    differs run to run, and ties between equally frequent pairs are broken by those ids. Every
    "##c" of the corpus's alphabet is made a token before training (the first pass finds the
    alphabet), so no id depends on the order of a hash map: the same corpus gives the same
    vocabulary on every run, at HF's speed (tensorflow-text's learner, used before, was many
    times slower and short of the size asked: benchmarks/RESULTS.md, "Decisions").
    """
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer
    from tokenizers.trainers import WordPieceTrainer

    normalizer = BertNormalizer(lowercase=lowercase)
    alphabet: set[str] = set()
    for text in texts:  # normalised whole: in context, as the trainer will see it (final sigma)
        alphabet.update(normalizer.normalize_str(text))
    chars = sorted(c for c in alphabet if not c.isspace())
    seeds = [f"##{c}" for c in chars if not _stands_alone(c)]
    trainer = WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[*special, *seeds],
        show_progress=False,
    )
    learner = Tokenizer(WordPiece(unk_token="[UNK]"))
    learner.normalizer = normalizer
    learner.pre_tokenizer = BertPreTokenizer()
    learner.train_from_iterator(texts, trainer)
    ids = learner.get_vocab()
    vocab = sorted(ids, key=ids.__getitem__)
    known = set(vocab)
    vocab += [c for c in chars if c not in known]  # every character has a piece: none is [UNK]
    return vocab
