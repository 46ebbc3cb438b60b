"""Fuzz feedgpu's compiled text steps: every entry point that takes input bytes, built with
AddressSanitizer and UndefinedBehaviorSanitizer (`fuzz/run.sh`), fed the committed seed corpus
and, for a bounded time, Hypothesis's inputs made from it (mutated seeds and random bytes).

An entry point may refuse an input with a Python exception (ValueError, OverflowError, ...): that
is its contract. A sanitizer report aborts the process, and the run fails.

Usage: python fuzz/fuzz_native.py BUILD_DIR [--seconds 60] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib.util
import json
import random
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CORPUS = Path(__file__).parent / "corpus"
# How an entry point refuses an input it cannot take. (Not TypeError: every call here is
# well-typed, so one means the harness no longer matches the step, and the run fails.)
REFUSALS = (ValueError, OverflowError, MemoryError, UnicodeError)
# Bytes that steer a JSON or UTF-8 parser somewhere new when put into a seed.
INTERESTING = [
    b'"',
    b"\\",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"\\u005b",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"\n",
    b"\r",
    b"\t",
    b"\x00",
    b"\x7f",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80",
    b"\xe2\x80\xa6",
    b"\xef\xbf\xbd",
    b"\xf0\x9f\x98\x80",
    b"1e999",
    b"-0",
    b"null",
    b'"text"',
    b"[SEP]",
    b"##",
    b" " * 40,
    b"a" * 120,
]


def load(build: Path, name: str) -> Any:
    """A compiled step from the sanitized build (not the installed package's)."""
    found = sorted(build.glob(f"**/{name}.*.so"))
    if not found:
        sys.exit(f"fuzz: no sanitized {name} under {build} (did the build fail?)")
    spec = importlib.util.spec_from_file_location(name, found[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seeds() -> list[bytes]:
    """The committed seed corpus; a .gz seed both as stored (a gzip stream, whole or cut) and
    expanded (a 10 MB line)."""
    found = []
    for path in sorted(CORPUS.iterdir()):
        data = path.read_bytes()
        found.append(data)
        if path.suffix == ".gz":
            with contextlib.suppress(EOFError, OSError):  # truncated: its bytes alone
                found.append(gzip.decompress(data))
    return found


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to eight edits: a byte flipped, a piece inserted, a span cut or repeated."""
    out = bytearray(data[: 1 << 16] if len(data) > 1 << 20 and rng.random() < 0.9 else data)
    for _ in range(rng.randint(1, 8)):
        at = rng.randint(0, len(out))
        kind = rng.randrange(5)
        if kind == 0 and out:
            out[min(at, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif kind == 1:
            out[at:at] = rng.choice(INTERESTING)
        elif kind == 2:
            del out[at : at + rng.randint(1, 64)]
        elif kind == 3 and out:
            span = out[at : at + rng.randint(1, 32)]
            out[at:at] = span * rng.randint(1, 50)
        else:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return bytes(out)


class Targets:
    """Each entry point, called on one input; how many calls each took."""

    def __init__(self, wordpiece: Any, records: Any) -> None:
        self.wp, self.rec = wordpiece, records
        tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "a", "##s", "##ing", "[", "("]
        tokens += [chr(c) for c in range(0x21, 0x7F)] + ["##" + chr(c) for c in range(0x61, 0x7B)]
        tokens += ["é", "東", "##é"]
        self.vocab = wordpiece.build(tokens, "##", 1, 100, True)
        entries = b"".join(  # code point, kind, form length, form (12 bytes): char_table's
            struct.pack("<IBB12s", code, kind, len(form), form)
            for code, kind, form in ((0xE9, 1, b"e"), (0x6771, 2, "東".encode()), (0xA0, 3, b""))
        )
        self.table = wordpiece.chars(entries)
        self.calls: dict[str, int] = {}
        self.taken: dict[str, int] = {}  # calls that returned (not refused)

    def run(self, data: bytes, rng: random.Random) -> None:
        for name, target in self.every():
            self.calls[name] = self.calls.get(name, 0) + 1
            with contextlib.suppress(REFUSALS):
                target(data, rng)
                self.taken[name] = self.taken.get(name, 0) + 1

    def every(self) -> list[tuple[str, Callable[[bytes, random.Random], Any]]]:
        return [
            ("json lines", self.json_lines),
            ("utf-8 texts", self.texts),
            ("line ends", lambda d, r: self.rec.line_ends(d, r.randint(-1, len(d) + 2))),
            ("records", self.records),
            ("packing", self.packing),
            ("names and routes", self.names),
        ]

    def json_lines(self, data: bytes, rng: random.Random) -> None:
        ends = np.frombuffer(self.rec.line_ends(data, -1), np.int64)
        if rng.random() < 0.1:  # bounds of its own: refused unless rising within the data
            ends = np.array(sorted(rng.randint(-2, len(data) + 2) for _ in range(4)), np.int64)
        table = self.table if rng.random() < 0.7 else None
        tokens = rng.choice([(), (b"[SEP]", b"[sep]"), (b" x", b"\tY"), (b"\\u",), (b"[",)])
        field = rng.choice([b"text", b"", b"t\xc3\xa9xt", data[:8]])
        self.wp.lines(self.vocab, table, data, ends, field, tokens)

    def texts(self, data: bytes, rng: random.Random) -> None:
        text = data.decode("utf-8", errors=rng.choice(["replace", "ignore", "surrogateescape"]))
        self.wp.tokenize(self.vocab, self.table if rng.random() < 0.7 else None, [text, "a", ""])

    def _ids(self, data: bytes) -> Any:
        return np.frombuffer(data[: len(data) // 8 * 8], np.int64).copy()

    def _spans(self, rng: random.Random, count: int, within: int) -> tuple[Any, Any]:
        """count (start, size) pairs, mostly within `within` items, now and then not."""
        starts = [rng.randint(-1 if rng.random() < 0.02 else 0, within) for _ in range(count)]
        sizes = [rng.randint(0, within - s + (rng.random() < 0.02)) for s in starts]
        return np.array(starts, np.int64), np.array(sizes, np.int64)

    def records(self, data: bytes, rng: random.Random) -> None:
        """The serializer on columns made of the input: values, slices of a pool of its
        bytes as ids, strings of its bytes; counts that (mostly) cover them."""
        ids = self._ids(data)
        n = rng.randint(0, 6)
        cut = sorted(rng.randint(0, len(ids)) for _ in range(max(0, n - 1)))
        counts = np.diff([0, *cut, len(ids)]).astype(np.int64) if n else np.zeros(0, np.int64)
        if rng.random() < 0.05 and n:
            counts[0] += rng.choice([-1, 1, 1 << 62])
        slices = np.array([rng.randint(0, 3) for _ in range(n)], np.int64)
        starts, sizes = self._spans(rng, int(slices.sum()), len(ids))
        strings = np.array([rng.randint(1, 2) for _ in range(n)], np.int64)
        bstarts, bsizes = self._spans(rng, int(strings.sum()), len(data))
        columns = [
            (b"doc_id", 2, strings, data, bstarts, bsizes),
            (b"input_ids", 1, slices, ids, starts, sizes),
            (b"length", 0, counts, ids),
        ]
        count = rng.choice([1, 2, 5, (1 << 61) + 1]) if rng.random() < 0.1 else rng.randint(1, 4)
        shards = np.array([rng.randint(0, 4) for _ in range(n)], np.int64)
        self.rec.serialize(columns, n, shards, count)

    def packing(self, data: bytes, rng: random.Random) -> None:
        ids = self._ids(data)
        marks = bytes(b & 1 for b in data[: len(ids)])
        cut = sorted(rng.randint(0, len(ids)) for _ in range(rng.randint(0, 4)))
        lengths = np.diff([0, *cut, len(ids)]).astype(np.int64)
        if rng.random() < 0.05:
            lengths[0] += rng.choice([-1, 1])
        n = rng.choice([1, 3, 16, 1024, (1 << 62) + 3])
        self.rec.pack(ids, marks, lengths, n, rng.randint(0, 9))

    def names(self, data: bytes, rng: random.Random) -> None:
        numbers = self._ids(data)[:64]
        blob, sizes = self.rec.numbered(data[:20], numbers)
        sizes = np.frombuffer(sizes, np.int64)
        starts = np.cumsum(sizes) - sizes
        if rng.random() < 0.3:
            starts, sizes = self._spans(rng, len(sizes), len(blob))
        self.rec.route(blob, starts, sizes, rng.getrandbits(64), rng.getrandbits(64), 1 << 62)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", type=Path, help="where the sanitized extensions were built")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    targets = Targets(load(args.build, "_wordpiece"), load(args.build, "_records"))
    corpus = seeds()
    rng = random.Random(0)
    for data in corpus:  # every seed as committed, first
        targets.run(data, rng)
    deadline = time.monotonic() + args.seconds

    @settings(
        max_examples=200,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        st.integers(0, len(corpus) - 1), st.binary(max_size=512), st.randoms(use_true_random=True)
    )
    def one(index: int, noise: bytes, r: random.Random) -> None:
        data = mutate(corpus[index], r) if r.random() < 0.8 else noise
        targets.run(data, r)

    while time.monotonic() < deadline:
        one()
    result = {"seconds": args.seconds, "seeds": len(corpus), "executions": targets.calls}
    never = [name for name in targets.calls if not targets.taken.get(name)]
    if never:  # an entry point that refuses every input tests nothing
        sys.exit(f"fuzz: no input was ever taken by {', '.join(never)}")
    print(json.dumps(result) if args.json else f"fuzz: no finding; executions {targets.calls}")
    return result


if __name__ == "__main__":
    main()
