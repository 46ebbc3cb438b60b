"""A tokenizer's identity follows its vocabulary and settings, not how it was stored: the same
after it is saved and loaded back (which resumed runs and readers rely on), also when the saved
file truncates for --max-length; another vocabulary has another."""

from __future__ import annotations

from pathlib import Path

from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer


def reloaded(tok, folder: Path, max_length: int | None = None):
    folder.mkdir()
    tok.save(str(folder), max_length)
    return load_tokenizer(TokenizerSpec.parse(str(folder / "tokenizer.json")))


def test_a_wordpiece_tokenizers_identity_survives_saving(tmp_path: Path) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", *(f"w{i}" for i in range(3000))]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = load_tokenizer(TokenizerSpec.parse(str(tmp_path / "vocab.txt")))
    assert reloaded(tok, tmp_path / "a").identity == tok.identity
    assert reloaded(tok, tmp_path / "b", max_length=16).identity == tok.identity
    (tmp_path / "other.txt").write_text("\n".join([*vocab, "w-extra"]) + "\n")
    other = load_tokenizer(TokenizerSpec.parse(str(tmp_path / "other.txt")))
    assert other.identity != tok.identity


def test_a_bpe_tokenizers_identity_survives_saving(tmp_path: Path) -> None:
    texts = [f"the {i} quick brown fox {i * 7} jumps" for i in range(400)]
    tok = load_tokenizer(TokenizerSpec.parse("train:bpe:600"), texts)
    assert isinstance(tok.config["model"]["merges"], list) and tok.config["model"]["merges"]
    assert reloaded(tok, tmp_path / "a", max_length=32).identity == tok.identity
