"""Smoke tests: each benchmark runs end to end on tiny inputs, so none silently rots.

Speed targets are checked by running the benchmarks (see benchmarks/RESULTS.md), never here.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str) -> ModuleType:
    """Import a benchmark as a top-level module, so its worker processes can import it too."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


def test_bench_convert_images_smoke(tmp_path: Path, capsys) -> None:
    bench = load("bench_convert_images")
    result = bench.main(["--images", "24", "--rounds", "1", "--data", str(tmp_path / "data")])
    assert result.images == 24
    assert result.ceiling_img_s > 0 and result.classic_img_s > 0 and result.ours_img_s > 0
    assert result.worker_peak_rss_mb_full > 0
    assert "ours/(a) =" in capsys.readouterr().out.splitlines()[-1]


def test_bench_convert_text_smoke(capsys, vocab_txt: Path) -> None:
    bench = load("bench_convert_text")
    rows = bench.main(
        ["--small-mb", "0.3", "--large-mb", "3", "--ref-mb", "0.1", "--rounds", "1",
         "--tokenizer", str(vocab_txt), "--lengths", "short,markup,markup-free,pack"]
    )  # fmt: skip
    assert [r.profile for r in rows] == ["short", "markup", "markup-free", "pack"]
    for row in rows:
        assert row.tokens > 0 and row.documents > 0 and row.large_s > 0 and row.small_s > 0
        assert row.plain_tok_s > 0 and row.threads_tok_s > 0
        # the ratios are of the marginal rate: tokens between the corpora over seconds between
        assert row.large_s > row.small_s and row.ours_tok_s > 0
        assert abs(row.ours_vs_plain - row.ours_tok_s / row.plain_tok_s) < 0.01
    out = capsys.readouterr().out
    assert "markup / markup-free" in out and "floors:" in out


def test_bench_pipeline_smoke(tmp_path: Path, capsys) -> None:
    bench = load("bench_pipeline")
    result = bench.main(
        [
            "--images",
            "24",
            "--text-mb",
            "0.2",
            "--rounds",
            "1",
            "--batch",
            "8",
            "--data",
            str(tmp_path),
        ]
    )
    assert result.ours_img_s > 0 and result.tfds_img_s > 0 and result.naive_img_s > 0
    assert [t.profile for t in result.text] == ["medium", "short"]
    for t in result.text:
        assert t.ours_tok_s > 0 and t.floor_tok_s > 0 and t.fast_wordpiece_tok_s > 0
        assert t.ours_disk_tok_s > 0 and t.copy_tok_s > 0
        assert 0 <= t.waste_bucketed <= t.waste_fixed
    short, medium = result.text[1], result.text[0]
    assert short.tokens / short.documents < medium.tokens / medium.documents
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("images: ours/(a) =") and "short ours/(b) =" in last


def test_bench_memory_smoke(tmp_path: Path, capsys, vocab_txt: Path) -> None:
    bench = load("bench_memory")
    # A vocabulary already in --data is reused (a re-run's path): no tokenizer to train here
    (tmp_path / "vocab.txt").write_bytes(vocab_txt.read_bytes())
    rows = bench.main(
        ["--images", "8", "--mb", "0.1", "--vocab-size", "300", "--data", str(tmp_path)]
    )
    assert [(r.command, r.size) for r in rows] == [
        ("images", "1x"), ("text", "1x"), ("images", "4x"), ("text", "4x")
    ]  # fmt: skip
    # The text converter's process holds TensorFlow (hundreds of MB); the sampler saw it.
    assert all(r.largest_process_mb > 100 for r in rows if r.command == "text")
    assert all(r.tree_peak_mb >= r.largest_process_mb for r in rows)
    assert all(0 < r.tree_anon_peak_mb < r.tree_peak_mb for r in rows if r.command == "text")
    assert "text: 4x/1x =" in capsys.readouterr().out.splitlines()[-1]


