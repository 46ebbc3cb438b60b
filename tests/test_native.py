"""feedgpu's compiled steps: WordPiece of plain text (`_wordpiece.c`) gives HF's ids exactly, or
leaves a chunk to HF; records (`_records.c`, tests/test_text_records.py) are the Python
reference's bytes; without them (not built, or FEEDGPU_NO_NATIVE), conversion is unchanged."""

from __future__ import annotations

import itertools
import json
import os
import random
import string
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer

from feedgpu.converters.text.native import NO_NATIVE_ENV
from feedgpu.converters.text.plain_wordpiece import PlainWordPiece


def _vocab(rng: random.Random, size: int) -> list[str]:
    """Special tokens, every ASCII character alone and continuing, random pieces, a few
    tokens no plain word can match (punctuation inside, non-ASCII, a bare "##")."""
    chars = string.ascii_letters + string.digits
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "##", "a.b", "café", "##é", "naïve"]
    vocab += list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab += ["##" + c for c in string.ascii_lowercase + string.digits]
    while len(vocab) < size:
        piece = "".join(rng.choice(chars) for _ in range(rng.randint(2, 9)))
        vocab.append(("##" if rng.random() < 0.4 else "") + piece)
    return list(dict.fromkeys(vocab))  # each once, in order: ids are positions


def _texts(rng: random.Random, vocab: list[str], count: int) -> list[str]:
    words = [t.removeprefix("##") for t in vocab[10:]]
    extra = [" ", "  ", "\t", "\n", "\r\n", "x" * 101, "Y" * 100, "QQzz", "HeLLo", "ab12CD"]
    extra += list(string.punctuation)
    parts = words + extra
    return ["".join(rng.choice(parts) for _ in range(rng.randint(0, 40))) for _ in range(count)]


def _hf(vocab: list[str], lowercase: bool, **model: Any) -> Tokenizer:
    bert = BertWordPieceTokenizer({t: i for i, t in enumerate(vocab)}, lowercase=lowercase)
    config = json.loads(bert.to_str())
    config["model"].update(model)
    return Tokenizer.from_str(json.dumps(config))


def _step(module: Any, vocab: list[str], hf: Tokenizer, lowercase: bool) -> PlainWordPiece:
    model = json.loads(hf.to_str())["model"]
    return PlainWordPiece(
        module,
        vocab,
        prefix=model["continuing_subword_prefix"],
        unknown_id=vocab.index("[UNK]"),
        max_chars=model["max_input_chars_per_word"],
        lowercase=lowercase,
    )


def _filled(hf: Tokenizer, texts: list[str], values: Any, lengths: Any, holes: Any) -> Any:
    """The step's ids with HF's ids of each hole put in its place, per text."""
    chunks = [texts[t][a:b] for t, a, b, _ in holes.tolist()]
    encoded = hf.encode_batch(chunks, add_special_tokens=False)
    sizes = [len(e.ids) for e in encoded]
    values = np.insert(values, np.repeat(holes[:, 3], sizes), [i for e in encoded for i in e.ids])
    lengths = lengths + np.bincount(holes[:, 0], sizes, len(texts)).astype(np.int64)
    return _per_text(values, lengths)


def _corpus(tmp_path: Path, seed: int, count: int, extra: list[str]) -> Path:
    """A JSONL corpus of count random texts and extra ones, in tmp_path/src, its vocabulary
    in tmp_path/vocab.txt."""
    rng = random.Random(seed)
    vocab = _vocab(rng, 600)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    src = tmp_path / "src"
    src.mkdir()
    texts = [*_texts(rng, vocab, count), *extra]
    (src / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts if t))
    return src


def _lines(step: PlainWordPiece, lines: list[bytes], field: str, tokens: tuple[str, ...]) -> Any:
    """The JSON-lines step on lines given one by one, as a conversion's block of them."""
    from conftest import joined_lines as joined

    ids = step.lines_of(field, tokens)
    assert ids is not None
    return ids(*joined(lines))


def _per_text(values: Any, lengths: Any) -> list[list[int]]:
    ends = np.cumsum(lengths)
    return [values[e - n : e].tolist() for e, n in zip(ends, lengths, strict=True)]


