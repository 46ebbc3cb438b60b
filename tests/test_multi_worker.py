"""Two real worker processes on localhost under MultiWorkerMirroredStrategy (TF_CONFIG, CPU
collectives): a user's custom training loop fed by feedgpu, and bench-input, each finishing
with equal steps and each example of the epoch trained once across the two."""

from __future__ import annotations

import collections
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

import feedgpu

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from two_workers import RESUME_AT, STEP  # noqa: E402

TIMEOUT_S = 300  # each worker: TensorFlow's import and the collectives' start-up, on a busy host
pytestmark = pytest.mark.xdist_group("two_workers")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_two_workers(command: Callable[[int], list[str]], cwd: Path) -> list[str]:
    """command(index) run as worker 0 and worker 1 of one cluster, both to the end (or
    killed at the timeout); their standard outputs."""
    hosts = [f"localhost:{p}" for p in free_ports(2)]
    workers, logs = [], [cwd / f"worker{index}.log" for index in range(2)]
    for index, log in enumerate(logs):  # to files: a full pipe would stall one worker, both
        config = {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(config), "CUDA_VISIBLE_DEVICES": ""}
        with open(log, "w") as out:
            workers.append(
                subprocess.Popen(command(index), cwd=cwd, env=env, stdout=out, stderr=out)
            )
    try:
        for w, log in zip(workers, logs, strict=True):
            w.wait(timeout=TIMEOUT_S)
            assert w.returncode == 0, log.read_text()[-3000:]
    finally:
        for w in workers:
            w.kill()
    return [log.read_text() for log in logs]


@pytest.fixture(scope="module")
def flat_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """95 flat-coloured images (their colour names the example) in 3 classes, converted into 5
    shards: 5 files cannot be shared out evenly between 2 hosts, nor 95 examples."""
    root = tmp_path_factory.mktemp("flat")
    for i in range(95):
        colour = tuple(STEP * level for level in (i // 64, i // 8 % 8, i % 8))
        folder = root / "src" / f"class{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (12, 10), colour).save(folder / f"{i:03d}.png")
    out = root / "data"
    feedgpu.convert_images(
        str(root / "src"),
        str(out),
        feedgpu.ImageOptions(num_shards=5, split="train=1"),
        quiet=True,
    )
    return out


def test_two_workers_train_every_example_once_with_equal_steps(
    flat_images: Path, tmp_path: Path
) -> None:
    logs = [tmp_path / f"worker{i}.json" for i in range(2)]
    script = str(ROOT / "tests" / "two_workers.py")
    run_two_workers(
        lambda i: [sys.executable, script, str(flat_images), "16", str(logs[i])], tmp_path
    )
    runs = [json.loads(log.read_text()) for log in logs]
    # 95 examples, a global batch of 16: 8 a replica; hosts of 47 and 48 examples, 5 steps each
    # (the larger share cut to the smaller's steps), never an empty batch
    assert [len(r["steps"]) for r in runs] == [5, 5]
    assert {rows for r in runs for rows in r["per_replica"]} == {8}
    trained = collections.Counter(i for r in runs for step in r["steps"] for i in step)
    assert len(trained) == 80 and set(trained.values()) == {1} and set(trained) <= set(range(95))
    for r in runs:  # resumed at a batch: the same batches the run trained from there
        assert r["resumed"] == r["steps"][RESUME_AT:]


def test_bench_input_runs_on_two_workers_in_step(tmp_path: Path) -> None:
    from feedgpu.samples import write_sample_images

    write_sample_images(str(tmp_path / "photos"), num_classes=2, images_per_class=20)
    feedgpu.convert_images(
        str(tmp_path / "photos"),
        str(tmp_path / "data"),
        feedgpu.ImageOptions(num_shards=5),
        quiet=True,
    )
    reports = [tmp_path / f"report{i}.json" for i in range(2)]
    run_two_workers(
        lambda i: [
            sys.executable,
            "-m",
            "feedgpu",
            "bench-input",
            str(tmp_path / "data"),
            "--strategy",
            "multi_worker",
            "--seconds",
            "1",
            "--image-size",
            "32",
            "--batch-size",
            "16",
            "--ablation",
            "never",
            "--quiet",
            "--json",
            str(reports[i]),
        ],
        tmp_path,
    )
    runs = [json.loads(r.read_text()) for r in reports]
    for run in runs:
        assert run["device"]["num_replicas"] == 2 and run["batch_size"] == 16
    # every timed loop stopped at the same step on both workers, and trained the same model
    for phase in ("ceiling", "end_to_end"):
        steps = [run[phase]["num_steps"] + run[phase]["warmup_steps"] for run in runs]
        assert steps[0] == steps[1] > 0
    assert runs[0]["end_to_end"]["loss_last"] == runs[1]["end_to_end"]["loss_last"]
