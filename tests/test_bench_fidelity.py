"""bench-input measures the program the user trains: the model's own compile settings, one
resolution of the spec, headlines inside their spreads, advice that follows from the parts,
saved specs without this host in them, and reports without foreign warnings."""

from __future__ import annotations

import json
import logging
import time
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import feedgpu
from feedgpu.bench.ablation import run_ablation
from feedgpu.bench.advice import advice_for
from feedgpu.bench.bench_spec import bench_spec
from feedgpu.bench.device import DeviceConfig, resolve_devices
from feedgpu.bench.measure import BenchOptions, bench_input
from feedgpu.bench.records import AblationResult, PipelineRate, StepRate
from feedgpu.bench.render import render_report
from feedgpu.bench.report import BenchReport, CapacityPlan
from feedgpu.bench.rounds import measure_pipeline
from feedgpu.bench.spread import Spread
from feedgpu.bench.steps import StepTimes
from feedgpu.bench.train_step import StepSettings, xla_note
from feedgpu.cli import main
from feedgpu.pipeline.measure_hooks import StageChanges
from feedgpu.pipeline.spec import PipelineSpec

QUICK = {"seconds": 0.4, "ablation": "never", "quiet": True, "batch_size": 8}


def _model(path: Path, size: int = 16, **compile_args: object) -> str:
    inputs = keras.Input((size, size, 3))
    x = keras.layers.Conv2D(4, 3)(keras.layers.Rescaling(1 / 255)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(x)))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile("adam", loss, **compile_args)  # type: ignore[arg-type]
    model.save(path)  # saved before it trained: its optimizer has no state yet
    return str(path)


@pytest.mark.parametrize(
    ("jit_compile", "rule", "xla", "reason"),
    [
        (False, "auto", False, "the model's jit_compile=False"),
        (True, "auto", True, "the model's jit_compile=True"),
        (True, "off", False, "--xla off"),
    ],
)
def test_a_saved_model_runs_with_its_own_xla_setting_and_the_header_says_so(
    tmp_path: Path, image_data: Path, jit_compile: bool, rule: str, xla: bool, reason: str
) -> None:
    model = _model(tmp_path / "m.keras", jit_compile=jit_compile)
    setup = resolve_devices(DeviceConfig(xla=rule))
    report = bench_input(str(image_data), BenchOptions(model=model, **QUICK), setup=setup)
    assert report.run is not None and report.run.xla is xla and report.run.xla_reason == reason
    header = render_report(report).splitlines()[0]
    assert f"({'XLA' if xla else 'no XLA'}: {reason}" in header.replace("float32, ", "(")
    assert report.run.policy == "float32" and "float32" in header  # the model's own policy
    assert (report.run.other_xla_step_ms is not None) is xla  # the other choice, timed


def test_steps_per_execution_trains_that_many_batches_a_call(
    tmp_path: Path, image_data: Path
) -> None:
    from feedgpu.bench.user_model import fit_model, make_model_step

    made = keras.saving.load_model(_model(tmp_path / "s.keras", steps_per_execution=3))
    step = make_model_step(made, fit_model(made, "image"), resolve_devices(DeviceConfig()))
    batch = (tf.zeros([8, 16, 16, 3], tf.uint8), tf.zeros([8], tf.int64))
    before = int(made.optimizer.iterations)
    step((batch, batch, batch))  # one call: three optimizer steps, as model.fit's would be
    assert step.batches_per_call == 3 and int(made.optimizer.iterations) == before + 3
    model = _model(tmp_path / "m.keras", steps_per_execution=3)
    report = bench_input(
        str(image_data),
        BenchOptions(model=model, **QUICK),
        setup=resolve_devices(DeviceConfig(xla="off")),
    )
    assert report.run is not None and report.run.steps_per_execution == 3
    assert report.ceiling.num_steps % 3 == 0 and report.end_to_end.num_steps % 3 == 0
    assert "3 steps a call" in render_report(report).splitlines()[0]


