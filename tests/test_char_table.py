"""Characters beyond ASCII in the compiled WordPiece step (`char_table`, `_wordpiece.c`): what
HF does with each character alone, learned as texts bring it, gives HF's ids of whole texts in
any script; JSON lines beyond ASCII (raw or escaped) are taken only when certain."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import joined_lines as joined
from tokenizers import Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer

from feedgpu.converters.text.char_table import ALONE, DROP, SPACE, WORD, describer
from feedgpu.converters.text.plain_wordpiece import per_text_ids
from feedgpu.converters.text.tokenizer import TextTokenizer

# Blocks of the scripts users write (accents, Greek, Cyrillic, Hebrew, Arabic, Indic scripts,
# punctuation and symbols, kana, CJK and its compatibility ideographs, Hangul, emoji,
# mathematical letters), unassigned code points among them, and words with what HF's
# normaliser changes or drops.
BLOCKS = [(0x80, 0x36F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0xDFF), (0x1E00, 0x2BFF)]
BLOCKS += [(0x3000, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0xF900, 0xFFFF)]
BLOCKS += [(0x1D400, 0x1D7FF), (0x1F300, 0x1F6FF)]
WORDS = ["the", "Quick", "café", "naïve", "Zürich", "—", "€5", "…", "東京", "“quoted”", "ΑΣΣ"]
WORDS += ["straße", "İstanbul", "ﬁne", "a\u200bb", "e\u0301", "\u00a0", "x\u0308\u0316y", "가나다"]
WORDS += ["привет", "Ⅻ", "ＡＢＣ", "\ufeffbom", "a\x01b", "é" * 60, "ோ", "\u0d3b.x"]


def _tokenizer(lowercase: bool, **model: Any) -> TextTokenizer:
    """A BERT WordPiece tokenizer whose vocabulary has pieces in several scripts."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "café", "cafe", "##é", "…", "东"]
    vocab += ["東", "京", "—", "€", "##5", "при", "##вет", "σ", "ς", "ᄀ", "##ᅡ", "ⅻ", "ß"]
    vocab += list(string.ascii_letters + string.digits + string.punctuation)
    vocab += ["##" + c for c in string.ascii_lowercase + string.digits + "éü"]
    vocab += ["the", "quick", "##ick", "zurich", "zu", "##rich", "na", "##ive", "straße"]
    vocab = list(dict.fromkeys(vocab))
    bert = BertWordPieceTokenizer({t: i for i, t in enumerate(vocab)}, lowercase=lowercase)
    config = json.loads(bert.to_str())
    config["model"].update(model)
    return TextTokenizer(Tokenizer.from_str(json.dumps(config)))


def _texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)

    def word() -> str:
        if rng.random() < 0.4:
            return rng.choice(WORDS)
        picks = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.5:
                picks.append(rng.choice("abcXYZ019.,!-'"))
            else:
                low, high = rng.choice(BLOCKS)
                picks.append(chr(rng.randint(low, high)))
        return "".join(picks)

    separators = [" ", "  ", "\t", "\n", "\u3000", ""]
    return [
        "".join(word() + rng.choice(separators) for _ in range(rng.randint(1, 25)))
        for _ in range(count)
    ]


def _per_text(values: Any, lengths: Any) -> list[list[int]]:
    return [ids.tolist() for ids in per_text_ids(values, lengths)]


@pytest.mark.parametrize("lowercase", [True, False])
@pytest.mark.parametrize("model", [{}, {"max_input_chars_per_word": 5}], ids=["bert", "short"])
def test_ids_beyond_ascii_are_hfs(module: Any, lowercase: bool, model: dict[str, Any]) -> None:
    """Random texts mixing ASCII with characters of many scripts (and unassigned ones, and
    marks HF keeps): HF's ids, text by text, uncased (accents stripped) and cased, with HF's
    word limit counted in characters. The step tokenizes them itself once it has learned
    their characters: the table is what is tested, not HF standing in for it."""
    tok = _tokenizer(lowercase, **model)
    step = tok.plain_step()
    assert step is not None
    texts = _texts(1, 1500)
    reference = tok.encode_reference(texts)
    assert _per_text(*tok.ids(texts)) == reference
    values, lengths, holes = step.ids(texts)  # the table filled by the call above
    whole = sorted(set(range(len(texts))) - set(holes[:, 0].tolist()))
    assert len(whole) > len(texts) // 3  # holes: only unassigned or neighbour-bound characters
    ours = _per_text(values, lengths)
    assert [ours[i] for i in whole] == [reference[i] for i in whole]