@pytest.mark.parametrize("lowercase", [True, False])
@pytest.mark.parametrize(
    "model",
    [{}, {"max_input_chars_per_word": 6}, {"continuing_subword_prefix": ""}],
    ids=["bert", "short-words", "no-prefix"],
)
def test_plain_ids_are_hfs(module: Any, lowercase: bool, model: dict[str, Any]) -> None:
    """Random plain texts (every ASCII punctuation mark, tabs, CR, LF, words over the length
    limit, pieces only some words complete), cased and uncased, with HF's model settings
    changed: the ids are HF's, text by text."""
    rng = random.Random(7)
    vocab = _vocab(rng, 3000)  # past the trie's first table: it grows while built
    hf = _hf(vocab, lowercase, **model)
    texts = _texts(rng, vocab, 1500)
    values, lengths, holes = _step(module, vocab, hf, lowercase).ids(texts)
    assert holes.shape == (0, 4)
    expected = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert _per_text(values, lengths) == expected
    assert values.dtype == lengths.dtype == np.int64


def test_chunks_that_are_not_plain_are_left_as_holes(module: Any) -> None:
    """In texts that are not plain, the chunks between ASCII whitespace holding non-ASCII text
    or control characters (HF's normaliser drops or changes them) are holes, placed where their
    ids go; HF's ids of each hole put there give HF's ids of the whole text."""
    rng = random.Random(1)
    vocab = _vocab(rng, 500)
    hf = _hf(vocab, True)
    plain = _texts(rng, vocab, 24)
    odd = ["café au lait", "a\x01b c", "x del\x7f y", "tab\x0bvertical", "nul\x00", "…"]
    odd += ["München, 東京 and ÉCOLE", "  naïve  ", "\u00a0nbsp\u3000wide"]
    texts = [t for pair in zip(plain, odd + [""] * 15, strict=True) for t in pair]
    values, lengths, holes = _step(module, vocab, hf, True).ids(texts)
    assert sorted(set(holes[:, 0].tolist())) == [2 * i + 1 for i in range(len(odd))]
    chunks = [texts[t][a:b] for t, a, b, _ in holes.tolist()]
    assert "café" in chunks and "\x01b" not in chunks and "a\x01b" in chunks and "au" not in chunks
    assert all(not any(c in chunk for c in " \t\n\r") for chunk in chunks)
    expected = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert _filled(hf, texts, values, lengths, holes) == expected


def test_threads_share_one_vocabulary(module: Any) -> None:
    """The GIL is released while tokenizing: threads calling at once get each their own ids."""
    rng = random.Random(2)
    vocab = _vocab(rng, 800)
    hf = _hf(vocab, True)
    step = _step(module, vocab, hf, True)
    batches = [_texts(random.Random(seed), vocab, 300) for seed in range(8)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(step.ids, batches))
    for texts, (values, lengths, _) in zip(batches, results, strict=True):
        assert _per_text(values, lengths) == [
            e.ids for e in hf.encode_batch(texts, add_special_tokens=False)
        ]


def test_ids_join_the_step_and_hf(module: Any, tmp_path: Path) -> None:
    """A mixed batch: plain texts and covered characters by the compiled step, the chunks it
    declines by HF, each text's ids back in its place."""
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    rng = random.Random(3)
    vocab = _vocab(rng, 600)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    texts = _texts(rng, vocab, 200)
    texts[5::7] = [f"Ünïcode {t} ﬁne…" for t in texts[5::7]]  # odd ones: redone by HF
    spec = TokenizerSpec.parse(str(tmp_path / "vocab.txt"))
    expected = load_tokenizer(spec).encode_reference(texts)
    tok = load_tokenizer(spec)
    assert tok.plain_step() is not None
    assert _per_text(*tok.ids(texts)) == expected