def test_xla_note_names_the_faster_choice_with_its_figure() -> None:
    slow = StepSettings(xla=True, xla_reason="--xla on", policy="float32", other_xla_step_ms=100)
    note = xla_note(slow, ceiling_step_ms=1500)
    assert note is not None and "1500 ms a step with it, 100 ms without (15.0x)" in note
    assert xla_note(slow, ceiling_step_ms=120) is None  # within 1.5x: no note
    plain = StepSettings(xla=False, xla_reason="--xla off", policy="float32")
    assert xla_note(plain, ceiling_step_ms=1500) is None  # not measured (CPU): no claim
    faster = StepSettings(xla=False, xla_reason="x", policy="float32", other_xla_step_ms=50)
    assert "XLA would make this step faster here: 150 ms" in str(xla_note(faster, 150))


def test_a_headline_lies_inside_its_spread() -> None:
    # Rounds of very different lengths: pooled, the long slow one would pull the rate below
    # the 10th percentile of the rounds' rates; the headline is their median.
    rounds = []
    for steps, step_s in ((40, 0.1), (5, 0.001), (5, 0.001), (5, 0.001), (5, 0.001)):
        rounds.append(StepTimes([0.0] * steps, [step_s] * steps, examples=8 * steps))
    rate = StepRate.from_rounds(rounds)
    assert rate.spread is not None and rate.spread.low <= rate.examples_per_s <= rate.spread.high
    assert rate.share_spread is not None
    assert rate.share_spread.low <= rate.input_share <= rate.share_spread.high

    def uneven():  # a pipeline that stalls now and then
        for i in range(10**6):
            if i % 50 == 0:
                time.sleep(0.05)
            yield tf.zeros([4, 1])

    alone = measure_pipeline(uneven(), 0.5)
    assert alone.spread is not None
    assert alone.spread.low <= alone.examples_per_s <= alone.spread.high


def _report(plan: CapacityPlan, advice: tuple[str, ...], share: float = 0.15) -> BenchReport:
    def rate(examples_per_s: float, share: float) -> StepRate:
        return StepRate(
            examples_per_s, 10, 12, 10 * share, share, 40, 4.0, 2, 1.0, 0.5,
            Spread(examples_per_s * 0.99, examples_per_s * 1.01, 5), Spread(share, share, 5),
        )  # fmt: skip

    ablation = AblationResult(1000, (), None, advice, PipelineSpec(data_dir="d"))
    return BenchReport(
        data_dir="d", split="train", kind="text", model="transformer-small", batch_size=32,
        accumulate=1, device=resolve_devices(), pipeline=PipelineRate(0.1, 11000, 340, 0.01, 50),
        ceiling=rate(1000, 0.0), end_to_end=rate(840, share), gpu_utilization=None,
        gpu_note="no GPU", ablation=ablation, capacity=plan, spec=PipelineSpec(data_dir="d"),
        profile_dir=None, seconds=1,
    )  # fmt: skip


def test_advice_never_asks_for_cores_the_capacity_plan_does_not_need() -> None:
    crowd = (
        "no single stage dominates: add host cores or tf.data service workers, or use a "
        "larger model per example",
    )
    ample = _report(CapacityPlan(0.01, 0.1, 2, 1), crowd)
    lines = advice_for(ample)
    assert not any("add host cores" in line for line in lines)
    assert any("11.0x faster than the model consumes" in line for line in lines), lines
    assert any("would not change" in line for line in lines)
    decode = (
        "JPEG decoding costs most: re-convert with --max-size near the model's input size "
        "(decode cost grows with pixels), or add host cores / tf.data service workers",
    )
    assert "add host cores" not in advice_for(_report(CapacityPlan(0.01, 0.1, 2, 1), decode))[0]
    short = _report(CapacityPlan(5.0, 3.0, 2, 2), crowd)  # needs 3 cores, this host has 2
    slow_pipeline = BenchReport(**{**short.__dict__, "pipeline": PipelineRate(0.1, 600, 19, 5, 50)})
    assert advice_for(slow_pipeline) == crowd
    # slow but cheap (waiting on storage, say): no cores asked, and no claim of headroom
    cheap = BenchReport(**{**ample.__dict__, "pipeline": PipelineRate(0.1, 600, 19, 0.01, 50)})
    assert advice_for(cheap) == ()
    served = _report(
        CapacityPlan(0.01, 0.1, 2, 1, service_workers=2, service_workers_needed=5), crowd
    )
    served = BenchReport(**{**served.__dict__, "pipeline": PipelineRate(0.1, 600, 19, 0.01, 50)})
    assert advice_for(served) == crowd  # the plan asks for more service workers: kept


