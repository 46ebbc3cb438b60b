"""What a new user hit, each on generated data of the shape found: an
unwritable OUT, a conversion that keeps almost nothing, a label CSV inside its folder, one
corpus file as SRC, a vocabulary larger than the corpus holds, a script without the main guard,
and errors that name their field."""

from __future__ import annotations

import errno
import gzip
import json
import os
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import make_document

import feedgpu
from feedgpu import PipelineSpec, TextOptions, UsageError
from feedgpu.cli import main
from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer
from feedgpu.samples import write_sample_images

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    src = tmp_path / "photos"
    write_sample_images(str(src), num_classes=2, images_per_class=3, sizes=((24, 16),))
    return src


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("feedgpu: error: ") and err.count("\n") == 1, err
    return err


def test_an_output_that_cannot_be_written_is_one_line(
    tmp_path: Path, photos: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "mb.json"
    a_file.write_text("{}")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for out, said in (
        (a_file, f"output {a_file} is a file, not a folder; give a new or empty folder"),
        (a_file / "sub", f"output {a_file / 'sub'}: {a_file} is a file, not a folder; give"),
        (tmp_path / "dangling", f"{tmp_path / 'dangling'} is a broken symlink, not a folder"),
        (Path("/proc/feedgpu-out"), "output /proc/feedgpu-out"),  # the kernel refuses it
    ):
        for command in ("images", "text"):
            extra = ["--tokenizer", "train:wordpiece:100"] if command == "text" else []
            assert main(["convert", command, str(photos), str(out), *extra]) == 2
            err = _one_line_error(capsys)
            assert said in err and "give" in err, err
    assert a_file.read_text() == "{}"  # nothing written over it


def test_a_read_only_output_names_the_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read-only mount cannot be made without privileges: the error the kernel gives there
    # (EROFS) is raised where the folder is made, and what the user reads is checked.
    def read_only(path: str, exist_ok: bool = False) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)

    monkeypatch.setattr(os, "makedirs", read_only)
    with pytest.raises(UsageError, match="is on a read-only file system; give a folder on a"):
        feedgpu.convert_images(str(tmp_path), str(tmp_path / "out"), quiet=True)


def _records(folder: Path, count: int, with_field_every: int) -> None:
    rng = random.Random(0)
    folder.mkdir(parents=True)
    with open(folder / "dict.jsonl", "w", encoding="utf-8") as f:
        for i in range(count):
            row = {"text": make_document(rng, 8), "label": "en"}
            if i % with_field_every == 0:
                row["body"] = row["text"]
            f.write(json.dumps(row) + "\n")