def test_conversion_is_the_same_bytes_without_the_step(
    module: Any, records: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled steps change nothing on disk: a conversion with them and one without
    (FEEDGPU_NO_NATIVE: HF and the Python reference) write the same shards, and the manifest
    names each one's road and why (with neither built, it would compare HF with itself: it
    needs both)."""
    from feedgpu import read_manifest
    from feedgpu.converters.text.convert import TextOptions, convert_text

    src = _corpus(tmp_path, 4, 3000, ["naïve café", "a\x01b"])
    outs = []
    for flag, road in (("0", "compiled"), ("1", "hf")):
        monkeypatch.setenv(NO_NATIVE_ENV, flag)
        out = tmp_path / f"out{flag}"
        convert_text(str(src), str(out), TextOptions(tokenizer=str(tmp_path / "vocab.txt")))
        tokenizer = read_manifest(str(out)).to_json()["tokenizer"]
        assert tokenizer["road"] == road
        assert (NO_NATIVE_ENV in tokenizer["reason"]) == (flag == "1"), tokenizer["reason"]
        outs.append(out)
    shards = sorted(p.name for p in outs[0].glob("*.tfrecord-*"))
    assert shards
    for name in shards:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


def test_typed_special_tokens_take_hfs_ids(module: Any, tmp_path: Path) -> None:
    """A document holding "[SEP]" or "[CLS]" as text: HF matches the added token before
    normalising, the compiled step splits it into "[", "sep", "]"; such texts are HF's
    whole, in plain and other texts alike."""
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    rng = random.Random(5)
    vocab = _vocab(rng, 600)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = load_tokenizer(TokenizerSpec.parse(str(tmp_path / "vocab.txt")))
    texts = _texts(rng, vocab, 60)
    texts[3] += " [SEP] next"
    texts[10] = "[CLS]" + texts[10] + "[MASK]"
    texts[20] += " naïve [PAD]"
    texts[30] += " [sep] in lower case, [Unk]"  # not HF's added tokens: also exact
    texts[40] += " [SEP"  # no added token at all
    assert tok.typed_added(texts) == [3, 10, 20, 30]
    expected = tok.encode_reference(texts)
    step = tok.plain_step()
    if step is not None:  # the step alone splits "[SEP]": the test has teeth
        assert expected[3] != _per_text(*step.ids([texts[3]])[:2])[0]
    assert _per_text(*tok.ids(texts)) == expected


def test_vocabulary_ids_with_a_gap_take_hf(tmp_path: Path) -> None:
    """A vocab.txt with a line twice: HF keeps the later id, which leaves a gap; the fast
    paths number tokens by position, so neither is used and the ids are HF's."""
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "hello", "zebra", "##s"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = load_tokenizer(TokenizerSpec.parse(str(tmp_path / "vocab.txt")))
    assert not tok.fast_capable and tok.plain_step() is None
    assert tok.encode_reference(["zebras hello"]) == [[7, 8, 6]]