def test_making_a_stage_free_never_shows_as_costing_time() -> None:
    spec = PipelineSpec(data_dir="unused", training=False, kind="image")

    def measure(variant: PipelineSpec, stages: StageChanges) -> PipelineRate:
        rate = 800.0 if "decode" in stages.skip else 1000.0  # "free" decode ran slower: noise
        return PipelineRate(0.1, rate, 1, 1, 50, Spread(rate * 0.99, rate * 1.01, 5))

    result = run_ablation(spec, StageChanges(), measure, split_bytes=10**12)
    decode = next(r for r in result.rows if r.stage == "decode")
    assert decode.saved_ms_per_example is not None and decode.saved_ms_per_example < 0
    assert not decode.measurable and result.bottleneck != "decode"


def test_phases_too_short_are_uncertain_with_the_reason() -> None:
    report = _report(CapacityPlan(0.01, 0.1, 2, 1), ())
    short = BenchReport(**{**report.__dict__, "end_to_end": StepRate(
        840, 10, 12, 1.5, 0.15, 5, 0.05, 2, 1.0, 0.5, Spread(830, 850, 5), Spread(0.15, 0.15, 5)
    )})  # fmt: skip
    assert short.verdict == "uncertain" and "end to end timed only 5 steps" in str(
        short.uncertain_reason
    )
    assert "verdict: uncertain" in render_report(short)
    assert report.verdict == "moderately input-bound"
    beyond = BenchReport(**{**report.__dict__, "end_to_end": StepRate(
        1130, 10, 12, 1.5, 0.15, 40, 0.4, 2, 1.0, 0.5, Spread(900, 1200, 5), Spread(0.15, 0.15, 5)
    )})  # fmt: skip
    assert beyond.measurement_problem is None  # inside the spreads...
    assert beyond.verdict == "uncertain"  # ...but 113% of what it cannot beat
    assert "113% of the compute ceiling" in render_report(beyond)