def test_a_conversion_that_keeps_almost_nothing_fails_until_accepted(
    tmp_path: Path, photos: Path, vocab_txt: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "corpus", tmp_path / "t"
    _records(src, 400, with_field_every=400)  # one record of 400 has the field asked for
    base = ["convert", "text", str(src), str(out), "--tokenizer", str(vocab_txt), "--quiet"]
    assert main([*base, "--text-field", "body"]) == 1
    err = _one_line_error(capsys)
    assert "kept 1 of 400 inputs: 399 skipped as 'no text field'" in err
    assert "--text-field" in err and "--allow-skips" in err
    assert not (out / "manifest.json").exists()  # no dataset to train on by mistake
    assert (out / "skipped.jsonl").exists()  # the reasons, to look at
    shards = {p: p.stat().st_mtime_ns for p in out.glob("*.tfrecord-*")}
    assert shards
    assert main([*base, "--text-field", "body", "--allow-skips", "--json"]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.glob("*.tfrecord-*")} == shards  # kept, not redone
    done = json.loads(capsys.readouterr().out)
    assert done["num_examples"] == 1 and done["skipped_by_reason"] == {"no text field": 399}
    # An image folder given to convert text: one README is text, the rest are not.
    (photos / "cat" / "README.txt").write_text("photos of a class")
    assert main(["convert", "text", str(photos), str(tmp_path / "t2"), "--folder-labels",
                 "--tokenizer", str(vocab_txt), "--quiet"]) == 1  # fmt: skip
    assert "skipped as 'not a text file'" in _one_line_error(capsys)
    # One sidecar file per image (1:1) is a dataset, not a mistake.
    (photos / "cat" / "README.txt").unlink()
    for image in photos.rglob("*.jpg"):
        image.with_suffix(".xml").write_text("<annotation/>")
    report = feedgpu.convert_images(str(photos), str(tmp_path / "i"), quiet=True)
    assert report.num_examples == 6 and report.skipped_by_reason == {"not an image": 6}
    # An asset folder: sounds, vector art and scripts outnumber the images 12 to 1.
    for image in photos.rglob("*.jpg"):
        for i, ext in enumerate((".wav", ".svg", ".json", ".ogg") * 3):
            (image.parent / f"{image.stem}_{i}{ext}").write_text("sidecar")
    report = feedgpu.convert_images(str(photos), str(tmp_path / "assets"), quiet=True)
    assert report.num_examples == 6 and report.skipped_by_reason == {"not an image": 78}
    # ...and the same folder without its images still fails, in one line.
    for image in photos.rglob("*.jpg"):
        image.unlink()
    assert main(["convert", "images", str(photos), str(tmp_path / "none"), "--quiet"]) == 2
    assert "no labelled images found" in _one_line_error(capsys)
    assert not (tmp_path / "none").exists()  # a run that fails before writing leaves no OUT
    missing = ["convert", "images", str(tmp_path / "nowhere"), str(tmp_path / "a/b"), "--quiet"]
    assert main(missing) == 2 and "nowhere" in _one_line_error(capsys)
    assert not (tmp_path / "a").exists()


def test_a_label_csv_inside_the_folder_counts_each_file_once(tmp_path: Path, photos: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    rows = ["filename,species,notes"]
    for i, image in enumerate(sorted(photos.rglob("*.jpg"))):
        (flat / f"img_{i}.jpg").write_bytes(image.read_bytes())
        rows.append(f"img_{i}.jpg,{image.parent.name},shot number {i}")
    (flat / "wallpaper_README.txt").write_text("not an image")
    rows += ["wallpaper_README.txt,class_0,a file that is no image", "gone.jpg,class_1,deleted"]
    labels = flat / "labels.csv"
    labels.write_text("\n".join(rows) + "\n")
    # Without --label-column: `species` repeats as classes do, `notes` is free text.
    report = feedgpu.convert_images(str(flat), str(tmp_path / "out"), labels_file=str(labels),
                                    quiet=True)  # fmt: skip
    assert report.num_examples == 6
    assert report.skipped_by_reason == {"missing file": 1, "not an image": 1}
    skipped = [json.loads(line) for line in (tmp_path / "out/skipped.jsonl").open()]
    assert sorted(s["path"] for s in skipped) == ["gone.jpg", "wallpaper_README.txt"]
    # Two columns that could both be classes: which were seen, and the flag that picks one.
    both = ["filename,species,site,notes"]
    both += [f"img_{i}.jpg,{'ab'[i % 2]},{'xy'[i // 3]},shot {i}" for i in range(6)]
    labels.write_text("\n".join(both) + "\n")
    with pytest.raises(
        UsageError, match=r"species \(2 distinct\), site \(2 distinct\), notes \(6 distinct\)"
    ) as refused:
        feedgpu.convert_images(str(flat), str(tmp_path / "o2"), labels_file=str(labels),
                               quiet=True)  # fmt: skip
    assert str(refused.value).endswith("name it with --label-column species")
    # A column name with spaces is suggested quoted, so that it can be pasted into a shell.
    labels.write_text("\n".join(both).replace("species", " Kind ") + "\n")
    with pytest.raises(UsageError) as refused:
        feedgpu.convert_images(str(flat), str(tmp_path / "o3"), labels_file=str(labels),
                               quiet=True)  # fmt: skip
    assert str(refused.value).endswith("name it with --label-column ' Kind '")


def test_a_label_of_zero_is_a_label(tmp_path: Path, photos: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    rows = []
    for i, image in enumerate(sorted(photos.rglob("*.jpg"))):
        (flat / f"img_{i}.jpg").write_bytes(image.read_bytes())
        rows.append(json.dumps({"file": f"img_{i}.jpg", "y": i % 3}))
    labels = flat / "labels.jsonl"
    labels.write_text("\n".join(rows) + "\n")
    report = feedgpu.convert_images(str(flat), str(tmp_path / "out"), labels_file=str(labels),
                                    quiet=True)  # fmt: skip
    assert report.num_examples == 6
    assert feedgpu.read_manifest(str(tmp_path / "out")).label_names == ("0", "1", "2")


def test_one_corpus_file_is_a_source(tmp_path: Path, vocab_txt: Path) -> None:
    rng = random.Random(3)
    corpus = tmp_path / "corpus.jsonl.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": make_document(rng, 12)}) + "\n" for _ in range(50))
    options = TextOptions(tokenizer=str(vocab_txt))
    report = feedgpu.convert_text(str(corpus), str(tmp_path / "out"), options, quiet=True)
    assert report.num_examples == 50 and report.num_skipped == 0
    assert feedgpu.read_manifest(str(tmp_path / "out")).name == "corpus"
    picture = tmp_path / "cat.png"
    picture.write_bytes(b"\x89PNG")
    with pytest.raises(UsageError, match=r"cat.png is not a .txt or .jsonl file"):
        feedgpu.convert_text(str(picture), str(tmp_path / "o2"), options, quiet=True)