def test_characters_are_described_by_hfs_answers() -> None:
    """Each character's entry is HF's normaliser and pre-tokenizer on it alone: a word's part
    as its normal form, a word alone, a boundary, nothing; or none where the table cannot
    hold it."""
    uncased = describer(_tokenizer(True).hf, strips_accents=True)
    assert uncased("é") == (WORD, b"e")
    assert uncased("Ж") == (WORD, "ж".encode())
    assert uncased("가") == (WORD, "\u1100\u1161".encode())  # NFD: two jamo
    assert uncased("…") == (ALONE, "…".encode())
    assert uncased("東") == (ALONE, "東".encode())  # padded with spaces by HF
    assert uncased("\u00a0") == (SPACE, b"")
    assert uncased("\u3000") == (SPACE, b"")
    assert uncased("\u200b") == (DROP, b"")  # a format character
    assert uncased("\u0301") == (DROP, b"")  # a mark, stripped with the accents
    assert uncased("\u0378") is None  # unassigned
    assert uncased("\u0d3b") is None  # a mark HF keeps: NFD may reorder it among others
    assert uncased("a") is None and uncased("\ud800") is None  # ASCII; a lone surrogate
    cased = describer(_tokenizer(False).hf, strips_accents=False)
    assert cased("É") == (WORD, "É".encode())
    assert cased("\u0d3b") == (WORD, "\u0d3b".encode())  # no NFD: nothing moves


def test_the_table_refuses_entries_it_cannot_hold(module: Any) -> None:
    """Packed entries the compiled table checks before taking: a form longer than three times
    its character or than the room, a word alone of two characters, an unknown kind, ASCII,
    a code point past Unicode, a torn entry: a ValueError each, never a read past them."""
    import struct

    entry = struct.Struct("<IBB12s")
    assert module.chars(entry.pack(0xE9, WORD, 1, b"e")) is not None
    bad = [
        entry.pack(0xE9, WORD, 7, b"eeeeeee"),  # 2 bytes: at most 6
        entry.pack(0xE9, WORD, 200, b"e"),  # past the entry's room
        entry.pack(0x4E1C, ALONE, 6, "東京".encode()),
        entry.pack(0xE9, 9, 1, b"e"),
        entry.pack(0x41, WORD, 1, b"a"),
        entry.pack(0x110000, DROP, 0, b""),
        entry.pack(0xD800, DROP, 0, b""),  # a surrogate is no character
        entry.pack(0xE9, SPACE, 1, b" "),  # a boundary has no form
    ]
    for packed in bad:
        code = struct.unpack("<I", packed[:4])[0]
        with pytest.raises(ValueError, match=f"not a character's entry: code point {code:#x}"):
            module.chars(packed)
    with pytest.raises(ValueError, match="whole packed entries"):
        module.chars(entry.pack(0xE9, WORD, 1, b"e")[:-1])


def _lines(tok: TextTokenizer, lines: list[bytes]) -> tuple[Any, ...]:
    ids = tok.line_ids("text")
    assert ids is not None
    return ids(*joined(lines))


def test_json_lines_beyond_ascii_are_taken_when_certain(module: Any) -> None:
    """Lines of texts beyond ASCII, raw and \\u-escaped (surrogate pairs too), are tokenized
    by the step with HF's ids of the text Python's parser reads, once the table has their
    characters; invalid UTF-8 (overlong, surrogate, truncated, past U+10FFFF), a lone
    surrogate escape, or a character the table cannot hold leave the line to Python."""
    tok = _tokenizer(True)
    step = tok.plain_step()
    assert step is not None
    texts = [t for t in _texts(2, 300) if t.strip()]
    docs = ["café 東京 … naïve", "emoji \U0001f600 ok", "Ж\u00a0ж", "é\u0301 e\u0301"]
    good = [json.dumps({"text": t}, ensure_ascii=False).encode() for t in docs]
    good += [json.dumps({"text": t}).encode() for t in docs]  # \u escapes
    good += [json.dumps({"kéy": 1, "text": "plain"}, ensure_ascii=False).encode()]
    _, _, taken, left = _lines(tok, good)
    assert taken.tolist() == [8] and len(left) == 8  # nothing learned yet: all but plain text
    step.learn("".join(docs))
    values, lengths, taken, left = _lines(tok, good)
    assert taken.tolist() == list(range(len(good))) and not len(left)
    expected = tok.encode_reference([json.loads(line)["text"] for line in good])
    assert _per_text(values, lengths) == expected
    bad = [b"\xc0\xaf", b"\xed\xa0\x80", b"\xe6\x9d", b"\xf4\x90\x80\x80", b"\\ud800 x"]
    bad += [b"\\udc00\\ud800", b"\\ud83d\\u0041", b"\\u0007", b"\xcd\xb8"]  # U+0378: unassigned
    lines = [b'{"text": "caf\xc3\xa9 ' + b + b' x"}' for b in bad]
    assert _lines(tok, lines)[3].tolist() == list(range(len(bad)))
    # The same lines, and random ones, read by Python: same documents, same ids.
    tok.ids(texts)  # their characters learned
    lines = [json.dumps({"text": t}, ensure_ascii=i % 2 == 0).encode() for i, t in enumerate(texts)]
    values, lengths, taken, left = _lines(tok, lines)
    assert len(taken) > len(lines) // 3
    read = [json.loads(lines[i])["text"] for i in taken.tolist()]
    assert _per_text(values, lengths) == tok.encode_reference(read)


