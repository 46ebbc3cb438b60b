"""How bench-input measures: BenchOptions, its fields checked one by one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from feedgpu.bench.user_model import is_user_model
from feedgpu.errors import UsageError
from feedgpu.pipeline.measure_hooks import StageChanges


@dataclass(frozen=True)
class BenchOptions:
    """How to measure.

    Attributes:
        split: the split to read.
        batch_size: global batch size (split over replicas).
        model: a built-in model size (small, medium or large), a saved Keras model's path
            (.keras), or a compiled keras.Model: measured with its own train step.
        training: measure the training pipeline (shuffle, augmentation).
        seconds: timed length of each phase (after warm-up), in ROUNDS rounds.
        max_seconds: cap on each phase's timed length when its MIN_STEPS steps take longer
            than `seconds` (default: 5 x seconds); the report says when it had to stop.
        accumulate: gradient accumulation micro-batches per step.
        ablation: "auto" (when input-bound), "always" or "never".
        ablation_seconds: timed length of each ablation variant.
        profile_dir: write a TensorBoard profiler trace of a window of steps here.
        profile_steps: steps in the profiled window.
        overrides: PipelineSpec fields to change from the automatic choices.
        stages: known delays to inject (measurement checks; see StageChanges).
        service_workers: tf.data service workers serving the pipeline (when the spec names a
            service), for the capacity plan's workers-needed estimate.
        quiet: no progress bars.
        report: write a report of the run here after measuring: an .html page (charts,
            the pipeline as built, the environment) or a .png of the main charts.
        trace_stages: after the timed phases, trace a fresh iterator to record each stage's
            parallelism and buffers as TensorFlow ran them (on with a report).
    """

    split: str = "train"
    batch_size: int = 32
    model: Any = "small"
    training: bool = True
    seconds: float = 10.0
    max_seconds: float | None = None
    accumulate: int = 1
    ablation: str = "auto"
    ablation_seconds: float = 3.0
    profile_dir: str | None = None
    profile_steps: int = 10
    overrides: dict[str, Any] = field(default_factory=dict)
    stages: StageChanges = field(default_factory=StageChanges)
    service_workers: int = 1
    quiet: bool = False
    report: str | None = None
    trace_stages: bool = False

    def __post_init__(self) -> None:
        if self.ablation not in ("auto", "always", "never"):
            raise UsageError(f"ablation {self.ablation!r}: choose auto, always or never")
        for name in ("seconds", "ablation_seconds"):
            if getattr(self, name) <= 0:
                raise UsageError(f"{name} {getattr(self, name)}: must be positive")
        if is_user_model(self.model) and self.accumulate != 1:
            raise UsageError(
                "accumulate: your model trains with its own train step, which has no gradient "
                "accumulation; drop --accumulate"
            )
        if self.max_seconds is not None and self.max_seconds < self.seconds:
            raise UsageError(
                f"max_seconds {self.max_seconds}: must be at least seconds ({self.seconds})"
            )
        if self.report is not None:
            from feedgpu.report import check_report_path

            check_report_path(self.report)  # said before anything is measured
        for name in ("batch_size", "accumulate", "service_workers"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} {getattr(self, name)}: must be at least 1")

    @property
    def records_stages(self) -> bool:
        """Whether the run records each stage's settings (asked for, or a report's)."""
        return self.trace_stages or self.report is not None

    @property
    def cap_seconds(self) -> float:
        return self.max_seconds if self.max_seconds is not None else 5 * self.seconds
