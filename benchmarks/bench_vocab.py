"""How long does `--tokenizer train:wordpiece:16000` take, beside HF's WordPiece trainer alone?

On a generated corpus of the shape a user's was (12,458 JSONL documents, 4.7 MB, in
English-, German- and Russian-like words, median 58-343 characters by class, five documents of
~100k characters), alternating rounds in one process:
  (h) HF `WordPieceTrainer` alone on the documents in memory: fast, not deterministic
      (huggingface/tokenizers#1794);
  (o) ours: `load_tokenizer` as the converter calls it (two passes: the alphabet, then HF's
      trainer with every "##c" made first, so that no id follows a hash map's order).
Then `feedgpu convert text` itself, twice into two folders: its tokenizer stage (reading the
files twice included) and whether both vocab.txt files are byte-identical.
Prints, last: ours/(h) time, vocabulary sizes, and how many distinct vocabularies each made.

Usage: python benchmarks/bench_vocab.py [--docs 12458] [--vocab-size 16000] [--rounds 3]
       [--long-docs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

ALPHABETS = {
    "en": "etaoinshrdlcumwfgypbvkjxqz",
    "de": "enisratdhulcgmobwfkzvüäößpjyxq",
    "ru": "оеаинтсрвлкмдпуяыьгзбчйхжшюцщэфъё",
}
# Median characters a document, by class (as the user's five classes ran from 58 to 343).
MEDIANS = {"en": 58, "de": 140, "ru": 343}


@dataclass(frozen=True)
class VocabResult:
    documents: int
    megabytes: float
    vocab_size: int
    hf_s: float
    ours_s: float
    hf_size: int
    ours_size: int
    hf_distinct: int
    ours_distinct: int
    convert_tokenizer_s: float
    convert_identical: bool


def make_corpus(path: str, docs: int, seed: int = 0, long_docs: int = 5) -> list[str]:
    """One JSONL file of short documents in three scripts, and long_docs of ~100k characters."""
    rng = random.Random(seed)
    words = {
        lang: ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(6000)]
        for lang, letters in ALPHABETS.items()
    }
    weights = [1 / (rank + 1) for rank in range(6000)]
    long_at = set(range(1, docs, max(1, docs // long_docs))[:long_docs]) if long_docs else set()
    texts = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(docs):
            lang = rng.choice(list(ALPHABETS))
            chars = 100_000 if i in long_at else int(rng.lognormvariate(0, 0.5) * MEDIANS[lang])
            text, size = [], 0
            while size < chars:
                word = rng.choices(words[lang], weights)[0]
                text.append(word.capitalize() if rng.random() < 0.1 else word)
                size += len(word) + 1
            line = " ".join(text) + "."
            texts.append(line)
            f.write(json.dumps({"text": line, "label": lang}, ensure_ascii=False) + "\n")
    return texts


def hf_alone(texts: list[str], vocab_size: int) -> tuple[float, tuple[str, ...]]:
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer
    from tokenizers.trainers import WordPieceTrainer

    start = time.perf_counter()
    tok = Tokenizer(WordPiece(unk_token="[UNK]"))
    tok.normalizer = BertNormalizer(lowercase=True)
    tok.pre_tokenizer = BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=special, show_progress=False
    )
    tok.train_from_iterator(texts, trainer)
    seconds = time.perf_counter() - start
    vocab = tok.get_vocab()
    return seconds, tuple(sorted(vocab, key=vocab.__getitem__))


def ours(texts: list[str], vocab_size: int) -> tuple[float, tuple[str, ...]]:
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    start = time.perf_counter()
    tok = load_tokenizer(TokenizerSpec.parse(f"train:wordpiece:{vocab_size}"), texts)
    seconds = time.perf_counter() - start
    vocab = tok.hf.get_vocab()
    return seconds, tuple(sorted(vocab, key=vocab.__getitem__))


def main(argv: Sequence[str] | None = None) -> VocabResult:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=12458)
    parser.add_argument("--vocab-size", type=int, default=16000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--long-docs", type=int, default=5, help="documents of ~100k characters")
    args = parser.parse_args(argv)

    import feedgpu

    root = tempfile.mkdtemp(prefix="bench_vocab_")
    try:
        src = os.path.join(root, "corpus")
        os.makedirs(src)
        texts = make_corpus(os.path.join(src, "corpus.jsonl"), args.docs, long_docs=args.long_docs)
        megabytes = os.path.getsize(os.path.join(src, "corpus.jsonl")) / 1e6
        print(f"corpus: {args.docs} documents, {megabytes:.1f} MB; vocabulary {args.vocab_size}")
        times: dict[str, list[float]] = {"hf": [], "ours": []}
        vocabs: dict[str, set[tuple[str, ...]]] = {"hf": set(), "ours": set()}
        sizes = {}
        for r in range(args.rounds):
            order = (("hf", hf_alone), ("ours", ours))
            for name, run in order if r % 2 == 0 else order[::-1]:
                seconds, vocab = run(texts, args.vocab_size)
                times[name].append(seconds)
                vocabs[name].add(vocab)
                sizes[name] = len(vocab)
                print(f"  round {r + 1} {name}: {seconds:.2f} s, {len(vocab)} entries")
        stages, files = [], []
        for i in range(2):
            out = os.path.join(root, f"out{i}")
            options = feedgpu.TextOptions(tokenizer=f"train:wordpiece:{args.vocab_size}")
            report = feedgpu.convert_text(src, out, options, quiet=True)
            stages.append(report.stages_s["tokenizer"])
            with open(os.path.join(out, "vocab.txt"), "rb") as f:
                files.append(f.read())
        result = VocabResult(
            documents=args.docs,
            megabytes=round(megabytes, 2),
            vocab_size=args.vocab_size,
            hf_s=statistics.median(times["hf"]),
            ours_s=statistics.median(times["ours"]),
            hf_size=sizes["hf"],
            ours_size=sizes["ours"],
            hf_distinct=len(vocabs["hf"]),
            ours_distinct=len(vocabs["ours"]),
            convert_tokenizer_s=max(stages),
            convert_identical=files[0] == files[1],
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"convert text's tokenizer stage: {result.convert_tokenizer_s:.2f} s (slower of 2 runs), "
        f"vocab.txt identical: {result.convert_identical}"
    )
    print(
        f"ours/(h) time = {result.ours_s / result.hf_s:.2f} ({result.ours_s:.2f} s vs "
        f"{result.hf_s:.2f} s); entries {result.ours_size} vs {result.hf_size}; distinct "
        f"vocabularies over {args.rounds} rounds: ours {result.ours_distinct}, "
        f"(h) {result.hf_distinct}"
    )
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
