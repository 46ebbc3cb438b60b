"""Exact mid-epoch resume: a killed run, resumed from its checkpoint, trains on exactly the
batches (examples, order, augmented pixels) an uninterrupted run with the same seed trains on."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from resume_loop import fit_with_backup, train

import feedgpu
from feedgpu import ImageOptions, InputPosition, PipelineSpec, TextOptions, UsageError

ROOT = Path(__file__).resolve().parent.parent


def _corpus(folder: Path, docs: int = 700) -> Path:
    """A JSONL corpus of short and long documents: several blocks of 256, so several groups."""
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "eta", "theta", "iota", "kappa", "mu"]
    folder.mkdir(parents=True)
    with open(folder / "part.jsonl", "w") as f:
        for i in range(docs):
            length = rng.choice([2, 5, 9, 30, 70])
            text = f"doc{i} " + " ".join(rng.choice(words) for _ in range(length))
            f.write(json.dumps({"text": text, "label": i % 2}) + "\n")
    return folder


@pytest.fixture(scope="module")
def text_sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The corpus converted once per module: a document a record, in blocks of 4, and packed
    into 64 ids (read-only)."""
    root = tmp_path_factory.mktemp("resume-text")
    src = _corpus(root / "corpus")
    made = {}
    layouts = {"one": {"docs_per_record": 1}, "blocks": {"docs_per_record": 4}}
    for name, extra in (*layouts.items(), ("packed", {"pack": 64})):
        opts = TextOptions(tokenizer="train:wordpiece:300", num_shards=3, **extra)  # type: ignore[arg-type]
        feedgpu.convert_text(str(src), str(root / name), opts, quiet=True)
        made[name] = root / name
    return made


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines()


def _image_spec(data: Path, **changes: object) -> PipelineSpec:
    # The default training spec: cache in memory, shuffled files and examples, augmentation.
    options: dict = {"batch_size": 4, "seed": 11, **changes}
    spec = PipelineSpec.for_dataset(str(data), training=True, **options)
    assert spec.cache == "memory" and spec.shuffle_buffer and spec.shuffle_files
    return spec


