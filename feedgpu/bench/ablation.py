"""Which input stage costs most: each made free in turn, and each setting worth trying, measured.

Stages are made free one at a time (`measure_hooks.StageChanges`) and the pipeline's rate
measured alone; a stage's cost is the host time per example that making it free saves. Reading
and parsing nest ("parse" free means the parsed examples repeat from memory, so reading is free
too): parse's own cost is the difference between the two. Settings (cache, determinism) are
real spec changes, so the best of them is a spec the user can keep.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from feedgpu.bench.records import AblationResult, AblationRow
from feedgpu.pipeline.measure_hooks import SKIPPABLE_STAGES, StageChanges
from feedgpu.pipeline.spec import PipelineSpec, fits_memory_cache

if TYPE_CHECKING:
    from feedgpu.bench.records import PipelineRate

# A stage is named only if making it free saves at least this share of the host time.
MIN_SHARE_NAMED = 0.10
# A setting replaces the measured spec only if it is at least this much faster (noise guard).
MIN_SPEEDUP_KEPT = 1.15

ADVICE = {
    "read": "reading shard files costs most: put the shards on local SSD, raise cycle_length, "
    "or cache='memory' when the split fits in RAM",
    "parse": "parsing records costs most: cache='memory' (it caches parsed examples), or store "
    "fewer features",
    "decode": "JPEG decoding costs most: add host cores / tf.data service workers",
    "augment": "augmentation costs most: move it into the model (Keras preprocessing layers run "
    "on the accelerator) or make it simpler",
}


def decode_advice(model_px: int, stored_px: int | None) -> str:
    """What to change when decoding costs most, with the sizes that decide it: re-converting
    smaller pays only while the stored images are well above the model's input."""
    if stored_px is not None and stored_px <= 1.5 * model_px:
        return (
            f"JPEG decoding costs most, with the images stored near the model's input already "
            f"({stored_px} px on the long side for {model_px} px): re-convert with a lower "
            "--quality, or add host cores / tf.data service workers"
        )
    stored = f"stored at up to {stored_px} px" if stored_px else "stored at full size"
    return (
        f"JPEG decoding costs most: re-convert with --max-size {model_px} (the images are "
        f"{stored}; decode cost grows with pixels), or add host cores / tf.data service workers"
    )


def setting_variants(spec: PipelineSpec, split_bytes: int) -> list[tuple[str, dict[str, Any]]]:
    """Spec changes worth measuring for this spec: each could be kept as is."""
    variants: list[tuple[str, dict[str, Any]]] = []
    if spec.cache is None and fits_memory_cache(split_bytes, spec.ram_budget_bytes):
        variants.append(("cache='memory'", {"cache": "memory"}))
    if spec.deterministic:
        variants.append(("deterministic=False", {"deterministic": False}))
    if not spec.autotune:  # off by default (see PipelineSpec); some hosts may gain from it
        variants.append(("autotune=True", {"autotune": True}))
    return variants


def run_ablation(
    spec: PipelineSpec,
    stages: StageChanges,
    measure: Callable[[PipelineSpec, StageChanges], PipelineRate],
    split_bytes: int,
    stored_px: int | None = None,
) -> AblationResult:
    """Measure the baseline, each free stage and each setting with `measure`.

    A variant whose spread overlaps the baseline's has no measurable effect: it is shown as
    such, never named the bottleneck, never kept as the best spec. A row's saving is wall time
    per example of the pipeline alone (1/rate before less 1/rate after), not CPU time: where
    the pipeline keeps less than a core busy it exceeds the capacity plan's CPU per example.
    stored_px: the images' longest stored side, for the decode advice.
    """
    first = measure(spec, stages)
    base, base_spread = first.examples_per_s, first.spread

    def differs(rate: PipelineRate) -> bool:
        if rate.spread is None or base_spread is None:
            return True
        return not rate.spread.overlaps(base_spread)

    rows: list[AblationRow] = []
    rates: dict[str, PipelineRate] = {}
    for stage in SKIPPABLE_STAGES[spec.kind]:
        if stage == "augment" and not spec.training:
            continue
        rates[stage] = measure(spec, StageChanges(stages.skip | {stage}, stages.delay_s))
    for stage, measured in rates.items():
        rate = measured.examples_per_s
        # "parse" free also frees reading: its own cost is measured against "read" free.
        before = rates["read"].examples_per_s if stage == "parse" and "read" in rates else base
        saved = 1000 * (1 / before - 1 / rate) if before and rate else 0.0
        label = "read+parse free" if stage == "parse" else f"{stage} free"
        speedup = rate / base if base else 0.0
        # Making a stage free cannot cost time: slower than before is noise, never a finding.
        found = differs(measured) and saved > 0
        rows.append(AblationRow(label, stage, rate, speedup, saved, measured.spread, found))
    best_spec, best_rate = spec, base
    for label, changes in setting_variants(spec, split_bytes):
        variant = spec.with_changes(**changes)
        measured = measure(variant, stages)
        rate = measured.examples_per_s
        speedup = rate / base if base else 0.0
        rows.append(
            AblationRow(label, None, rate, speedup, None, measured.spread, differs(measured))
        )
        if rate >= best_rate * MIN_SPEEDUP_KEPT and differs(measured):
            best_spec, best_rate = variant, rate
    host_ms = 1000 / base if base else 0.0
    costly = [r for r in rows if r.saved_ms_per_example is not None and r.measurable]
    top = max(costly, key=lambda r: r.saved_ms_per_example or 0.0, default=None)
    bottleneck = None
    advice: list[str] = []
    if top and host_ms and (top.saved_ms_per_example or 0.0) >= MIN_SHARE_NAMED * host_ms:
        bottleneck = top.stage
        share = (top.saved_ms_per_example or 0.0) / host_ms
        said = ADVICE[top.stage or ""]
        if top.stage == "decode":
            said = decode_advice(max(spec.image_size), stored_px)
        advice.append(f"{said} (it takes {share:.0%} of the pipeline's time)")
    for row in rows:
        if row.stage is None and row.measurable and row.speedup >= MIN_SPEEDUP_KEPT:
            advice.append(f"set {row.variant}: {row.speedup:.2f}x examples/s measured")
    if not advice:
        advice.append(
            "no single stage dominates: add host cores or tf.data service workers, "
            "or use a larger model per example"
        )
    return AblationResult(base, tuple(rows), bottleneck, tuple(advice), best_spec, base_spread)
