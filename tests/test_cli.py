"""The CLI: exit codes, the exact one-line errors, JSON output, `verify`, and a TF-free --help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from feedgpu.cli import main
from feedgpu.format.records import decode_example, encode_example, frame_record, read_records


def fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    """Run code in a new interpreter (imports start from nothing); it must succeed."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result


def test_help_does_not_import_tensorflow() -> None:
    code = (
        "import sys\n"
        "from feedgpu.cli import main\n"
        "for argv in (['--help'], ['convert', '--help'], ['convert', 'images', '--help'],\n"
        "             ['convert', 'text', '--help'], ['verify', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
        "assert 'PIL' not in sys.modules, 'Pillow was imported'\n"
    )
    result = fresh_python(code)
    assert "--shard-size-mb" in result.stdout and "--tokenizer SPEC" in result.stdout


def test_package_names_load_on_first_use_and_match_all() -> None:
    """`import feedgpu` loads no submodule it does not need; every public name still resolves,
    and the lazy table, `__all__` and the names agree."""
    code = (
        "import sys, feedgpu\n"
        "assert 'feedgpu.pipeline' not in sys.modules and 'feedgpu.bench' not in sys.modules\n"
        "names = sorted(n for n in feedgpu.__all__ if n != '__version__')\n"
        "assert names == sorted(feedgpu._EXPORTS), set(names) ^ set(feedgpu._EXPORTS)\n"
        "for name in names:\n"
        "    assert getattr(feedgpu, name).__module__.startswith('feedgpu'), name\n"
        "print(len(names))\n"
    )
    assert int(fresh_python(code).stdout) >= 25


def test_missing_source_is_one_line_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["convert", "images", str(tmp_path / "nope"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    nope = tmp_path / "nope"
    assert err == f"feedgpu: error: {nope} does not exist; give the folder that holds your data\n"


def test_bad_flag_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", "images", "--quality"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("feedgpu: error: ") and err.count("\n") == 1


def test_bad_option_value(
    tmp_path: Path, image_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["convert", "images", str(image_folder), str(tmp_path / "o"), "--quality", "0"]) == 2
    )
    assert capsys.readouterr().err == "feedgpu: error: --quality 0: must be between 1 and 100\n"


def test_convert_json_summary_then_verify(
    tmp_path: Path, nasty_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["convert", "images", str(nasty_folder), str(out), "--json", "--workers", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["num_examples"] == 14 and summary["skipped_by_reason"]["truncated"] == 1
    assert summary["num_inputs"] == summary["num_examples"] + summary["num_skipped"]
    assert main(["verify", str(out), "--decode", "--quiet"]) == 0
    assert "14 records" in capsys.readouterr().out
    assert main(["convert", "images", str(nasty_folder), str(out)]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_strict_exit_code_and_line(
    tmp_path: Path, nasty_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["convert", "images", str(nasty_folder), str(tmp_path / "o"), "--strict", "--quiet"])
        == 1
    )
    err = capsys.readouterr().err
    assert err.startswith("feedgpu: error: cannot use bad/broken_link.jpg: broken symlink")
    assert err.endswith("(stopped by --strict)\n") and err.count("\n") == 1


def test_verify_catches_a_flipped_byte(
    tmp_path: Path, image_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert (
        main(["convert", "images", str(image_folder), str(out), "--num-shards", "2", "--quiet"])
        == 0
    )
    shard = sorted(out.glob("*.tfrecord-*"))[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x40
    shard.write_bytes(bytes(data))
    assert main(["verify", str(out), "--quiet"]) == 1
    report = capsys.readouterr().out
    assert f"{shard.name}: record " in report and "CRC mismatch" in report
    assert "1 problem(s)" in report


def test_verify_decode_catches_a_bad_image_inside_a_valid_record(
    tmp_path: Path, image_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert (
        main(["convert", "images", str(image_folder), str(out), "--num-shards", "1", "--quiet"])
        == 0
    )
    shard = next(out.glob("*.tfrecord-*"))
    with open(shard, "rb") as f:
        records = list(read_records(f))
    ex = decode_example(records[3])
    ex["image"] = [ex["image"][0][:200]]  # type: ignore[index]
    records[3] = encode_example({k: v[0] for k, v in ex.items()})  # type: ignore[misc]
    shard.write_bytes(b"".join(frame_record(r) for r in records))
    assert main(["verify", str(out), "--quiet"]) == 0  # framing is intact
    capsys.readouterr()
    assert main(["verify", str(out), "--decode", "--quiet"]) == 1
    assert f"{shard.name}: record 3: image does not decode" in capsys.readouterr().out


def test_verify_without_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    expected = f"{tmp_path} is not a feedgpu dataset (no feedgpu.json); convert it first"
    assert err == f"feedgpu: error: {expected}\n"


def test_python_dash_m_and_sample_images(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "feedgpu",
            "sample-images",
            str(tmp_path / "s"),
            "--classes",
            "2",
            "--per-class",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "s").rglob("*.jpg"))) == 6


def test_the_command_delivers_its_output_and_exit_code_without_the_teardown(
    tmp_path: Path,
) -> None:
    """`python -m feedgpu` (and the console script) exit with os._exit after flushing: the
    JSON summary must arrive whole and the codes must be main's."""
    src = tmp_path / "s"
    command = [sys.executable, "-m", "feedgpu"]
    made = subprocess.run(
        [*command, "sample-images", str(src), "--classes", "2", "--per-class", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    done = subprocess.run(
        [*command, "convert", "images", str(src), str(tmp_path / "out"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["num_examples"] == 6
    refused = subprocess.run(
        [*command, "convert", "images", str(tmp_path / "missing"), str(tmp_path / "o2")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert refused.stderr.startswith("feedgpu: error: ") and refused.stderr.count("\n") == 1
