"""Is the real training run fed? `FeedMonitor`, a Keras callback for `model.fit`, and
`watch_input`, the same measurement around steps of a custom training loop.

A window of steps is profiled (TensorFlow's profiler, read back in process by `trace`), and the
share of step time spent waiting for input is judged with bench-input's thresholds. Outside its
windows the callback does nothing but count: it is async-safe, so Keras never has to wait for
it between steps.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import keras

from feedgpu.bench.trace import KERAS_STEPS, InputWindow, read_window
from feedgpu.bench.xplane import ProfilerSession
from feedgpu.errors import UsageError

logger = logging.getLogger(__name__)


class FeedMonitor(keras.callbacks.Callback):
    """Measures input wait inside `model.fit`, a window of steps at a time; each window's
    trace is read (and its line printed) at the end of its epoch, between steps.

    Args:
        window: steps profiled per window.
        start: the step (in each epoch) a window starts at: after the first steps, which
            compile and fill the pipeline's buffers.
        every: a window every this many steps (counted over the run); None: one an epoch.
        batch_size: examples a step, for examples/s (omitted when not given).
        log_dir: also write TensorBoard scalars here (input share, step time, examples/s).
        keep_traces: keep the trace files (open them in TensorBoard's Profile tab) in
            trace_dir (default: a temporary folder, named in the log); else each window's
            trace is written to a temporary folder and removed once read.
        trace_dir: where kept traces go.
        verbose: print one line per window.
        report: at the end of `fit`, write a page of the windows here (.html, or the chart as
            a .png): input wait, examples/s and the verdict per window over the run.

    Attributes:
        windows: every window measured, in order (`InputWindow`).
    """

    async_safe = True  # Keras may run the batch hooks off the training thread: no sync

    def __init__(
        self,
        window: int = 10,
        start: int = 5,
        every: int | None = None,
        batch_size: int | None = None,
        log_dir: str | None = None,
        keep_traces: bool = False,
        trace_dir: str | None = None,
        verbose: int = 1,
        report: str | None = None,
    ) -> None:
        super().__init__()
        if report is not None:
            from feedgpu.report import check_report_path

            check_report_path(report)  # said now, not after the training
        for name, value, least in (("window", window, 1), ("start", start, 0)):
            if value < least:
                raise UsageError(f"FeedMonitor {name}={value}: must be at least {least}")
        if every is not None and every < window:
            raise UsageError(
                f"FeedMonitor every={every}: must be at least window={window} (or None: one "
                "window a run)"
            )
        self.window, self.start, self.every = window, start, every
        self.batch_size, self.log_dir = batch_size, log_dir
        self.trace_dir, self.keep_traces, self.verbose = trace_dir, keep_traces, verbose
        self.report = report
        self.windows: list[InputWindow] = []
        self._step = 0  # global steps run
        self._next_due = start
        self._epoch_done = False
        self._active: ProfilerSession | None = None
        self._unread: list[ProfilerSession] = []  # windows profiled, their traces not read yet
        self._writer: Any = None

    # -- Keras hooks -----------------------------------------------------------------------
    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self.log_dir:
            import tensorflow as tf

            self._writer = tf.summary.create_file_writer(self.log_dir)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch_done = False
        self._epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._active is not None or not self._due(batch):
            return
        trace_dir = self.trace_dir if self.keep_traces else None
        what = f"FeedMonitor, window at step {self._step}"
        self._active = ProfilerSession.begin(trace_dir, what, self._step, self._epoch)
        if self._active.skipped:
            self._active = None
            self._settle()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._step += self._per_call()
        if self._active is not None and self._step - self._active.first_step >= self.window:
            self._finish()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self._active is not None:  # an epoch shorter than the window: what it saw
            self._finish()
        self._read_traces()
        if logs is not None and self.windows:
            last = self.windows[-1]
            logs["input_share"] = last.input_share
            logs["input_steps_per_s"] = last.steps_per_s
            if last.examples_per_s is not None:
                logs["input_examples_per_s"] = last.examples_per_s

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self._active is not None:
            self._finish()
        self._read_traces()
        if self._writer is not None:
            self._writer.close()
        if self.report:
            from feedgpu.report import write_monitor_report

            name = getattr(self.model, "name", "model")
            write_monitor_report(self.report, [w.to_json() for w in self.windows], name)

    # -- windows ---------------------------------------------------------------------------
    def _per_call(self) -> int:
        return int(getattr(self.model, "steps_per_execution", 1) or 1)

    def _due(self, batch: int) -> bool:
        if self.every is None:
            return not self._epoch_done and batch >= self.start
        return self._step >= self._next_due

    def _settle(self) -> None:
        """The window is over (measured or skipped): when is the next one."""
        self._epoch_done = True
        if self.every is not None:
            self._next_due = self._step + self.every - self.window

    def _finish(self) -> None:
        """Stop the window's profiler; its trace is read at the epoch's end, between steps:
        read right away, on the hook's thread beside the next steps, it took their CPU
        (bench_monitor.py; benchmarks/RESULTS.md, "FeedMonitor")."""
        profiled, self._active = self._active, None
        assert profiled is not None
        profiled.stop()
        self._unread.append(profiled)
        self._settle()

    def _read_traces(self) -> None:
        unread, self._unread = self._unread, []
        for profiled in unread:
            found = profiled.read(lambda folder: read_window(folder, KERAS_STEPS), self.keep_traces)
            self._report(profiled, found)

    def _report(self, profiled: ProfilerSession, found: InputWindow | None) -> None:
        if found is None:
            logger.warning("FeedMonitor: the profiler recorded no training step in this window")
            return
        window = replace(
            found,
            examples_per_step=self.batch_size,
            first_step=profiled.first_step,
            epoch=profiled.epoch,
        )
        self.windows.append(window)
        if self.verbose:
            print(f"FeedMonitor: {window.line()}", flush=True)
        if self._writer is not None:
            scalars = {"input_share": window.input_share, "step_ms": window.step_ms}
            if window.examples_per_s is not None:
                scalars["examples_per_s"] = window.examples_per_s
            _write_scalars(self._writer, profiled.first_step, scalars)


def _write_scalars(writer: Any, step: int, scalars: dict[str, float]) -> None:
    """TensorBoard scalars under feedgpu/, written with TensorFlow's own summary op and the
    scalars plugin's metadata (what `tf.summary.scalar` writes, without needing the
    tensorboard package installed)."""
    import tensorflow as tf

    metadata = tf.compat.v1.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    with writer.as_default(step=step):
        for name, value in scalars.items():
            tf.summary.write(
                f"feedgpu/{name}",
                tf.constant(value, tf.float32),
                metadata=metadata,
            )
    writer.flush()


@dataclass
class InputWatch:
    """What `watch_input` measured, once its block has ended (`window`, or None)."""

    window: InputWindow | None = None


@contextlib.contextmanager
def watch_input(
    steps: int | None = None,
    batch_size: int | None = None,
    keep_trace: bool = False,
    trace_dir: str | None = None,
    verbose: bool = True,
) -> Iterator[InputWatch]:
    """Measure input wait over the training steps run inside the block (a custom loop).

    Every batch fetched in the block counts; its time is the block's. Run a few steps
    before it (compilation, filling buffers), then `steps` steps inside it.

        with feedgpu.watch_input(steps=20, batch_size=64) as watch:
            for batch in itertools.islice(batches, 20):
                train_step(batch)
        print(watch.window.input_share)
    """
    watch = InputWatch()
    profiled = ProfilerSession.begin(trace_dir if keep_trace else None, "watch_input")
    start = time.perf_counter()
    try:
        yield watch
    finally:
        if not profiled.skipped:
            wall = time.perf_counter() - start
            profiled.stop()
            found = profiled.read(lambda folder: read_window(folder, (), wall), keep_trace)
            if found is not None:
                counted = steps if steps is not None else found.steps
                watch.window = replace(found, steps=counted, examples_per_step=batch_size)
                if verbose:
                    print(f"watch_input: {watch.window.line()}", flush=True)