def test_a_trained_vocabulary_is_the_same_every_run_and_says_when_smaller(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Many pieces equally frequent: HF's trainer alone gave a new vocabulary on every run here.
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sch", "ein", "ung", "ов", "ра", "ни", "те"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(400)]
    texts = [" ".join(rng.choice(words) for _ in range(20)) for _ in range(600)]
    spec = TokenizerSpec.parse("train:wordpiece:16000")
    vocabularies = {frozenset(load_tokenizer(spec, texts).hf.get_vocab().items()) for _ in range(4)}
    assert len(vocabularies) == 1
    vocab = dict(next(iter(vocabularies)))
    assert [vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    assert "##ов" in vocab and len(vocab) < 16000
    # A size the corpus can fill comes out exactly (tensorflow-text's learner fell short).
    half = TokenizerSpec.parse(f"train:wordpiece:{len(vocab) // 2}")
    assert load_tokenizer(half, texts).vocab_size == len(vocab) // 2
    # Through the converter: the summary and the manifest say it is smaller than asked, and
    # the fast in-graph WordPiece path serves it.
    src = tmp_path / "corpus"
    src.mkdir()
    (src / "a.txt").write_text("\n".join(texts), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["convert", "text", str(src), str(out), "--doc-per-line", "--tokenizer",
                 "train:wordpiece:16000", "--quiet"]) == 0  # fmt: skip
    said = capsys.readouterr().out
    tokenizer = feedgpu.read_manifest(str(out)).tokenizer
    assert tokenizer is not None and tokenizer.vocab_size_asked == 16000
    assert tokenizer.vocab_size == len(vocab)
    assert f"tokenizer: learned {len(vocab):,} of the 16,000 entries asked" in said
    assert tokenizer.parity["road"] == "compiled" and tokenizer.parity["mismatched_documents"] == 0


UNGUARDED = """
import sys
import tensorflow  # threads: workers are spawned, and a spawned worker runs this file again
import feedgpu
feedgpu.convert_images(sys.argv[1], sys.argv[2], workers=2, quiet=True)
print("converted")
"""


@pytest.mark.parametrize("guarded", [False, True])
def test_a_script_without_the_main_guard_fails_in_one_line(
    tmp_path: Path, photos: Path, guarded: bool
) -> None:
    body = UNGUARDED
    if guarded:
        head, call = body.rsplit("feedgpu.convert_images", 1)
        body = (
            head
            + 'if __name__ == "__main__":\n'
            + textwrap.indent("feedgpu.convert_images" + call, "    ")
        )
    script = tmp_path / "convert_photos.py"
    script.write_text(body)
    done = subprocess.run(
        [sys.executable, str(script), str(photos), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    if guarded:
        assert done.returncode == 0 and done.stdout.strip() == "converted", done.stderr[-2000:]
    else:
        assert done.returncode == 1
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("feedgpu.errors.UsageError: ") and "line 5" in last
        assert 'if __name__ == "__main__":' in last


def test_a_script_without_tensorflow_needs_no_main_guard(tmp_path: Path, photos: Path) -> None:
    # No thread running when the pool starts: its workers are forked, and a script without
    # the guard converts (a thread started before the pool, even a short one, broke this).
    script = tmp_path / "convert_photos.py"
    script.write_text(UNGUARDED.replace("import tensorflow", "import os"))
    done = subprocess.run(
        [sys.executable, str(script), str(photos), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "converted", done.stderr[-2000:]


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"image_size": (0, 32)}, "image_size (0, 32): both sides must be at least 1"),
        ({"max_length": 0}, "max_length 0: must be at least 1"),
        ({"shuffle_buffer": -1}, "shuffle_buffer -1: must be at least 0"),
        ({"cycle_length": 0}, "cycle_length 0: must be at least 1"),
    ],
)
def test_a_spec_error_names_its_field_and_value(changes: dict, said: str) -> None:
    with pytest.raises(UsageError, match=f"^{re.escape(said)}"):
        PipelineSpec(data_dir="d", **changes)


@pytest.mark.parametrize(
    ("source", "guard"),
    [
        ('if __name__ == "__main__":\n    x()', True),
        ("if '__main__' == __name__:\n    x()", True),
        ('if __name__ == "__main__" and ready:\n    x()', True),
        ('if __name__ != "__main__":\n    x()', False),
        ("if debug:\n    x()", False),
    ],
)
def test_the_main_guard_is_read_from_the_source(source: str, guard: bool) -> None:
    import ast

    from feedgpu.convert.spawn_guard import _is_guard

    node = ast.parse(source).body[0]
    assert isinstance(node, ast.If) and _is_guard(node) is guard