@pytest.mark.parametrize("target", ["keras"])  # the built-in model's path is bench-input's own
def test_bench_verdict_smoke(capsys, target: str) -> None:
    bench = load("bench_verdict")
    result = bench.main(
        ["--images", "64", "--image-size", "32", "--seconds", "0.5", "--shares", "0,50",
         "--target", target, "--no-xla"]
    )  # fmt: skip
    assert len(result.rows) == 2 and result.rows[1].delay_ms > 0
    assert all(0 <= row.measured_share <= 1 for row in result.rows)
    assert "verdicts right" in capsys.readouterr().out.splitlines()[-1]


def test_bench_monitor_smoke(capsys) -> None:
    bench = load("bench_monitor")
    result = bench.main(
        ["--images", "64", "--image-size", "32", "--batch-size", "8", "--shares", "0,60",
         "--steps", "24", "--window", "5", "--pairs", "0", "--no-xla"]
    )  # fmt: skip
    assert len(result.rows) == 2 and result.rows[1].delay_ms > 0
    assert all(0 <= row.measured_share <= 1 for row in result.rows)
    assert "overhead outside the window" in capsys.readouterr().out.splitlines()[-1]


def test_bench_service_smoke(capsys) -> None:
    bench = load("bench_service")
    result = bench.main(
        ["--images", "32", "--image-size", "32", "--batch-size", "8", "--seconds", "0.5",
         "--rounds", "1"]
    )  # fmt: skip
    assert result.local_img_s > 0 and result.service_1_img_s > 0 and result.service_2_img_s > 0
    assert "(b)/(a) =" in capsys.readouterr().out.splitlines()[-1]


def test_bench_resume_smoke(tmp_path: Path, capsys) -> None:
    bench = load("bench_resume")
    rows = bench.main(
        ["--images", "48", "--batch", "8", "--rounds", "1", "--fractions", "0.5",
         "--data", str(tmp_path / "data")]
    )  # fmt: skip
    (row,) = rows
    assert row.batches == 3 and 0 < row.state_bytes < 64 * 1024
    assert row.iterator_bytes > row.state_bytes and row.restart_s >= 0
    assert "resume cost at 50%" in capsys.readouterr().out.splitlines()[-1]


def test_bench_fidelity_smoke(tmp_path: Path, capsys) -> None:
    bench = load("bench_fidelity")
    rows = bench.main(
        ["--models", "tiny", "--compiles", "false", "--size", "16", "--batch", "8", "--steps",
         "5", "--seconds", "0.3", "--rounds", "1", "--data", str(tmp_path)]
    )  # fmt: skip
    (row,) = rows
    assert row.keras_examples_per_s > 0 and row.bench_examples_per_s > 0
    assert not row.xla_ran and row.bench_xla_reason == "the model's jit_compile=False"
    assert "rows within 0.85-1.15:" in capsys.readouterr().out.splitlines()[-1]


def test_bench_vocab_smoke(capsys) -> None:
    bench = load("bench_vocab")
    result = bench.main(
        ["--docs", "300", "--vocab-size", "600", "--rounds", "1", "--long-docs", "1"]
    )
    assert result.hf_s > 0 and result.ours_s > 0 and result.convert_tokenizer_s > 0
    assert result.ours_distinct == 1 and result.convert_identical
    assert 0 < result.ours_size <= 600
    assert "distinct vocabularies over 1 rounds" in capsys.readouterr().out.splitlines()[-1]


def test_ab_text_layout_smoke(tmp_path: Path, text_folder: Path) -> None:
    import feedgpu

    out = tmp_path / "data"
    options = feedgpu.TextOptions(tokenizer="train:wordpiece:300", docs_per_record=4)
    feedgpu.convert_text(str(text_folder), str(out), options, quiet=True)
    line = load("ab_text_layout").main(str(out), batch=8)
    rates = dict(zip(line.split()[::2], map(float, line.split()[1::2]), strict=True))
    # rates printed to two decimals: a loaded host can round a tiny epoch's to 0.00
    assert set(rates) == {"cold", "cached", "uncached"} and min(rates.values()) >= 0