def test_normalised_added_tokens_keep_texts_beyond_ascii_from_the_step(module: Any) -> None:
    """An added token HF matches in normalised text may hide in any text beyond ASCII (an
    accented spelling of it): such texts go to the Python path, and HF, whole."""
    tok = _tokenizer(True)
    tok.hf.add_tokens(["zürich"])  # normalized: matched after accents are stripped
    tok = TextTokenizer(tok.hf)
    step = tok.plain_step()
    assert step is not None
    step.learn("Zürich café")
    lines = [b'{"text": "Z\xc3\xbcrich caf\xc3\xa9"}', b'{"text": "plain text"}']
    _, _, taken, left = _lines(tok, lines)
    assert taken.tolist() == [1] and left.tolist() == [0]
    assert _per_text(*tok.ids(["Zürich café"])) == tok.encode_reference(["Zürich café"])


def test_texts_without_utf8_are_holes_among_the_others(module: Any) -> None:
    """A text holding a lone surrogate (no UTF-8: surrogateescape'd bytes) is one hole, whole,
    wherever it sits in a batch, and the others' ids are HF's: the step's room for ids is not
    shrunk by it (Python 3.13 reports such a text's size as -1)."""
    tok = _tokenizer(True)
    step = tok.plain_step()
    assert step is not None
    plain = ["a quick fox " * 4, "café 東京", "the end"]
    texts = [*plain[:1], "\ud800", *plain[1:], "x\udcff y", "\ud800" * 38]
    values, lengths, holes = step.ids(texts)
    assert holes[:, :3].tolist() == [[1, 0, 1], [4, 0, 4], [5, 0, 38]]
    counts = lengths.tolist()
    assert [counts[i] for i in (1, 4, 5)] == [0, 0, 0]
    kept = [ids for i, ids in enumerate(_per_text(values, lengths)) if i not in (1, 4, 5)]
    assert kept == tok.encode_reference(plain)


def test_threads_learning_at_once_agree(module: Any) -> None:
    """Threads tokenizing and learning at once (a conversion's tokenizer threads): each gets
    HF's ids, and the table ends the same as one thread's."""
    from concurrent.futures import ThreadPoolExecutor

    tok = _tokenizer(True)
    batches = [_texts(seed, 200) for seed in range(10, 18)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(tok.ids, batches))
    for texts, (values, lengths) in zip(batches, results, strict=True):
        assert _per_text(values, lengths) == tok.encode_reference(texts)
    alone = _tokenizer(True)
    for texts in batches:
        alone.ids(texts)
    shared, single = tok.plain_step(), alone.plain_step()
    assert shared is not None and single is not None
    assert shared._chars is not None and single._chars is not None
    assert shared._chars._known == single._chars._known


def test_conversion_beyond_ascii_stores_hfs_ids(module: Any, tmp_path: Path) -> None:
    """A corpus in many scripts, raw UTF-8 and escaped: the stored ids are HF's, document by
    document."""
    import tensorflow as tf

    from feedgpu.converters.text.convert import TextOptions, convert_text

    tok = _tokenizer(True)
    (tmp_path / "tokenizer.json").write_text(tok.hf.to_str())
    texts = [t for t in _texts(3, 800) if t.strip()]
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "a.jsonl", "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"text": t}, ensure_ascii=i % 3 == 0) + "\n")
    options = TextOptions(tokenizer=str(tmp_path / "tokenizer.json"), docs_per_record=1)
    convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    stored = {}
    for path in sorted((tmp_path / "out").glob("*.tfrecord-*")):
        for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
            example = tf.train.Example.FromString(record).features.feature
            ids = example["input_ids"].int64_list.value
            stored[example["doc_id"].bytes_list.value[0].decode()] = list(ids[1:-1])
    assert len(stored) == len(texts)
    line_of = {int(doc_id.rsplit(":", 1)[1]): ids for doc_id, ids in stored.items()}
    assert [line_of[i] for i in sorted(line_of)] == tok.encode_reference(texts)
    assert np.mean([len(v) for v in stored.values()]) > 5