def test_added_tokens_beside_the_vocabulary(
    tmp_path: Path, module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokens added to a tokenizer.json, beyond its WordPiece vocabulary: never WordPiece's
    pieces ("##qq" is no continuing piece for HF), and found where HF finds them: a
    normalized one in any case and with tab, CR or LF for its space; with any normalized
    token, every text that is not plain goes to HF whole."""
    from feedgpu.converters.text.tokenizer import TextTokenizer

    rng = random.Random(8)
    vocab = _vocab(rng, 400)
    hf = _hf(vocab, True)
    hf.add_tokens(["##qq", "ab cd", "Kelvin", "naïve", " lead"])
    hf.add_tokens([AddedToken("\tzz", normalized=False)])  # matched as written: a tab
    tok = TextTokenizer(Tokenizer.from_str(hf.to_str()))
    assert tok.fast_capable and len(tok.tokens()) == len(vocab)
    texts = ["aqq", "x AB\tCD y", "ab\ncd", "\u212aelvin", "CAF\u00c9S", "plain words", "cafe"]
    # HF matches a normalized token's normal form ("naive"), and its leading space as any.
    texts += ["so NAIVE a", "x\tlead y", "naiv e", "x\tzzq", "x zzq"]
    assert tok.typed_added(texts) == [1, 2, 3, 4, 7, 8, 10]
    expected = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert expected[7] != _per_text(*tok.plain_step().ids([texts[7]])[:2])[0]  # has teeth
    assert _per_text(*tok.ids(texts)) == expected
    lines = [json.dumps({"text": t}).encode() + b"\n" for t in texts]  # the JSON-lines step
    from conftest import joined_lines as joined

    values, lengths, taken, left = tok.line_ids("text")(*joined(lines))  # type: ignore[misc]
    assert left.tolist() == [1, 2, 3, 4, 7, 8, 10, 11]  # the step's search: any space
    assert _per_text(values, lengths) == [expected[i] for i in taken.tolist()]


def test_replacement_characters_take_hfs_ids(module: Any, tmp_path: Path) -> None:
    """U+FFFD (what undecodable bytes are read as): HF's normaliser drops it; the compiled
    step gives HF's ids."""
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "cafe", "au", "lait", "##s"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = load_tokenizer(TokenizerSpec.parse(str(tmp_path / "vocab.txt")))
    texts = ["hello w\ufffdorld", "caf\ufffde au lait", "\ufffd", "worlds \ufffd hello"]
    expected = tok.encode_reference(texts)
    assert expected[0] == [4, 5]
    assert _per_text(*tok.ids(texts)) == expected


def test_a_text_of_many_holes_is_one(module: Any) -> None:
    """Past four chunks that are not plain, a text is one hole, whole (each hole costs the
    caller a string and an insert); up to four, each chunk is its own."""
    rng = random.Random(9)
    vocab = _vocab(rng, 300)
    hf = _hf(vocab, True)
    four = "a é b ü c ï d ö e"
    five = "a é b ü c ï d ö e ä"
    values, lengths, holes = _step(module, vocab, hf, True).ids([four, "x y", five, "z"])
    assert holes[:, 0].tolist() == [0, 0, 0, 0, 2]
    assert holes[-1].tolist() == [2, 0, len(five), int(lengths[:2].sum())]
    assert lengths[2] == 0 and lengths[3] == 1
    texts = [four, "x y", five, "z"]
    assert _filled(hf, texts, values, lengths, holes) == [
        e.ids for e in hf.encode_batch(texts, add_special_tokens=False)
    ]


# JSON lines the fused step must read as Python's parsers do, or leave to them: escapes,
# fields around and inside the text, keys given twice, numbers, nesting, blank and malformed
# lines, non-ASCII, texts that are blank or hold an added token's first character.
_TAKEN_LINES = [
    b'{"text": "Hello, world."}\n',
    b'  {"id": 7, "text":"tab\\there \\"quoted\\" a\\\\b c\\/d\\r\\nnext", "x": [1, {"y": 0}]}\n',
    b'{"text": "first", "meta": {"a": [true, false, -1.5e+3, 0, 2E7]}, "text": "last wins"}\n',
    b'{"url": "http://x/\\u00e9", "text": "an escape elsewhere is fine"}\r\n',
    b'{"text": "no newline at the end"}',
    b'{"n": -' + b"9" * 308 + b', "text": "an integer orjson takes"}\n',
    b'{"n": ' + b"9" * 4301 + b', "text": "an integer Python refuses"}\n',  # a skip there
    b'{"n": ' + b"9" * 309 + b', "text": "one orjson refuses, json takes"}\n',
    b'{"text":"a\\u0020b"}\n',  # \u: decoded
    b'{"text": "caf\xc3\xa9"}\n',  # beyond ASCII, and no table of such characters
    b'{"text": "   \\t "}\n',  # blank text: a skip
    b'{"text": ""}\n',
    b'{"text": 5}\n',
    b'{"text": "x", "text": 5}\n',  # the last is not a string
    b'{"other": "x"}\n',
    b"{}\n",
    b'["text", "x"]\n',
    b'{"text": "x"} trailing\n',
    b'{"text": "x",}\n',
    b'{"text": "bell\\b"}\n',
    b'{"text": "del \x7f"}\n',
    b'{"text": "raw\ttab"}\n',  # a raw control character: not JSON
    b'{"te\\u0078t": "escaped key"}\n',
    b'{"text": "typed [SEP] token"}\n',
    b'{"text": "NaN ok", "n": NaN}\n',
    b'{"text": "deep", "d": ' + b"[" * 70 + b"]" * 70 + b"}\n",
    b'{"text": "lead zero", "n": 01}\n',
    b"\n",
    b"  \x0b\x0c \r\n",
    b"not json\n",
]
_TAKEN = [0, 1, 2, 3, 4, 5, 8]  # the others are left to Python (blank lines: neither)


def test_json_lines_step_takes_only_certain_plain_lines(module: Any, tmp_path: Path) -> None:
    """The fused step (`_json_line.h` then WordPiece) takes a line only when its document is
    beyond doubt and plain, with HF's ids of the text Python's parser reads; leaves every
    other line but the blank ones to the Python path."""
    rng = random.Random(6)
    vocab = _vocab(rng, 600)
    hf = _hf(vocab, lowercase=True)
    step = _step(module, vocab, hf, lowercase=True)
    values, lengths, taken, left = _lines(step, _TAKEN_LINES, "text", ("[SEP]",))
    assert taken.tolist() == _TAKEN
    blank = [i for i, line in enumerate(_TAKEN_LINES) if not line.strip()]
    assert left.tolist() == [i for i in range(len(_TAKEN_LINES)) if i not in _TAKEN + blank]
    texts = [json.loads(_TAKEN_LINES[i])["text"] for i in _TAKEN]
    assert texts[2] == "last wins"
    assert step.lines_of("te\udcffxt", ("[SEP]",)) is None  # no line names it: Python's path reads
    expected = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert _per_text(values, lengths) == expected
    # Another field, and random plain texts written by json.dumps with and without escapes.
    docs = _texts(rng, vocab, 300)
    lines = [json.dumps({"body": t, "n": i}).encode() + b"\n" for i, t in enumerate(docs)]
    values, lengths, taken, left = _lines(step, lines, "body", ())
    kept = [i for i, t in enumerate(docs) if t.strip()]
    assert taken.tolist() == kept
    assert left.tolist() == [i for i in range(len(docs)) if i not in kept]
    expected = [hf.encode(docs[i], add_special_tokens=False).ids for i in kept]
    assert _per_text(values, lengths) == expected


def test_json_lines_step_leaves_only_texts_holding_an_added_tokens_text(module: Any) -> None:
    """A batch's lines are searched for the added tokens' first characters at once
    (`mark_stops`), then those lines' texts for the tokens' whole texts: every text holding
    one in any ASCII case, raw or escaped, at any place in its line and beside blank and
    empty lines, is left to Python; a text holding only a bracket or a token's start (real
    text's "[1913 Webster]", "<b>", "[SE") is taken, and so is one whose line holds a token
    only outside it (another field)."""
    rng = random.Random(8)
    vocab = _vocab(rng, 600)
    hf = _hf(vocab, lowercase=True)
    step = _step(module, vocab, hf, lowercase=True)
    words = [t.removeprefix("##") for t in vocab[10:] if t.isalnum()]
    lines, held = [], []
    for i in range(500):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
        kind = rng.randrange(7)
        at = rng.randint(0, len(text))
        if kind == 1:  # in the text, anywhere, in any case
            text = (
                text[:at] + rng.choice(["[SEP]", "[sep]", "[Sep]", "<MASK>", "<mask>"]) + text[at:]
            )
        if kind == 5:  # brackets and a token's start: no token
            text = (
                text[:at] + rng.choice(["[1913 Webster]", "<b>", "[SE", "[", "<mas k>"]) + text[at:]
            )
        line = json.dumps({"text": text})
        if kind == 2:  # escaped: the line's bytes do not hold it, the text does
            line = json.dumps({"text": text + " ~SEP] x"}).replace("~", "\\u005b")
        if kind == 3:  # only in another field, before or after the text
            pair = json.dumps({"t": ["a", "b[SEP]"]})[1:-1]
            line = "{" + pair + ", " + line[1:] if i % 2 else line[:-1] + ", " + pair + "}"
        lines.append(line.encode() + b"\n")
        if kind == 4:
            lines.append(rng.choice([b"\n", b"  \n"]))  # blank: neither taken nor left
        held.append((len(lines) - 1 - (kind == 4), kind in (1, 2)))
    values, lengths, taken, left = _lines(step, lines, "text", ("[SEP]", "<mask>"))
    assert left.tolist() == [at for at, holds in held if holds]
    assert taken.tolist() == [at for at, holds in held if not holds]
    texts = [json.loads(lines[i])["text"] for i in taken.tolist()]
    assert any("[" in t for t in texts) and any("<" in t for t in texts)
    expected = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert _per_text(values, lengths) == expected


def test_json_lines_step_finds_each_stop_at_every_offset(module: Any) -> None:
    """The string scan (sixteen bytes a step where the CPU has SSE2, then byte by byte) stops
    at a quote, an escape, a control character or a byte beyond ASCII wherever it sits in a
    long text or key, and an escaped text's decoding at each escape (a DEL it copies is
    refused after, by the step): at each offset over several steps, a line is taken exactly when its
    document is certain and plain, with HF's ids of the text Python reads."""
    rng = random.Random(12)
    vocab = _vocab(rng, 600)
    hf = _hf(vocab, lowercase=True)
    step = _step(module, vocab, hf, lowercase=True)
    # A stop as written in a JSON string: (in a text, in a key) whether the line is taken.
    # Escapes decode to plain text, but a key with one is never compared; a raw control
    # character is not JSON; text beyond ASCII needs a table (this step has none), a key
    # beyond ASCII does not; DEL is JSON but not plain text.
    stops = {
        b'\\"': (True, False),
        b"\\\\": (True, False),
        b"\\n": (True, False),
        b"\x01": (False, False),
        b"\t": (False, False),
        b"\xc3\xa9": (False, True),
        b"\x7f": (False, True),
        # An escaped text is decoded sixteen bytes a step too: escapes and a DEL after runs
        # of every length.
        b"\\/" + b"d" * 20 + b"\\r" + b"e" * 16 + b"\\t": (True, False),
        b"\\n" + b"c" * 17 + b"\x7f": (False, False),
    }
    lines, taken = [], []
    for stop, (in_text, in_key) in stops.items():
        for at in range(50):
            body = b"a" * at + stop + b" b" * 20
            lines += [b'{"text": "' + body + b'"}', b'{"k' + body + b'": 1, "text": "xy"}']
            taken += [in_text, in_key]
    values, lengths, took, left = _lines(step, lines, "text", ())
    assert took.tolist() == [i for i, t in enumerate(taken) if t]
    assert left.tolist() == [i for i, t in enumerate(taken) if not t]
    texts = [json.loads(lines[i])["text"] for i in took.tolist()]
    assert _per_text(values, lengths) == [
        e.ids for e in hf.encode_batch(texts, add_special_tokens=False)
    ]


def test_json_lines_step_refuses_bounds_outside_its_bytes(module: Any) -> None:
    """Lines' bounds past the bytes, falling, negative, not int64, or none at all: a clear
    ValueError, never a read outside the data; no lines at all: nothing."""
    rng = random.Random(13)
    vocab = _vocab(rng, 100)
    ids = _step(module, vocab, _hf(vocab, lowercase=True), lowercase=True).lines_of("text")
    assert ids is not None
    data = b'{"text": "a"}\n{"text": "b"}\n'
    assert [part.tolist() for part in ids(data, np.array([0, 14, 28]))][2:] == [[0, 1], []]
    assert [len(part) for part in ids(data, np.array([28]))] == [0, 0, 0, 0]
    falling = "not rising within the data"
    for bad, why in (([0, 29], falling), ([14, 0], falling), ([-1, 14], falling), ([], "int64")):
        with pytest.raises(ValueError, match=why):
            ids(data, np.array(bad, np.int64))
    with pytest.raises(ValueError, match="int64"):
        ids(data, np.array([0, 14], np.float64))


def test_json_lines_step_holds_ids_for_texts_not_lines(module: Any) -> None:
    """The step's ids take room for the texts it tokenizes, not for whole lines: a line of
    20 MB of metadata and a short text, or a 20 MB line it leaves, costs it no 160 MB."""
    import tracemalloc

    from conftest import joined_lines as joined

    rng = random.Random(11)
    vocab = _vocab(rng, 600)
    step = _step(module, vocab, _hf(vocab, lowercase=True), lowercase=True)
    meta = b"x" * (20 << 20)
    lines = [
        b'{"meta": "' + meta + b'", "text": "short"}\n',
        b'{"text": "caf\xc3\xa9 ' + meta + b'"}',
    ]
    ids, (data, ends) = step.lines_of("text"), joined(lines)  # as a conversion reads them
    assert ids is not None
    tracemalloc.start()
    try:
        _, lengths, taken, left = ids(data, ends)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert taken.tolist() == [0] and left.tolist() == [1] and len(lengths) == 1
    assert peak < 8 << 20, peak


def test_messy_json_lines_convert_the_same_without_the_step(
    module: Any, records: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corpus of every kind of line above, among plain ones: the fused step and the Python
    path (FEEDGPU_NO_NATIVE) write the same shards and report the same skips."""
    from feedgpu.converters.text.convert import TextOptions, convert_text

    rng = random.Random(7)
    vocab = _vocab(rng, 600)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    src = tmp_path / "src"
    src.mkdir()
    plain = [json.dumps({"text": t}).encode() + b"\n" for t in _texts(rng, vocab, 400) if t]
    lines = plain + _TAKEN_LINES[:4] * 3 + [line.rstrip(b"\n") + b"\n" for line in _TAKEN_LINES]
    rng.shuffle(lines)
    (src / "a.jsonl").write_bytes(b"".join(lines))
    # Lines left to Python that are all usual (texts that are not plain): parsed at once.
    usual = [
        json.dumps({"text": t + (" naïve" if i % 3 else "")}, ensure_ascii=i % 2 == 0)
        for i, t in enumerate(_texts(rng, vocab, 300))
        if t.strip()
    ]
    usual[100:100] = ["{bad", '{"text": ""}', '{"text": "\\ud800 lone"}']  # halved around
    (src / "b.jsonl").write_text("\n".join(usual) + "\n")
    outs: list[Path] = []
    skips: list[dict[str, int]] = []
    for flag in ("0", "1"):
        monkeypatch.setenv(NO_NATIVE_ENV, flag)
        out = tmp_path / f"out{flag}"
        options = TextOptions(tokenizer=str(tmp_path / "vocab.txt"))
        report = convert_text(str(src), str(out), options, allow_skips=True)
        outs.append(out)
        skips.append(report.skipped_by_reason)
    assert skips[0] == skips[1] and sum(skips[0].values()) >= 10, skips
    shards = sorted(p.name for p in outs[0].glob("*.tfrecord-*"))
    assert shards
    for name in shards:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


def test_an_install_without_the_steps_converts_the_same_bytes_through_hf(
    module: Any, records: Any, tmp_path: Path
) -> None:
    """A package built without a C compiler (its compiled steps not importable, whatever the
    environment says): `feedgpu convert text` writes the same shards through HF and the
    Python reference, says once on its output which road ran and how to get the other, and
    the manifest names the road and why."""
    import subprocess
    import sys

    from feedgpu.converters.text.tokenizer import NO_STEP, NO_STEP_HELP

    src = _corpus(tmp_path, 9, 2000, ["naïve café [1913 Webster]", "a [SEP] b"])
    blocker = (
        "import sys, runpy\n"
        "class Blocker:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith('feedgpu.converters.text._'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Blocker())\n"
        "sys.argv = ['feedgpu', *sys.argv[1:]]\n"
        "runpy.run_module('feedgpu', run_name='__main__')\n"
    )
    outs = []
    for name, prefix in (("built", []), ("without", ["-c", blocker])):
        out = tmp_path / name
        command = [sys.executable, *(prefix or ["-m", "feedgpu"]), "convert", "text", str(src)]
        env = {k: v for k, v in os.environ.items() if k != NO_NATIVE_ENV}
        done = subprocess.run(
            [*command, str(out), "--tokenizer", str(tmp_path / "vocab.txt")],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        outs.append((out, done.stdout + done.stderr))
    (built, said_built), (without, said_without) = outs
    assert said_without.count(NO_STEP_HELP) == 1, said_without[-2000:]
    assert NO_STEP not in said_built and "tokenizer: the compiled road" in said_built
    assert f"tokenizer: the hf road ({NO_STEP})" in said_without
    manifest = json.loads((without / "feedgpu.json").read_text())
    assert (manifest["tokenizer"]["road"], manifest["tokenizer"]["reason"]) == ("hf", NO_STEP)
    shards = sorted(p.name for p in built.glob("*.tfrecord-*"))
    assert shards
    for shard in shards:
        assert (built / shard).read_bytes() == (without / shard).read_bytes(), shard


def test_layout_sample_counts_are_hfs(module: Any, tmp_path: Path) -> None:
    """The layout's sample counts ids by the step where it can: HF's counts for plain texts,
    texts that are not plain, typed added tokens and words over the length limit alike."""
    from feedgpu.converters.text.convert import _id_counts
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    rng = random.Random(10)
    vocab = _vocab(rng, 600)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = load_tokenizer(TokenizerSpec.parse(str(tmp_path / "vocab.txt")))
    assert tok.plain_step() is not None
    texts = [*_texts(rng, vocab, 200), "naïve café", "a [SEP] b", "x" * 150, "", "a\x01b"]
    assert _id_counts(tok, texts) == [len(ids) for ids in tok.encode_reference(texts)]


def test_line_bounds_are_where_readlines_cuts(
    records: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block's line bounds by the step (memchr) and by numpy are where `readlines` cuts the
    same bytes: empty, one line without its newline, blank lines, CR (not an end), and random
    bytes around newlines; of the bytes up to a size only, more bytes after them."""
    import io

    from feedgpu.converters.text.raw_lines import line_bounds

    rng = np.random.default_rng(14)
    cases = [b"", b"a", b"\n", b"\n\n", b"a\r\nb\rc", b"x\ny\n"]
    cases += [rng.choice([10, 13, 97, 0, 255], int(n)).astype(np.uint8).tobytes() for n in (9, 500)]
    cases += [b"\n" * 5000, b"a" * 63 + b"\n" + b"b" * 64 + b"\n" + b"c" * 200]
    cases += [b"x" * 3000 + b"\n" + b"y" * 700 + b"\nz\n" + b"w" * 257]  # long lines
    cases += [rng.choice([10] + [97] * 99, 20_000).astype(np.uint8).tobytes()]
    for data in cases:
        lines = io.BytesIO(data).readlines()
        expected = list(itertools.accumulate(map(len, lines), initial=0))
        got = line_bounds(data)
        cut = line_bounds(data + b"a part\nline", len(data))  # bytes beyond size not looked at
        monkeypatch.setenv(NO_NATIVE_ENV, "1")
        assert got.dtype == np.int64 and got.tolist() == line_bounds(data).tolist()
        assert cut.tolist() == line_bounds(data + b"more", len(data)).tolist()
        monkeypatch.delenv(NO_NATIVE_ENV)
        assert got.tolist() == cut.tolist() == expected, data
    with pytest.raises(ValueError, match="beyond"):
        records.line_ends(b"ab", 3)


@pytest.mark.parametrize("hardware", [True, False])
def test_framing_step_writes_tfrecords_bytes(records: Any, hardware: bool) -> None:
    """The step's CRC32C (its frames' checksums), by the CPU's instruction (where it has one)
    and by tables, is google-crc32c's on every length around the 8-byte steps, from unaligned
    starts."""
    import google_crc32c

    rng = random.Random(12)
    data = bytes(rng.randrange(256) for _ in range(4096))
    for start in range(4):
        for n in [*range(0, 40), 255, 4000]:
            part = data[start : start + n]
            assert records.crc32c(part, hardware) == google_crc32c.value(part), (start, n)


def test_routes_are_tensorflows(records: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Documents' shards by the step's SipHash are TensorFlow's `to_hash_bucket_strong`'s (the
    shards of every dataset converted before stay where they were): empty, ASCII and non-ASCII
    names of every length around SipHash's 8-byte blocks, keys of the seeds conversions use and
    extreme ones, and bucket counts down to one."""
    import tensorflow as tf

    from feedgpu.converters.text.names import Names, route, route_key

    rng = random.Random(15)
    ids = ["", "a", "part-000.jsonl:17", "données/é.jsonl:0", "東京" * 9]
    ids += ["".join(chr(rng.randint(32, 0x30FF)) for _ in range(n % 40)) for n in range(400)]
    names = Names.of(ids)
    for key in (route_key(0), route_key(12345), [0, 0], [2**63 - 1, 1]):
        graph = tf.strings.to_hash_bucket_strong(ids, 1 << 62, key).numpy().astype(np.uint64)
        assert route(names, key).tolist() == graph.tolist()
    for buckets in (1, 7, 1 << 62):
        step = np.frombuffer(
            records.route(names.blob, names.starts, names.sizes, 3, 4, buckets), np.uint64
        )
        graph = tf.strings.to_hash_bucket_strong(ids, buckets, [3, 4]).numpy()
        assert step.max() < buckets and step.tolist() == graph.astype(np.uint64).tolist()