def test_killed_loop_resumes_with_the_uninterrupted_batches(image_data: Path, tmp_path: Path):
    spec = _image_spec(image_data)
    total, every, kill_at = 22, 4, 13  # 9 batches an epoch: the kill is mid-epoch 1
    expected: list[str] = []
    weights = train(spec, str(tmp_path / "straight"), total, every, expected.append)
    assert len(expected) == total and len(set(expected[:9])) == 9

    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.to_json())
    ckpt, log = tmp_path / "ckpt", tmp_path / "log.txt"
    command = [sys.executable, str(ROOT / "tests/resume_loop.py"), str(spec_file), str(ckpt)]
    command += [str(log), str(total), str(every)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    killed = subprocess.run([*command, str(kill_at)], env=env, capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    before = _lines(log)
    assert before == expected[: kill_at + 1]  # what it trained on before dying

    resumed = subprocess.run(command, env=env, capture_output=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    after = _lines(log)[len(before) :]
    last_saved = kill_at // every * every  # batches 12 and 13 are trained again, as they must be
    assert [int(line.split()[0]) for line in after] == list(range(last_saved, total))
    assert after == expected[last_saved:]  # same examples (labels), same pixels, same order
    np.testing.assert_allclose(np.load(str(log) + ".weights.npy"), weights, rtol=1e-6)


@pytest.mark.parametrize(
    ("mode", "layout"),
    [("pad", "one"), ("bucket", "one"), ("pad", "blocks"), ("bucket", "blocks"), ("packed", "")],
)
def test_every_text_mode_resumes_exactly_across_epochs(
    tmp_path: Path, mode: str, layout: str, text_sets: dict[str, Path]
) -> None:
    data = text_sets[layout or "packed"]
    # 16 a batch: 700 documents are still three blocks, several groups, ~44 batches an epoch
    spec = PipelineSpec.for_dataset(
        str(data), training=True, batch_size=16, seed=5, shuffle_buffer=256
    )
    if mode != "packed":
        spec = spec.with_changes(text_mode=mode)
    count = InputPosition(spec).batches_per_epoch
    total = 2 * count + 3
    expected: list[str] = []
    train(spec, str(tmp_path / "straight"), total, 1000, expected.append)
    assert expected[:count] != expected[count : 2 * count]  # each epoch its own order
    for stop in (count // 2, count + 1):  # mid-epoch 0, and just after an epoch boundary
        ckpt = tmp_path / f"ckpt-{stop}"
        first: list[str] = []
        train(spec, str(ckpt), stop, stop, first.append)  # saves at `stop`, then "dies"
        rest: list[str] = []
        train(spec, str(ckpt), total, 1000, rest.append)
        assert first + rest == expected, (mode, stop)


def test_hosts_resume_their_own_shard(image_data: Path) -> None:
    spec = _image_spec(image_data, batch_size=2)
    seen = []
    for host in range(2):
        context = tf.distribute.InputContext(2, host, 1)
        position = InputPosition(spec, context)
        ds = feedgpu.build_pipeline(spec, context, position=position)
        straight = [[*b[1].numpy().tolist(), float(b[0].numpy().sum())] for b in ds]
        position.reset(3)
        resumed = [[*b[1].numpy().tolist(), float(b[0].numpy().sum())] for b in ds]
        assert resumed == straight[3:]
        seen.append(position.fingerprint)
        with pytest.raises(UsageError, match="another spec, dataset or input context"):
            feedgpu.build_pipeline(
                spec, tf.distribute.InputContext(2, 1 - host, 1), position=position
            )
    assert seen[0] != seen[1]


def test_a_changed_seed_spec_or_dataset_is_refused(
    image_data: Path, image_folder: Path, tmp_path: Path
) -> None:
    spec = _image_spec(image_data)
    position = InputPosition(spec)
    position.advance(5)
    saved = tf.train.Checkpoint(input=position).write(str(tmp_path / "ckpt" / "input"))
    size = sum(f.stat().st_size for f in (tmp_path / "ckpt").iterdir())
    assert size < 64 * 1024  # the whole saved input state

    again = InputPosition(spec)
    tf.train.Checkpoint(input=again).read(saved).assert_consumed()
    assert (again.epoch, again.step, again.batches) == (0, 5, 5)

    other = tmp_path / "other"  # the same images converted again, into more shards
    feedgpu.convert_images(str(image_folder), str(other), ImageOptions(num_shards=3), quiet=True)
    changed = {
        "seed": spec.with_changes(seed=12),
        "spec": spec.with_changes(batch_size=3),
        "dataset": _image_spec(other),
    }
    for what, variant in changed.items():
        with pytest.raises(UsageError, match="belongs to another pipeline") as refused:
            tf.train.Checkpoint(input=InputPosition(variant)).read(saved)
        assert "\n" not in str(refused.value), what
    with pytest.raises(UsageError, match="another spec"):
        feedgpu.build_pipeline(spec.with_changes(seed=12), position=position)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"seed": None}, "no seed"),
        ({"deterministic": False}, "deterministic=False"),
        ({"ignore_errors": True}, "ignore_errors"),
    ],
)
def test_what_cannot_resume_exactly_is_refused(image_data: Path, change: dict, why: str) -> None:
    with pytest.raises(UsageError, match=why):
        InputPosition(_image_spec(image_data).with_changes(**change))


def test_iterators_start_where_the_position_is_and_repeat_runs_on(image_data: Path) -> None:
    spec = _image_spec(image_data, repeat=True)
    position = InputPosition(spec)
    ds = feedgpu.build_pipeline(spec, position=position)
    straight = [float(b[0].numpy().sum()) for b in ds.take(25)]  # nearly 3 epochs of 9
    position.reset(16)  # epoch 1, step 7
    assert (position.epoch, position.step) == (1, 7)
    assert [float(b[0].numpy().sum()) for b in ds.take(9)] == straight[16:25]


