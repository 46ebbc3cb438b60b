"""What a new user hits first: one-line answers, output that says what is stored, quiet starts."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import feedgpu
from feedgpu.cli import main


def test_class_folders_without_folder_labels_are_pointed_out(
    tmp_path: Path, text_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "film"]) + "\n")
    out = tmp_path / "out"
    assert main(["convert", "text", str(text_folder), str(out), "--tokenizer", str(vocab)]) == 0
    err = capsys.readouterr().err
    assert err.count("looks like class folders (neg, pos)") == 1
    assert "add --folder-labels" in err
    assert feedgpu.read_manifest(str(out)).label_names == ()


def test_a_text_conversion_that_keeps_nothing_is_refused(
    tmp_path: Path, jsonl_corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"]) + "\n")
    (jsonl_corpus / "notes.txt").unlink()  # only JSON lines, none with a "title"
    args = ["convert", "text", str(jsonl_corpus), str(tmp_path / "out"), "--tokenizer",
            str(vocab), "--text-field", "title"]  # fmt: skip
    code = main(args)
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("feedgpu: error: kept 0 of 81 inputs: 79 skipped as 'no text field'")
    assert "--text-field" in err and err.count("\n") == 1
    assert not (tmp_path / "out" / "feedgpu.json").exists()
    assert (tmp_path / "out" / "skipped.jsonl").read_text().count("no text field") == 79


def test_max_length_statistics_describe_what_is_stored(tmp_path: Path) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "w"]) + "\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "long.txt").write_text("w " * 600)  # 602 ids with [CLS] and [SEP]
    (tmp_path / "src" / "short.txt").write_text("w w")  # 4 ids
    for name, extra in (("cut", ["--max-length", "16"]), ("windows", ["--max-length", "16",
                        "--stride", "4"]), ("packed", ["--pack", "64"])):  # fmt: skip
        out = tmp_path / name
        args = ["convert", "text", str(tmp_path / "src"), str(out), "--tokenizer", str(vocab)]
        assert main([*args, "--quiet", *extra]) == 0
        text = feedgpu.read_manifest(str(out)).text
        assert text is not None and text.documents == 2
        longest = max(length for length, _ in text.length_counts)
        stored = {"cut": 16, "windows": 16, "packed": 64}[name]
        assert longest <= stored, (name, text.length_counts)
        assert text.tokens == sum(n * c for n, c in text.length_counts)
    cut = feedgpu.read_manifest(str(tmp_path / "cut")).text
    assert cut is not None and cut.length_counts == ((4, 1), (16, 1))
    spec = feedgpu.PipelineSpec.for_dataset(str(tmp_path / "cut"))
    assert spec.max_length == 16  # not 512: padding to what is stored


def test_a_spec_file_without_data_measures_the_spec_s_own_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(feedgpu.PipelineSpec(str(tmp_path / "gone")).to_json())
    assert main(["bench-input", "--spec", str(spec), "--quiet"]) == 1
    err = capsys.readouterr().err
    gone = tmp_path / "gone"
    expected = f"{gone} is not a feedgpu dataset (no feedgpu.json); convert it first"
    assert err == f"feedgpu: error: {expected}\n"  # the spec's dataset, not a generated one


def test_an_option_typo_gets_the_command_s_help_and_the_closest_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["convert", "images", "a", "b", "--qualty", "3"]) == 2
    assert capsys.readouterr().err == (
        "feedgpu: error: unrecognized arguments: --qualty 3; did you mean --quality? "
        "(see: feedgpu convert images --help)\n"
    )


def test_a_no_op_rerun_reports_no_rate_and_counts_read_well(
    tmp_path: Path, image_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["convert", "images", str(image_folder), str(tmp_path / "out"), "--num-shards", "1"]
    assert main([*args, "--quiet"]) == 0
    assert "in 1 shard, " in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["already_done"] is True and report["inputs_per_s"] is None
    assert main(["verify", str(tmp_path / "out"), "--quiet"]) == 0
    assert capsys.readouterr().out.endswith("36 records in 1 shard: ok\n")


def test_progress_on_a_pipe_is_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    from feedgpu.progress import progress_bar

    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    with progress_bar(3, unit="img", mininterval=0) as bar:
        for _ in range(3):
            bar.update(1)
    lines = piped.getvalue().splitlines()
    assert "\r" not in piped.getvalue() and len(lines) >= 2
    assert lines[-1].startswith("100%") and "3/3" in lines[-1]


def test_tensorflow_start_up_chatter_is_hidden_unless_verbose(tmp_path: Path) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"]) + "\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a a a")
    base = [sys.executable, "-m", "feedgpu", "convert", "text", str(tmp_path / "src")]

    def run(out: str, *extra: str) -> str:
        done = subprocess.run(
            [*base, str(tmp_path / out), "--tokenizer", str(vocab), "--quiet", *extra],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stderr

    quiet = run("a")
    assert "oneDNN" not in quiet and "cuInit" not in quiet and "cuda" not in quiet, quiet
    assert quiet.strip() == "", quiet
    verbose = run("b", "--verbose")
    assert "oneDNN" in verbose or "cuda" in verbose.lower() or "tensorflow" in verbose.lower()


def test_casing_is_a_choice_said_in_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trained WordPiece vocabulary keeps case and accents unless --lowercase; a vocab.txt
    is uncased unless a token has a capital; the summary says which."""
    from tokenizers import Tokenizer

    src = tmp_path / "src"
    src.mkdir()
    lines = ["Příliš žluťoučký kůň", "Мой ёжик", "Hello World"] * 40
    (src / "a.txt").write_text("\n".join(lines) + "\n")
    found = {}
    for name, extra in (("cased", []), ("folded", ["--lowercase"])):
        out = tmp_path / name
        args = ["convert", "text", str(src), str(out), "--doc-per-line", *extra]
        assert main([*args, "--tokenizer", "train:wordpiece:200", "--quiet"]) == 0
        found[name] = capsys.readouterr().out
        saved = Tokenizer.from_file(str(out / "tokenizer.json"))
        tokens = saved.encode("Příliš Мой", add_special_tokens=False).tokens
        assert feedgpu.read_manifest(str(out)).tokenizer.lowercase is (name == "folded")
        assert ("Příliš" in "".join(tokens).replace("##", "")) is (name == "cased"), tokens
    assert "tokenizer: cased: case and accents kept (--lowercase folds them)" in found["cased"]
    assert "tokenizer: uncased: case and accents folded (--no-lowercase" in found["folded"]
    for vocab, lowercase in ((["Hello", "World"], False), (["hello", "world"], True)):
        path = tmp_path / "vocab.txt"
        path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *vocab]) + "\n")
        out = tmp_path / f"v-{lowercase}"
        assert main(["convert", "text", str(src), str(out), "--tokenizer", str(path)]) == 0
        assert feedgpu.read_manifest(str(out)).tokenizer.lowercase is lowercase
