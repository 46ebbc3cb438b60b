"""Generated test data: small seeded image folders and every kind of bad input we survive."""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import string
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

import feedgpu
from feedgpu.samples import make_image, write_sample_images

SMALL_SIZES = ((64, 48), (48, 64), (80, 60))


def shard_examples(out: Path) -> list[dict]:
    """Every example of a dataset folder, decoded by feedgpu's own codec, shard by shard: text
    records holding blocks of documents give one example a document."""
    from feedgpu import block_documents
    from feedgpu.format.records import decode_example, read_records

    found = []
    for shard in sorted(out.glob("*.tfrecord-*")):
        if shard.suffix == ".idx":  # a record index beside its shard
            continue
        with open(shard, "rb") as f:
            found += [d for r in read_records(f) for d in block_documents(decode_example(r))]
    return found


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    """src/CLASS/NNNNN.jpg: 3 classes x 12 small photo-like JPEGs."""
    src = tmp_path / "src"
    write_sample_images(str(src), num_classes=3, images_per_class=12, sizes=SMALL_SIZES)
    return src


@pytest.fixture(scope="session")
def image_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """image_folder's images converted once for the test run, in 4 shards. Read-only: a test
    that changes a dataset copies it (or converts its own)."""
    root = tmp_path_factory.mktemp("image_data")
    src = root / "src"
    write_sample_images(str(src), num_classes=3, images_per_class=12, sizes=SMALL_SIZES)
    out = root / "images"
    feedgpu.convert_images(str(src), str(out), feedgpu.ImageOptions(num_shards=4), quiet=True)
    return out


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_bomb(width: int = 100_000, height: int = 100_000) -> bytes:
    """A tiny PNG whose header claims width x height pixels."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\0" * 16)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )


def jpeg_bytes(img: Image.Image, **kwargs: object) -> bytes:
    out = io.BytesIO()
    img.save(out, "JPEG", **kwargs)
    return out.getvalue()


# file -> the skip reason it must get (None: it must convert)
NASTY_EXPECTED = {
    "good/plain.jpg": None,
    "good/progressive.jpg": None,
    "good/grey.jpg": None,
    "good/upper.JPEG": None,
    "good/png_named.jpg": None,
    "good/alpha.png": None,
    "good/palette.gif": None,
    "good/animated.gif": None,
    "good/sixteen.png": None,
    "good/cmyk.jpg": None,
    "good/rotated.jpg": None,
    "good/image.bmp": None,
    "good/image.webp": None,
    "good/image.tiff": None,
    "bad/truncated.jpg": "truncated",
    "bad/empty.jpg": "empty file",
    "bad/text.jpg": "undecodable",
    "bad/bomb.png": "decompression bomb",
    "bad/broken_link.jpg": "broken symlink",
    "bad/.hidden.jpg": "hidden",
    "bad/notes.txt": "not an image",
    "bad/loop": "symlink loop",
    "stray.jpg": "no label",
}


@pytest.fixture
def nasty_folder(tmp_path: Path) -> Path:
    """A class-per-folder source holding every odd and broken file kind (see NASTY_EXPECTED)."""
    src = tmp_path / "nasty"
    (src / "good").mkdir(parents=True)
    (src / "bad").mkdir()
    photo = make_image(7, 60, 40)
    assert isinstance(photo, Image.Image)
    (src / "good/plain.jpg").write_bytes(jpeg_bytes(photo, quality=90))
    (src / "good/progressive.jpg").write_bytes(jpeg_bytes(photo, progressive=True))
    (src / "good/grey.jpg").write_bytes(jpeg_bytes(photo.convert("L")))
    (src / "good/upper.JPEG").write_bytes(jpeg_bytes(photo))
    photo.save(src / "good/png_named.jpg", "PNG")
    rgba = photo.convert("RGBA")
    rgba.putalpha(128)
    rgba.save(src / "good/alpha.png")
    photo.convert("P").save(src / "good/palette.gif")
    frames = [make_image(i, 30, 20).convert("P") for i in range(3)]  # type: ignore[union-attr]
    frames[0].save(src / "good/animated.gif", save_all=True, append_images=frames[1:])
    Image.new("I;16", (32, 24), 40000).save(src / "good/sixteen.png")
    (src / "good/cmyk.jpg").write_bytes(jpeg_bytes(photo.convert("CMYK")))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees on display
    (src / "good/rotated.jpg").write_bytes(jpeg_bytes(photo, exif=exif.tobytes()))
    photo.save(src / "good/image.bmp")
    photo.save(src / "good/image.webp")
    photo.save(src / "good/image.tiff")
    good = jpeg_bytes(make_image(8, 120, 90))  # type: ignore[arg-type]
    (src / "bad/truncated.jpg").write_bytes(good[: len(good) // 2])
    (src / "bad/empty.jpg").write_bytes(b"")
    (src / "bad/text.jpg").write_text("this is not an image\n")
    (src / "bad/bomb.png").write_bytes(png_bomb())
    os.symlink(src / "bad/missing.jpg", src / "bad/broken_link.jpg")
    (src / "bad/.hidden.jpg").write_bytes(good)
    (src / "bad/notes.txt").write_text("notes")
    os.symlink(src / "bad", src / "bad/loop")
    (src / "stray.jpg").write_bytes(good)
    return src


_WORD_LINES = (
    "the film was great bad plot actor story excellent boring",  # English
    "café naïve über straße élève",  # accents
    "привет мир книга",  # Cyrillic
    "東京 日本語 中文字",  # CJK
    "مرحبا سلام",  # Arabic
    "😀 🚀 👍🏽",  # emoji
    "don't e-mail U.S.A. 3.14 #tag @user",  # punctuation
)
WORDS = [word for line in _WORD_LINES for word in line.split()]
ODD_WORDS = ["ﬁne", "Ⅻ", "ＡＢＣ", "zero\u200bwidth", "bell\x07", "x" * 150, "é" * 60]


def make_document(rng: random.Random, words: int) -> str:
    pool = WORDS + ODD_WORDS if rng.random() < 0.2 else WORDS
    return " ".join(rng.choice(pool) for _ in range(words))


# A BERT vocabulary written out, for tests where training one is not the point: every word
# splits into known pieces (whole words of the test corpora, else letters and digits).
LITERAL_VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    *string.ascii_lowercase, *string.digits, *string.punctuation,
    *(f"##{c}" for c in string.ascii_lowercase + string.digits),
]  # fmt: skip


@pytest.fixture(scope="session")
def vocab_txt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(LITERAL_VOCAB) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def text_folder(tmp_path: Path) -> Path:
    """IMDB style: src/{train,test}/{pos,neg}/N.txt, skewed lengths, plus broken documents."""
    return write_text_folder(tmp_path)


@pytest.fixture(scope="session")
def text_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """text_folder converted once for the test run: labelled by folder, 4 shards, a WordPiece
    vocabulary trained on it, records of 4 documents (whatever auto would choose for these
    lengths). Read-only: a test that changes a dataset makes its own."""
    return convert_text_data(tmp_path_factory, docs_per_record=4)


def convert_text_data(tmp_path_factory: pytest.TempPathFactory, docs_per_record: int) -> Path:
    root = tmp_path_factory.mktemp("text_data")
    out = root / "text"
    options = feedgpu.TextOptions(
        tokenizer="train:wordpiece:300",
        folder_labels=True,
        num_shards=4,
        docs_per_record=docs_per_record,
    )
    feedgpu.convert_text(str(write_text_folder(root)), str(out), options, quiet=True)
    return out


def write_text_folder(root: Path) -> Path:
    rng = random.Random(0)
    src = root / "imdb"
    for split, count in (("train", 30), ("test", 10)):
        for label in ("pos", "neg"):
            folder = src / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                length = rng.choice([3, 10, 20, 40, 400])  # mostly short, a few long
                (folder / f"{i:03d}.txt").write_text(make_document(rng, length), encoding="utf-8")
    (src / "train/pos/latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (src / "train/neg/empty.txt").write_text("   \n")
    (src / "train/neg/binary.txt").write_bytes(b"\x00\x01\x02 binary")
    return src


@pytest.fixture
def jsonl_corpus(tmp_path: Path) -> Path:
    """src/part-0.jsonl, part-1.jsonl.gz and notes.txt (a document per line), with bad lines."""
    rng = random.Random(1)
    src = tmp_path / "corpus"
    src.mkdir()
    lines = [
        json.dumps(
            {"text": make_document(rng, rng.randint(1, 60)), "label": rng.choice("ab")},
            ensure_ascii=False,
        )
        for _ in range(60)
    ]
    lines[5] = '{"text": "unterminated'
    lines[9] = json.dumps({"body": "no text field"})
    lines[12] = json.dumps({"text": "   ", "label": "a"})
    raw = ("\n".join(lines) + "\n").encode()
    raw = raw.replace(b"\n", b"\n" + b'{"text": "bad \xff byte", "label": "a"}\n', 1)
    (src / "part-0.jsonl").write_bytes(raw)
    with gzip.open(src / "part-1.jsonl.gz", "wb") as f:
        f.write(("\n".join(lines[20:40]) + "\n").encode())
    (src / "notes.txt").write_text("first line doc\n\nsecond line doc\n", encoding="utf-8")
    return src


@pytest.fixture(autouse=True)
def _no_amx_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    """`precision="auto"` picks mixed_bfloat16 on CPUs with AMX: the suite fixes that choice (as if
    no AMX were found) so what a test expects never depends on the host's CPU; the rule's every
    branch is tested on its own (test_bench.py: test_precision_rule_has_a_case_for_each_branch)."""
    monkeypatch.setattr("feedgpu.bench.device._cpu_has_amx_bf16", lambda: False)


def compiled_step(name: str, monkeypatch: pytest.MonkeyPatch) -> object:
    """feedgpu's compiled step `name`, turned on. CI builds it (a missing one fails there);
    elsewhere, a package installed without a C compiler runs without it, and the tests that
    need it say so."""
    from feedgpu.converters.text.native import NO_NATIVE_ENV, native_module

    monkeypatch.delenv(NO_NATIVE_ENV, raising=False)
    found = native_module(name)
    if found is None:
        assert not os.environ.get("CI"), f"the compiled step {name} was not built (setup.py)"
        pytest.skip(f"feedgpu's compiled step {name} is not built here (no C compiler)")
    return found


@pytest.fixture
def module(monkeypatch: pytest.MonkeyPatch) -> object:
    """The WordPiece step (`_wordpiece.c`)."""
    return compiled_step("_wordpiece", monkeypatch)


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> object:
    """The records step (`_records.c`)."""
    return compiled_step("_records", monkeypatch)


CORPUS_WORDS = ["a", "cat", "sat", "on", "the", "mat", "dog", "ran"]


def word_files(tmp_path: Path, seed: int, lines: int, files: int = 4) -> tuple[Path, Path]:
    """files JSONL files (src/part-N.jsonl) of lines short documents of CORPUS_WORDS, and a
    vocab.txt for them: the folder and the vocabulary."""
    rng = random.Random(seed)
    src = tmp_path / "src"
    src.mkdir()
    for f in range(files):
        texts = [" ".join(rng.choices(CORPUS_WORDS, k=rng.randint(1, 30))) for _ in range(lines)]
        (src / f"part-{f}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *CORPUS_WORDS]) + "\n")
    return src, vocab


def joined_lines(lines: list[bytes]) -> tuple[bytes, object]:
    """Lines given one by one as a conversion reads them (`raw_lines.read_blocks`): their bytes
    and each one's bounds (int64 numpy), line i being lines[i] whether or not it ends in a
    newline."""
    import itertools

    import numpy as np

    ends = np.fromiter(itertools.accumulate(map(len, lines), initial=0), np.int64)
    return b"".join(lines), ends


def serve_process(*args: str) -> tuple[object, str]:
    """A `feedgpu serve ...` child process and the first line it prints (its address), or
    killed after 300 s: a child that never starts fails a test, never hangs it."""
    import subprocess
    import sys
    import threading

    proc = subprocess.Popen(
        [sys.executable, "-m", "feedgpu", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    timer = threading.Timer(300, proc.kill)
    timer.start()
    line = proc.stdout.readline().strip()  # type: ignore[union-attr]
    timer.cancel()
    return proc, line


def sample_image_dataset(root: Path, per_class: int, size: tuple[int, int]) -> str:
    """Three classes of generated images of one size, converted into 6 shards: the dataset."""
    write_sample_images(str(root / "src"), num_classes=3, images_per_class=per_class, sizes=(size,))
    feedgpu.convert_images(
        str(root / "src"), str(root / "data"), feedgpu.ImageOptions(num_shards=6), quiet=True
    )
    return str(root / "data")
