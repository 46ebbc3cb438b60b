"""Stage changes that only measurement makes: a stage made free, or slowed by a known amount.

`bench-input` uses them to find the stage that costs most (ablation) and to check itself
(an injected delay must show up as the input wait it causes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from feedgpu.errors import UsageError

# Stages bench-input's ablation can make free, and where it can inject known delays.
SKIPPABLE_STAGES = {"image": ("read", "parse", "decode", "augment"), "text": ("read", "parse")}
DELAY_STAGES = ("decode", "batch", "stall")
# Records a "free" read or parse stage holds in memory and repeats.
HELD_RECORDS = 1024


@dataclass(frozen=True)
class StageChanges:
    """Changes only measurement makes: stages made free, or slowed by a known amount.

    bench-input's ablation replaces one stage at a time by a free stand-in (`skip`: "read"
    repeats HELD_RECORDS records held in memory, "parse" repeats parsed examples, "decode"
    yields blank images, "augment" takes the evaluation crop) to see which stage costs most;
    `delay_s` sleeps a known time per element of a stage ("decode": per example inside the
    parallel map, "batch": per batch before prefetch, "stall": per batch after prefetch, where
    nothing can hide it) to check that the measurement sees what was injected.
    """

    skip: frozenset[str] = frozenset()
    delay_s: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        known = set(SKIPPABLE_STAGES["image"])
        if not self.skip <= known:
            raise UsageError(f"unknown stage(s) {sorted(self.skip - known)}: use {sorted(known)}")
        for stage, seconds in self.delay_s:
            if stage not in DELAY_STAGES or seconds < 0:
                raise UsageError(f"delay {stage}={seconds}: stages {DELAY_STAGES}, seconds >= 0")

    def delay(self, stage: str) -> float:
        return sum(s for name, s in self.delay_s if name == stage)


def delayed(value: Any, seconds: float) -> Any:
    """`value`, available `seconds` later: a sleep that holds no CPU, and the GIL only to start
    and end (a delay runs late by as much as Python threads keep it waiting for the GIL)."""
    import time

    import tensorflow as tf

    if seconds <= 0:
        return value

    def nap() -> float:
        time.sleep(seconds)
        return 0.0

    done = tf.py_function(nap, [], tf.float32)
    with tf.control_dependencies([done]):
        return tf.nest.map_structure(tf.identity, value)


def sleep_elements(seconds: float, background: bool) -> Any:
    """A dataset transformation delaying each element by `seconds`.

    Where the consumer's own `next()` runs it (after the prefetch): TensorFlow's sleep dataset,
    in C++, exact whatever Python threads do. Where a background thread runs it (before the
    prefetch): a sleep inside a map function (`delayed`), since an iterator destroyed while a
    background thread is in the sleep dataset can deadlock in its cancellation (a measurement
    that never ends); a function's sleep only makes the destruction wait for its end.
    """
    if not background:
        from feedgpu.tf_private import sleep_dataset

        return sleep_dataset(seconds)

    import tensorflow as tf

    @tf.autograph.experimental.do_not_convert  # plain Python: nothing for AutoGraph to convert
    def late(*element: Any) -> Any:
        return delayed(element[0] if len(element) == 1 else element, seconds)

    def apply(ds: Any) -> Any:
        return ds.map(late)

    return apply
