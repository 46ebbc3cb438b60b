"""tensorflow-text's fast models are built once, kept on disk, and give the ids a freshly built
FastBertTokenizer gives; a damaged or unwritable cache costs a rebuild, never wrong ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import BertWordPieceTokenizer

from feedgpu.converters.text.tokenizer import TextTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "fine", "##ne", "café", "cafe", "…", "."]
VOCAB += [*"abcdefghijklmnopqrstuvwxyz", *("##" + c for c in "abcdefghijklmnopqrstuvwxyz")]
TEXTS = ["The fine cafe.", "Café … ﬁne", "ΣΑΣ x\u200by", "unknownwordz " * 3, "é" * 60, ""]


def _tokenizer(tmp_path: Path, vocab: list[str], lowercase: bool = True) -> TextTokenizer:
    path = tmp_path / f"vocab-{len(vocab)}-{lowercase}.txt"
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return TextTokenizer(BertWordPieceTokenizer(str(path), lowercase=lowercase)._tokenizer)


def _ids(fast) -> list[list[int]]:
    import tensorflow as tf

    return fast.tokenize(tf.constant(TEXTS)).to_list()


def _reference(vocab: list[str], lowercase: bool) -> list[list[int]]:
    """The ids of a FastBertTokenizer tensorflow-text builds itself from the vocabulary."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    fast = tf_text.FastBertTokenizer(
        vocab=vocab, token_out_type=tf.int64, lower_case_nfd_strip_accents=lowercase
    )
    return _ids(fast)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """The models built (not read back) while a test runs, with the cache in tmp_path."""
    from feedgpu import tf_private

    monkeypatch.setenv("FEEDGPU_CACHE_DIR", str(tmp_path / "cache"))
    real = tf_private.fast_model_builders
    made: list[str] = []

    def counted() -> tuple:
        wordpiece, normalizer = real()
        return (
            lambda *a: made.append("wordpiece") or wordpiece(*a),
            lambda *a: made.append("normalizer") or normalizer(*a),
        )

    monkeypatch.setattr(tf_private, "fast_model_builders", counted)
    return made


@pytest.mark.parametrize("lowercase", [True, False])
def test_kept_models_give_tensorflow_text_s_own_ids(
    tmp_path: Path, builds: list[str], lowercase: bool
) -> None:
    first = _ids(_tokenizer(tmp_path, VOCAB, lowercase).fast())
    assert builds == ["wordpiece", "normalizer"]
    assert len(list((tmp_path / "cache").rglob("*.fb"))) == 2
    again = _ids(_tokenizer(tmp_path, VOCAB, lowercase).fast())  # read back: nothing built
    assert builds == ["wordpiece", "normalizer"]
    assert first == again == _reference(VOCAB, lowercase)


def test_another_vocabulary_or_setting_is_built_not_mistaken(
    tmp_path: Path, builds: list[str]
) -> None:
    _tokenizer(tmp_path, VOCAB).fast()
    other = [*VOCAB, "##ing"]
    assert _ids(_tokenizer(tmp_path, other).fast()) == _reference(other, True)
    assert _ids(_tokenizer(tmp_path, VOCAB, lowercase=False).fast()) == _reference(VOCAB, False)
    assert builds == ["wordpiece", "normalizer", "wordpiece", "normalizer"]


@pytest.mark.parametrize(
    "setting", [{"suffix": "@@"}, {"max_bytes": 5}, {"unknown": "[PAD]"}], ids=str
)
def test_each_wordpiece_setting_is_in_the_key(
    tmp_path: Path, builds: list[str], setting: dict
) -> None:
    import tensorflow as tf
    import tensorflow_text as tf_text

    from feedgpu.converters.text.fast_models import fast_bert_tokenizer

    args = {"suffix": "##", "max_bytes": 100, "unknown": "[UNK]", **setting}
    vocab = [w.replace("##", args["suffix"]) for w in VOCAB]
    fast_bert_tokenizer(VOCAB, "##", 100, "[UNK]", True)
    fast = fast_bert_tokenizer(vocab, lowercase=True, **args)
    assert builds == ["wordpiece", "normalizer", "wordpiece"]  # built anew, normaliser kept
    reference = tf_text.FastBertTokenizer(
        vocab=vocab,
        suffix_indicator=args["suffix"],
        max_bytes_per_word=args["max_bytes"],
        unknown_token=args["unknown"],
        token_out_type=tf.int64,
        lower_case_nfd_strip_accents=True,
    )
    assert _ids(fast) == _ids(reference)


@pytest.mark.parametrize("damage", ["a flipped byte", "cut short"])
def test_a_damaged_kept_model_is_built_again(
    tmp_path: Path, builds: list[str], damage: str
) -> None:
    _tokenizer(tmp_path, VOCAB).fast()
    (kept,) = (tmp_path / "cache").rglob("wordpiece-*.fb")
    data = bytearray(kept.read_bytes())
    if damage == "cut short":
        data = data[:20]
    else:
        data[len(data) // 2] ^= 0xFF
    kept.write_bytes(bytes(data))
    assert _ids(_tokenizer(tmp_path, VOCAB).fast()) == _reference(VOCAB, True)
    assert builds == ["wordpiece", "normalizer", "wordpiece"]
    assert _ids(_tokenizer(tmp_path, VOCAB).fast()) == _reference(VOCAB, True)  # mended
    assert builds == ["wordpiece", "normalizer", "wordpiece"]


def test_no_cache_or_one_that_cannot_be_written_still_tokenizes(
    tmp_path: Path, builds: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Set but empty, a URL (models are read back locally only), a path under a file."""
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.chdir(tmp_path)
    for setting in ("", "gs://bucket/cache", str(blocked / "cache")):
        monkeypatch.setenv("FEEDGPU_CACHE_DIR", setting)
        assert _ids(_tokenizer(tmp_path, VOCAB).fast()) == _reference(VOCAB, True)
    assert builds == ["wordpiece", "normalizer"] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", *_vocab_files(tmp_path)]


def _vocab_files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.glob("vocab-*.txt"))


def test_without_tensorflow_text_s_builders_it_builds_its_own_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a tensorflow-text release moves its model builders, conversions get slower, not
    broken: FastBertTokenizer builds from the vocabulary, and nothing is kept."""
    from feedgpu import tf_private

    def gone() -> tuple:
        raise ImportError("no pybinds")

    monkeypatch.setenv("FEEDGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tf_private, "fast_model_builders", gone)
    assert _ids(_tokenizer(tmp_path, VOCAB).fast()) == _reference(VOCAB, True)
    assert not (tmp_path / "cache").exists()
