"""A tokenizer's identity made in slices is the hash of `json.dumps(config, sort_keys=True,
ensure_ascii=False)`, byte for byte: datasets converted before keep theirs."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from feedgpu.converters.text import identity
from feedgpu.converters.text.identity import content_hash
from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer


def whole(value: Any) -> str:
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, ensure_ascii=False).encode()
    ).hexdigest()


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-(10**20), 10**20)
    if kind == 2:
        return rng.choice([0.5, -1e300, 3.0, 1e-7])
    if kind in (3, 4):
        return "".join(
            rng.choice('ab"\\\n\u00e9\u2603\U0001f600 ') for _ in range(rng.randint(0, 6))
        )
    size = rng.choice([0, 1, 3, identity.SLICE - 1, identity.SLICE + 1, 2 * identity.SLICE + 7])
    if kind == 5:
        return [random_json(rng, depth + 2) for _ in range(size)]
    keys = {"".join(rng.choice("xyz\u00e9") for _ in range(8)) for _ in range(size)}
    return {k: random_json(rng, depth + 2) for k in keys}


def test_identity_in_slices_is_the_whole_dumps_hash(tmp_path: Path) -> None:
    from collections import OrderedDict

    rng = random.Random(3)
    for _ in range(40):
        value = random_json(rng)
        assert content_hash(value) == whole(value)

    # a subclass's keys are sorted too (a slice holding one is not written unsorted), a dict
    # in a tuple too, and a subclass is read as json reads it (its items)
    class Odd(dict):
        def __getitem__(self, key: Any) -> Any:
            return "not json's"

    class OddList(list):
        def __iter__(self) -> Any:
            return iter(["x"])

    nested = {"b": OrderedDict([("z", 1), ("a", 2)]), "a": 1, "c": "x", "d": ({"z": 1, "b": 2},)}
    for value in (nested, Odd(a="x"), {"o": Odd(a="x")}, [OddList([{"b": 1, "a": 2}])]):
        assert content_hash(value) == whole(value)
    words = [f"w{i}" for i in range(30000)]
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words]))
    tok = load_tokenizer(TokenizerSpec.parse(str(tmp_path / "vocab.txt")))
    assert tok.identity == whole(tok.config)
    pieces = list(identity._pieces(tok.config))
    assert max(map(len, pieces)) < sum(map(len, pieces)) / 20  # the vocabulary in slices


def test_a_bpe_tokenizers_identity_is_unchanged(tmp_path: Path) -> None:
    texts = [f"the {i} quick brown fox {i * 7} jumps" for i in range(400)]
    tok = load_tokenizer(TokenizerSpec.parse("train:bpe:600"), texts)
    assert isinstance(tok.config["model"]["merges"], list) and tok.config["model"]["merges"]
    assert tok.identity == whole(tok.config)