def test_a_saved_spec_holds_nothing_of_this_host(
    image_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from feedgpu.pipeline import spec as spec_module

    spec = PipelineSpec.for_dataset(str(image_data), batch_size=4, training=True)
    saved = json.loads(spec.to_json())
    assert "ram_budget_bytes" not in saved and "cycle_length" not in saved
    assert PipelineSpec.from_json(spec.to_json()) == spec  # chosen again: the same here
    monkeypatch.setattr(spec_module.os, "cpu_count", lambda: 1)  # another host
    monkeypatch.setattr(spec_module, "_memory_bytes", lambda: 6 << 30)
    there = PipelineSpec.from_json(spec.to_json())
    assert (there.cycle_length, there.ram_budget_bytes) == (1, 3 << 30)
    assert "ram_budget_bytes = 3221225472  # half of this machine's memory" in str(there)
    pinned = PipelineSpec.for_dataset(str(image_data), cycle_length=2, ram_budget_bytes=1 << 30)
    kept = json.loads(pinned.to_json())
    assert kept["cycle_length"] == 2 and kept["ram_budget_bytes"] == 1 << 30  # set by hand
    changed = json.loads(spec.with_changes(cycle_length=3).to_json())
    assert changed["cycle_length"] == 3  # changed after: set by hand too


def test_library_callers_get_the_spec_checks_the_cli_gets(
    image_data: Path, text_data: Path
) -> None:
    spec = PipelineSpec.for_dataset(str(image_data), batch_size=4)
    with pytest.raises(feedgpu.UsageError, match="for text datasets only"):
        bench_spec(str(image_data), spec=spec, overrides={"max_length": 64})
    with pytest.raises(feedgpu.UsageError, match="for image datasets only"):
        bench_input(str(text_data), BenchOptions(overrides={"image_size": (8, 8)}, **QUICK))
    moved = bench_spec(str(image_data), spec=spec.with_changes(data_dir="elsewhere"))
    assert moved.data_dir == str(image_data)


def _naive(files: list[str], labels: list[int], size: int) -> tf.data.Dataset:
    """What a first script does: one file at a time, decoded in Python, no prefetch."""
    from PIL import Image

    def load(path: bytes) -> np.ndarray:
        with Image.open(path.decode()) as img:
            return np.asarray(img.convert("RGB").resize((size, size)), np.uint8)

    def pixels(path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        img = tf.numpy_function(load, [path], tf.uint8)
        return tf.ensure_shape(img, [size, size, 3]), label

    ds = tf.data.Dataset.from_tensor_slices((files, labels)).repeat()
    return ds.map(pixels).batch(8, drop_remainder=True)


def test_side_by_side_builds_feedgpus_batches_like_yours_against_one_ceiling(
    tmp_path: Path, image_data: Path
) -> None:
    files = sorted(str(p) for p in image_data.parent.glob("src/*/*.jpg"))
    labels = [i % 3 for i in range(len(files))]
    model = _model(tmp_path / "m.keras", size=32)
    report = bench_input(
        str(image_data),
        BenchOptions(model=model, **QUICK),
        dataset=_naive(files, labels, 32),
        setup=resolve_devices(DeviceConfig(xla="off")),
    )
    ours = report.compared
    assert ours is not None
    assert (
        report.ran_with
        == ours.ran_with
        == {"image_size": (32, 32), "dtype": "uint8", "batch_size": 8}
    )
    # which is faster is benchmarks/bench_fidelity.py's to measure; both were measured
    assert ours.pipeline_examples_per_s > 0 and report.pipeline.examples_per_s > 0
    assert ours.examples_per_s > 0 and report.end_to_end.examples_per_s > 0
    text = render_report(report)
    assert text.count("one compute ceiling") == 1 and "both at 32x32 uint8, batch 8" in text


FOREIGN = ("UserWarning", "WARNING:tensorflow", "Skipping variable loading", "retracing",
           "structure of inputs", "doesn't match")  # fmt: skip


def test_a_model_run_prints_only_feedgpus_lines(
    tmp_path: Path,
    text_data: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = keras.Input((None,), dtype="int32", name="input_ids")  # one input of a dict's two
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(400, 8)(ids))
    model = keras.Model(ids, keras.layers.Dense(2)(x), name="one_input")
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.save(tmp_path / "t.keras")  # untrained: no optimizer state to load
    capfd.readouterr()
    # Python warnings and TensorFlow's logging reach the terminal by three roads; pytest
    # intercepts two of them, so each is watched here.
    caplog.set_level(logging.WARNING)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(
            ["bench-input", str(text_data), "--model", str(tmp_path / "t.keras"), "--text-mode",
             "bucket", "--max-length", "64", "--batch-size", "8", "--seconds", "0.4",
             "--ablation", "never", "--no-memory-growth", "--quiet"]
        )  # fmt: skip
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "verdict:" in out
    said = [*(out + err).splitlines(), *(str(w.message) for w in caught)]
    said += [r.getMessage() for r in caplog.records if not r.name.startswith("feedgpu")]
    found = [line for line in said if any(f in line for f in FOREIGN)]
    assert not found, found