def test_fit_backup_resumes_model_fit_at_the_next_batch(image_data: Path, tmp_path: Path):
    import keras

    spec = _image_spec(image_data, image_size=32)  # 9 batches an epoch

    def model() -> keras.Model:
        keras.utils.set_random_seed(0)
        made = keras.Sequential(
            [keras.Input((32, 32, 3)), keras.layers.Flatten(), keras.layers.Dense(3)]
        )
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        made.compile(keras.optimizers.SGD(0.001), loss)
        return made

    class Preempted(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            if int(self.model.optimizer.iterations.numpy()) == 13:  # mid-epoch 1
                raise RuntimeError("preempted")

    straight = model()
    feedgpu.FitBackup(spec, str(tmp_path / "a"), save_every=4).fit(straight, epochs=3, verbose=0)
    with pytest.raises(RuntimeError, match="preempted"):
        feedgpu.FitBackup(spec, str(tmp_path / "b"), save_every=4).fit(
            model(), epochs=3, verbose=0, callbacks=[Preempted()]
        )
    resumed = model()  # a new process would start here: fresh weights, restored from backup
    backup = feedgpu.FitBackup(spec, str(tmp_path / "b"), save_every=4)
    history = backup.fit(resumed, epochs=3, verbose=0)
    assert history.epoch == [1, 2] and len(history.history["loss"]) == 2
    assert backup.position.batches == 27  # 12 from the backup, then the other 15, once each
    assert int(resumed.optimizer.iterations.numpy()) == 27
    for mine, theirs in zip(resumed.weights, straight.weights, strict=True):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)
    with pytest.raises(UsageError, match="build the model"):
        backup.fit(keras.Sequential([keras.layers.Dense(3)]), epochs=1)


def test_fit_backup_with_steps_per_execution_survives_kill_minus_nine(
    image_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _image_spec(image_data, image_size=32)  # 9 batches an epoch, 2 a call
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.to_json())
    # Keras 3.15 reports an epoch's last, shorter call as a whole one: FitBackup counted 12
    # batches after epoch 0, and fit then failed ("expected 9 elements but contained only 8").
    straight, history = fit_with_backup(spec, str(tmp_path / "straight"))
    assert history.epoch == [0, 1, 2] and int(straight.optimizer.iterations.numpy()) == 27
    # Killed in a process of its own mid-epoch 1: batches run two a call (11, 13), so the
    # backup due at 12 is made at 13.
    code = "import sys; from resume_loop import fit_with_backup; from feedgpu import PipelineSpec; "
    code += "fit_with_backup(PipelineSpec.from_json(open(sys.argv[1]).read()), sys.argv[2], 13)"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "CUDA_VISIBLE_DEVICES": ""}
    killed = subprocess.run(
        [sys.executable, "-c", code, str(spec_file), str(tmp_path / "killed")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    capsys.readouterr()
    resumed, history = fit_with_backup(spec, str(tmp_path / "killed"), verbose=1)
    out = capsys.readouterr().out
    assert "FitBackup: resuming epoch 2/3 at batch 5 of 9" in out
    assert "Epoch 2/3" in out and "Epoch 3/3" in out and "Epoch 2/2" not in out
    assert history.epoch == [1, 2]
    assert int(resumed.optimizer.iterations.numpy()) == 27  # 13 + 14: none lost, none twice
    for mine, theirs in zip(resumed.weights, straight.weights, strict=True):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)
    _, again = fit_with_backup(spec, str(tmp_path / "killed"), verbose=1)
    assert "FitBackup: already complete (3 epochs" in capsys.readouterr().out
    assert again.epoch == [] and again.history == {}


def test_a_checkpointed_iterator_still_restores_exactly(image_data: Path, tmp_path: Path):
    # The classic way (the whole iterator, shuffle buffer and cache included) keeps working.
    spec = _image_spec(image_data)
    it = iter(feedgpu.build_pipeline(spec))
    for _ in range(3):
        next(it)
    path = tf.train.Checkpoint(iterator=it).write(str(tmp_path / "iterator"))
    expected = [next(it)[0].numpy() for _ in range(3)]
    again = iter(feedgpu.build_pipeline(spec))
    tf.train.Checkpoint(iterator=again).read(path).assert_consumed()
    for want in expected:
        np.testing.assert_array_equal(next(again)[0].numpy(), want)
