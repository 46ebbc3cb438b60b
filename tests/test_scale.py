"""Beyond one machine: Beam conversion, tf.data service feeding, serve commands."""

from __future__ import annotations

import collections
import filecmp
import hashlib
import json
import os
import posixpath
import signal
import sys
from pathlib import Path

import pytest
from conftest import sample_image_dataset, serve_process

import feedgpu
from feedgpu.cli import main
from feedgpu.pipeline.service import start_dispatcher, start_worker


def same_files(a: Path, b: Path) -> None:
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b))
    different = [n for n in names if not filecmp.cmp(a / n, b / n, shallow=False)]
    assert not different, f"differ: {different}"


def test_beam_image_conversion_is_byte_identical(tmp_path: Path, nasty_folder: Path) -> None:
    options = feedgpu.ImageOptions(num_shards=3)
    feedgpu.convert_images(str(nasty_folder), str(tmp_path / "local"), options, quiet=True)
    feedgpu.convert_images(
        str(nasty_folder), str(tmp_path / "beam"), options, quiet=True, runner="beam"
    )
    same_files(tmp_path / "local", tmp_path / "beam")  # shards, manifest, skipped.jsonl


def test_beam_multi_processing_mode_writes_the_local_bytes_quietly(
    tmp_path: Path, image_folder: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Beam's multi-process DirectRunner pickles the work as Dataflow does; quiet stays quiet."""
    args = ["--num-shards", "3", "--quiet", "--index"]  # indexes from Beam workers too
    assert main(["convert", "images", str(image_folder), str(tmp_path / "local"), *args]) == 0
    beam = "--direct_running_mode=multi_processing --direct_num_workers=2"
    code = main(
        ["convert", "images", str(image_folder), str(tmp_path / "beam"), *args,
         "--runner", "beam", "--beam-options", beam]
    )  # fmt: skip
    assert code == 0
    same_files(tmp_path / "local", tmp_path / "beam")
    err = capfd.readouterr().err
    assert "INFO" not in err and "sdk harness" not in err, err[-2000:]


def test_the_documented_dataflow_command_parses() -> None:
    import shlex

    from feedgpu.cli import commands
    from feedgpu.cli.parser import build_parser, join_dash_values

    readme = (Path(__file__).resolve().parent.parent / "docs" / "scale.md").read_text()
    start = readme.index("feedgpu convert images gs://")
    command = readme[start : readme.index("\n", readme.index("--beam-options", start))]
    argv = shlex.split(command.replace("\\\n", " "))[1:]
    args = build_parser(commands).parse_args(join_dash_values(argv))
    assert args.runner == "beam" and args.src.startswith("gs://")
    assert args.beam_options.startswith("--runner=DataflowRunner --project=P")


def test_beam_text_conversion_is_byte_identical(tmp_path: Path, text_folder: Path) -> None:
    options = feedgpu.TextOptions(
        tokenizer="train:wordpiece:300", folder_labels=True, num_shards=3, chunk_mb=0.002
    )
    feedgpu.convert_text(str(text_folder), str(tmp_path / "local"), options, quiet=True)
    code = main(
        ["convert", "text", str(text_folder), str(tmp_path / "beam"), "--tokenizer",
         "train:wordpiece:300", "--folder-labels", "--num-shards", "3", "--chunk-mb", "0.002",
         "--runner", "beam", "--quiet"]
    )  # fmt: skip
    assert code == 0
    same_files(tmp_path / "local", tmp_path / "beam")


def test_beam_strict_stops_with_the_input_error(
    tmp_path: Path, nasty_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["convert", "images", str(nasty_folder), str(tmp_path / "o"), "--runner", "beam"]
    assert main([*args, "--strict", "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("feedgpu: error: ") and "\n" not in err and "--strict" in err
    assert not list((tmp_path / "o").glob("*.tfrecord-*-of-*[0-9]"))  # no final shard names


def test_beam_missing_says_how_to_install(
    tmp_path: Path, image_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # as if it were not installed
    with pytest.raises(feedgpu.UsageError, match=r"pip install 'apache-beam\[tfrecord\]'"):
        feedgpu.convert_images(str(image_folder), str(tmp_path / "o"), runner="beam")


def examples(ds) -> collections.Counter:
    seen: collections.Counter = collections.Counter()
    for images, labels in ds:
        for image, label in zip(images.numpy(), labels.numpy(), strict=True):
            seen[(hashlib.sha1(image.tobytes()).hexdigest(), int(label))] += 1
    return seen


@pytest.fixture(scope="module")
def service_data(tmp_path_factory: pytest.TempPathFactory) -> str:
    return sample_image_dataset(tmp_path_factory.mktemp("svc"), 20, (64, 48))


def test_service_with_two_workers_serves_the_local_batches(service_data: str) -> None:
    dispatcher = start_dispatcher()
    workers = [start_worker(dispatcher.address) for _ in range(2)]
    spec = feedgpu.PipelineSpec.for_dataset(service_data, batch_size=8, image_size=(32, 32))
    local = examples(feedgpu.build_pipeline(spec))
    remote = spec.with_changes(service=dispatcher.address, service_mode="distributed_epoch")
    assert examples(feedgpu.build_pipeline(remote)) == local  # each example once, same content
    for w in workers:
        w.stop()
    dispatcher.stop()


def test_distributed_epoch_serves_every_document_of_text_blocks_once(text_data: Path) -> None:
    """Blocks of documents read back as elements of whole documents on each worker: the
    reader's end-of-epoch remainder is served by every worker that read a file (its end mark
    was one split of its own, which only one worker got, so the other's documents were lost)."""
    dispatcher = start_dispatcher()
    workers = [start_worker(dispatcher.address) for _ in range(2)]
    spec = feedgpu.PipelineSpec.for_dataset(str(text_data), batch_size=4, max_length=64)

    def documents(ds) -> collections.Counter:
        found: collections.Counter = collections.Counter()
        for x, _ in ds:
            for ids, mask in zip(x["input_ids"].numpy(), x["attention_mask"].numpy(), strict=True):
                found[tuple(ids[mask > 0])] += 1
        return found

    local = documents(feedgpu.build_pipeline(spec))
    remote = spec.with_changes(service=dispatcher.address, service_mode="distributed_epoch")
    # Which worker reads which files varies from run to run (a worker that read none lost
    # nothing): several epochs, so a loss on one worker's side shows.
    for _ in range(3):
        assert documents(feedgpu.build_pipeline(remote)) == local and sum(local.values()) == 60
    for w in workers:
        w.stop()
    dispatcher.stop()


def test_losing_a_worker_mid_epoch_does_not_lose_the_run(service_data: str) -> None:
    dispatcher = start_dispatcher()
    workers = [start_worker(dispatcher.address) for _ in range(2)]
    spec = feedgpu.PipelineSpec.for_dataset(
        service_data, batch_size=4, training=True, image_size=(32, 32), repeat=True
    ).with_changes(service=dispatcher.address)
    batches = iter(feedgpu.build_pipeline(spec))
    for _ in range(5):
        next(batches)
    workers[0].stop()
    shapes = {tuple(next(batches)[0].shape) for _ in range(30)}  # served by the survivor
    assert shapes == {(4, 32, 32, 3)}
    workers[1].stop()
    dispatcher.stop()


def test_a_service_pipeline_whose_epochs_end_is_warned_of(
    service_data: str, caplog: pytest.LogCaptureFixture
) -> None:
    from feedgpu.pipeline.measure_hooks import StageChanges

    dispatcher = start_dispatcher()  # building registers the dataset with it
    spec = feedgpu.PipelineSpec.for_dataset(service_data, batch_size=4, image_size=(32, 32))
    served = spec.with_changes(service=dispatcher.address)
    try:
        with pytest.raises(feedgpu.UsageError, match=r"cannot travel to tf\.data service"):
            feedgpu.build_pipeline(served, None, StageChanges(delay_s=(("batch", 0.01),)))
        with caplog.at_level("WARNING", logger="feedgpu.pipeline.build"):
            feedgpu.build_pipeline(served)
            said = caplog.text
            caplog.clear()
            feedgpu.build_pipeline(served.with_changes(repeat=True))
    finally:
        dispatcher.stop()
    assert "the epoch waits for it until a worker comes back" in said
    assert "comes back" not in caplog.text


def test_service_spec_validation() -> None:
    with pytest.raises(feedgpu.UsageError, match="grpc://HOST:PORT"):
        feedgpu.PipelineSpec(data_dir="d", service="localhost:5050")
    with pytest.raises(feedgpu.UsageError, match="cannot run"):
        feedgpu.PipelineSpec(data_dir="d", service="grpc://h:1", ignore_errors=True)


def test_serve_commands_report_their_address_and_stop_on_sigterm(tmp_path: Path) -> None:
    start = serve_process
    dispatcher, line = start("dispatcher", "--port", "0", "--work-dir", str(tmp_path / "journal"))
    assert line.startswith("feedgpu: dispatcher serving at grpc://localhost:"), line
    address = line.rsplit(" ", 1)[1]
    worker, wline = start("worker", "--dispatcher", address)
    assert wline.startswith("feedgpu: worker serving at localhost:"), wline
    for proc, kind in ((worker, "worker"), (dispatcher, "dispatcher")):
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and f"feedgpu: {kind} stopped" in out
    assert (tmp_path / "journal").exists()  # fault-tolerant mode journals its state


def test_serve_help_warns_that_there_is_no_authentication(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "dispatcher", "--help"])
    assert "no authentication" in capsys.readouterr().out


def test_bench_input_through_the_service_plans_workers(service_data: str) -> None:
    import jsonschema

    from feedgpu.bench.measure import BenchOptions, bench_input
    from feedgpu.bench.render import render_report
    from feedgpu.bench.schema import BENCH_REPORT_SCHEMA

    dispatcher = start_dispatcher()
    workers = [start_worker(dispatcher.address) for _ in range(2)]
    options = BenchOptions(
        batch_size=8,
        seconds=0.3,  # the feed through the service is the question; its arithmetic is below
        ablation="never",
        quiet=True,
        service_workers=2,
        overrides={"image_size": (32, 32), "service": dispatcher.address},
    )
    from feedgpu.bench.device import DeviceConfig, resolve_devices

    setup = resolve_devices(DeviceConfig(xla=False))  # the feed is the question, not XLA's compile
    report = bench_input(service_data, options, setup=setup)
    plan = report.capacity
    assert report.spec.service == dispatcher.address and plan.service_workers == 2
    assert report.spec.dtype == "uint8"  # batches cross the wire: a quarter of the bytes
    assert plan.service_workers_needed is not None and plan.service_workers_needed >= 1
    assert report.end_to_end.num_steps > 0
    assert "tf.data service: 2 worker(s)" in render_report(report)
    jsonschema.validate(report.to_json(), BENCH_REPORT_SCHEMA)
    for w in workers:
        w.stop()
    dispatcher.stop()


def test_capacity_plan_counts_cores_hosts_and_service_workers_to_the_ceiling() -> None:
    from feedgpu.bench.records import PipelineRate, StepRate
    from feedgpu.bench.report import CapacityPlan

    def ceiling(examples_per_s: float) -> StepRate:
        return StepRate(examples_per_s, 10, 12, 0, 0.0, 20, 0.2, 2, None, None)

    # 2 ms of host CPU an example, the model takes 1,500 examples/s: 3 cores' worth
    alone = PipelineRate(0.1, 400.0, 50.0, 2.0, 50)
    local = CapacityPlan.of(alone, ceiling(1500), None)
    cores = local.host_cores
    assert local.cores_needed == pytest.approx(3.0)
    assert local.hosts_needed == max(1, -(-3 // cores))  # whole hosts of this one's size
    assert local.service_workers is None and local.service_workers_needed is None
    # 2 workers deliver 400 examples/s: 200 each, so 1,500 takes 8 of them (7.5, rounded up)
    served = CapacityPlan.of(alone, ceiling(1500), 2)
    assert (served.service_workers, served.service_workers_needed) == (2, 8)
    assert CapacityPlan.of(alone, ceiling(50), 2).service_workers_needed == 1  # never 0
    assert CapacityPlan.of(alone, ceiling(50), None).hosts_needed == 1


def test_outputs_go_through_gfile(tmp_path: Path, image_folder: Path, text_folder: Path) -> None:
    """A gfile-only file system (TensorFlow's ram://, standing in for gs://): images on Beam
    and text, written, verified and read back without one local path."""
    import tensorflow as tf

    local, remote = tmp_path / "local", "ram://feedgpu-test/images"
    options = feedgpu.ImageOptions(num_shards=2)
    feedgpu.convert_images(str(image_folder), str(local), options, quiet=True)
    feedgpu.convert_images(str(image_folder), remote, options, quiet=True, runner="beam")
    for name in sorted(os.listdir(local)):
        with tf.io.gfile.GFile(f"{remote}/{name}", "rb") as f:
            assert f.read() == (local / name).read_bytes(), name
    assert feedgpu.verify_dataset(remote, decode=True, quiet=True).ok
    text = feedgpu.TextOptions(tokenizer="train:wordpiece:300", folder_labels=True, chunk_mb=0.002)
    report = feedgpu.convert_text(str(text_folder), "ram://feedgpu-test/text", text, quiet=True)
    assert report.num_examples > 0
    spec = feedgpu.PipelineSpec.for_dataset("ram://feedgpu-test/text", batch_size=4)
    assert (
        sum(int(y.shape[0]) for _, y in feedgpu.build_pipeline(spec))
        == report.examples_by_split["train"]
    )


def test_image_sources_through_gfile(tmp_path: Path, image_folder: Path) -> None:
    """A source folder on a gfile-only file system converts to the same bytes as on disk."""
    import tensorflow as tf

    remote = "ram://feedgpu-src/photos"
    for path in sorted(image_folder.rglob("*")):
        if path.is_file():
            rel = path.relative_to(image_folder).as_posix()
            tf.io.gfile.makedirs(f"{remote}/{posixpath.dirname(rel)}")
            with tf.io.gfile.GFile(f"{remote}/{rel}", "wb") as f:
                f.write(path.read_bytes())
    with tf.io.gfile.GFile(f"{remote}/.hidden.jpg", "wb") as f:
        f.write(b"x")
    with tf.io.gfile.GFile(f"{remote}/cat/notes.txt", "wb") as f:
        f.write(b"not an image")
    options = feedgpu.ImageOptions(num_shards=2, name="photos")
    local = feedgpu.convert_images(str(image_folder), str(tmp_path / "a"), options, quiet=True)
    report = feedgpu.convert_images(remote, str(tmp_path / "b"), options, quiet=True)
    assert report.num_examples == local.num_examples == 36
    assert report.skipped_by_reason == {"hidden": 1, "not an image": 1}
    shards = sorted(p.name for p in (tmp_path / "a").glob("*.tfrecord-*"))
    for name in shards:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_blocks_from_disk_and_gfile_are_the_same_bytes(tmp_path: Path, monkeypatch) -> None:
    """Batches, and the blocks of documents cut within them, come from the lines alone: a local
    file and a remote one read as a stream (its part lines joined to the next read: other
    blocks of lines) give the same records, with small limits so that many batches span blocks."""
    import gzip
    import random

    import tensorflow as tf

    from feedgpu.converters.text import batches as text_batches
    from feedgpu.converters.text import raw_lines

    rng = random.Random(4)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    src = tmp_path / "src"
    src.mkdir()
    for name, count in (("a.jsonl", 700), ("b.jsonl.gz", 500)):
        lines = "".join(
            json.dumps({"text": " ".join(rng.choices(words, k=rng.choice([1, 3, 8, 40])))}) + "\n"
            for _ in range(count)
        ).encode()
        (src / name).write_bytes(gzip.compress(lines) if name.endswith(".gz") else lines)
    remote = "ram://feedgpu-blocks/src"
    tf.io.gfile.makedirs(remote)
    for path in src.iterdir():
        with tf.io.gfile.GFile(f"{remote}/{path.name}", "wb") as f:
            f.write(path.read_bytes())
    monkeypatch.setattr(raw_lines, "BLOCK_LINES", 37)
    monkeypatch.setattr(raw_lines, "BLOCK_BYTES", 2000)
    monkeypatch.setattr(text_batches, "BATCH_DOCS", 64)
    monkeypatch.setattr(text_batches, "BATCH_CHARS", 5000)
    options = feedgpu.TextOptions(
        tokenizer="train:wordpiece:200", docs_per_record=4, num_shards=2, name="blocks"
    )
    feedgpu.convert_text(str(src), str(tmp_path / "disk"), options, quiet=True)
    feedgpu.convert_text(remote, str(tmp_path / "gfile"), options, quiet=True)
    shards = sorted(p.name for p in (tmp_path / "disk").glob("*.tfrecord-*"))
    assert len(shards) == 2
    for name in shards:
        assert (tmp_path / "disk" / name).read_bytes() == (tmp_path / "gfile" / name).read_bytes()


def test_text_sources_through_gfile(tmp_path: Path, jsonl_corpus: Path) -> None:
    """A JSONL corpus (gzip part included) on a gfile-only file system, as a folder and as a
    glob: the same shards as from disk."""
    import tensorflow as tf

    remote = "ram://feedgpu-src/corpus"
    tf.io.gfile.makedirs(remote)
    for path in sorted(jsonl_corpus.iterdir()):
        with tf.io.gfile.GFile(f"{remote}/{path.name}", "wb") as f:
            f.write(path.read_bytes())
    options = feedgpu.TextOptions(
        tokenizer="train:wordpiece:300", label_field="label", num_shards=2, name="corpus"
    )
    local = feedgpu.convert_text(str(jsonl_corpus), str(tmp_path / "a"), options, quiet=True)
    folder = feedgpu.convert_text(remote, str(tmp_path / "b"), options, quiet=True)
    assert folder.num_examples == local.num_examples > 0
    assert folder.skipped_by_reason == local.skipped_by_reason
    for name in sorted(p.name for p in (tmp_path / "a").glob("*.tfrecord-*")):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    pattern = feedgpu.convert_text(f"{remote}/*.jsonl*", str(tmp_path / "c"), options, quiet=True)
    assert pattern.num_examples > 0
    assert pattern.num_inputs < local.num_inputs  # notes.txt is not matched by the pattern
