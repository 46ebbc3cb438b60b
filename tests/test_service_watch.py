"""A tf.data service worker killed under a training loop: the stall names it, a restarted worker
ends the stall, and a guarded loop ends with exit code 75 instead of waiting for ever. Real
processes: a dispatcher and two workers (`feedgpu serve`), a trainer, `kill -9`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import sample_image_dataset, serve_process

import feedgpu
from feedgpu.pipeline.service import start_dispatcher, start_worker
from feedgpu.pipeline.service_watch import ServiceWatch, answers, service_workers

# The trainer: a service pipeline whose epoch ends, read slowly, its watch armed with short
# limits; it prints each batch, then "done" with the images it saw.
TRAINER = """
import sys, time
import feedgpu
from feedgpu.pipeline.service_watch import watch_for
data, service, stall, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
spec = feedgpu.PipelineSpec.for_dataset(data, batch_size=4, image_size=(32, 32))
spec = spec.with_changes(service=service)
watch = watch_for(service)
watch.stall_s, watch.timeout_s = stall, timeout
watch.arm()
seen = 0
for images, labels in feedgpu.build_pipeline(spec):
    seen += int(images.shape[0])
    print("batch", seen, flush=True)
    time.sleep(0.05)
print("done", seen, flush=True)
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    return sample_image_dataset(tmp_path_factory.mktemp("watch"), 40, (40, 32))


def serve(*args: str) -> tuple[subprocess.Popen, str]:
    """A `feedgpu serve` process and the address it prints."""
    proc, line = serve_process(*args)
    assert " serving at " in line, line
    return proc, line.rsplit(" ", 1)[1]  # type: ignore[return-value]


@pytest.fixture
def service() -> Iterator[tuple[str, list]]:
    """A dispatcher and two workers, each a process: the dispatcher's address and the
    workers (process, address)."""
    dispatcher, address = serve("dispatcher", "--port", "0")
    workers = [serve("worker", "--dispatcher", address) for _ in range(2)]
    yield address, workers
    for proc, _ in [*workers, (dispatcher, address)]:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def trainer(data: str, address: str, stall: float, timeout: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", TRAINER, data, address, str(stall), str(timeout)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )


def read_until(proc: subprocess.Popen, stream: str, want: str, limit_s: float = 240) -> list[str]:
    """Lines of the trainer's stdout or stderr up to the first holding want."""
    timer = threading.Timer(limit_s, proc.kill)  # never a hang: a killed trainer fails below
    timer.start()
    lines: list[str] = []
    try:
        for line in getattr(proc, stream):
            lines.append(line)
            if want in line:
                return lines
    finally:
        timer.cancel()
    raise AssertionError(f"{want!r} never came: {''.join(lines[-20:])}")


def test_the_dispatcher_lists_its_workers_and_a_stopped_one_is_silent() -> None:
    dispatcher = start_dispatcher()
    workers = [start_worker(dispatcher.address) for _ in range(2)]
    try:
        listed = service_workers(dispatcher.address)
        assert sorted(listed) == sorted(w.address for w in workers)
        assert all(answers(w) for w in listed)
        workers[0].stop()
        assert not answers(workers[0].address) and answers(workers[1].address)
    finally:
        workers[1].stop()
        dispatcher.stop()
    with pytest.raises(OSError, match="dispatcher"):
        service_workers(dispatcher.address, timeout_s=2)


def test_a_stall_without_a_silent_worker_is_not_the_services() -> None:
    """A loop that stops reading (a slow step, evaluation) with every worker answering says
    nothing and never ends the process; a silent worker is named."""
    dispatcher = start_dispatcher()
    worker = start_worker(dispatcher.address)
    ended: list[str] = []
    watch = ServiceWatch(dispatcher.address, stall_s=0.0, timeout_s=0.0, on_timeout=ended.append)
    try:
        watch.arm()
        assert watch.check() is None and not ended
        worker.stop()
        said = watch.check()
        assert said is not None and worker.address in said and "--port" in said
        assert ended and worker.address in ended[0]
        watch.arm(False)  # first: the watch's own thread checks too
        ended.clear()
        watch.check()
        assert not ended  # disarmed: said, never ended
    finally:
        dispatcher.stop()


def trainer_and_killed_worker(data: str, service, timeout: float) -> tuple[Any, str]:
    """A trainer under way (20 images read), then one of its two workers killed: the trainer
    and the killed worker's address."""
    address, workers = service
    proc = trainer(data, address, stall=2, timeout=timeout)
    read_until(proc, "stdout", "batch 20")
    (worker, killed), _ = workers
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    return proc, killed


def test_a_killed_worker_is_named_and_a_guarded_loop_ends_with_75(data: str, service) -> None:
    proc, killed = trainer_and_killed_worker(data, service, timeout=8)
    err = "".join(read_until(proc, "stderr", "gave up"))
    assert proc.wait(timeout=120) == 75
    assert f"{killed} stopped answering" in err and f"--port {killed.rsplit(':', 1)[1]}" in err


def test_a_worker_restarted_at_its_address_ends_the_stall(data: str, service) -> None:
    address, workers = service
    proc, killed = trainer_and_killed_worker(data, service, timeout=600)
    read_until(proc, "stderr", f"{killed} stopped answering")  # said, still waiting
    port = killed.rsplit(":", 1)[1]
    workers.append(serve("worker", "--dispatcher", address, "--port", port))
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    assert "done" in out


def test_service_guard_lets_the_watch_end_only_a_step_of_a_running_fit(data: str) -> None:
    """Waiting only inside a training step of a `fit` that runs (its batches counted through
    Keras): not between steps, not in evaluation, not after `fit`, never for `evaluate`."""
    import keras

    from feedgpu.pipeline.service_watch import watch_for

    dispatcher = start_dispatcher()
    worker = start_worker(dispatcher.address)
    try:
        spec = feedgpu.PipelineSpec.for_dataset(data, batch_size=8, image_size=(32, 32))
        spec = spec.with_changes(service=dispatcher.address)
        model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten()])
        model.add(keras.layers.Dense(3))
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        watch = watch_for(dispatcher.address)
        seen: list[tuple[str, bool]] = []

        class Seen(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
                seen.append(("step", watch._waiting()))

            def on_epoch_end(self, epoch: int, logs: object = None) -> None:
                seen.append(("between", watch._waiting()))

            def on_test_batch_end(self, batch: int, logs: object = None) -> None:
                seen.append(("test", watch._waiting()))

        guard = feedgpu.ServiceGuard(dispatcher.address)
        local = feedgpu.build_pipeline(spec.with_changes(service=None))
        ds = feedgpu.build_pipeline(spec)
        model.fit(ds, epochs=1, verbose=0, callbacks=[guard, Seen()], validation_data=local)
        assert {w for kind, w in seen if kind == "step"} == {True}
        assert {w for kind, w in seen if kind != "step"} == {False} and not watch._waiting()
        assert watch.batches == 15  # 120 images, batches of 8, each counted once
        seen.clear()
        model.evaluate(local, verbose=0, callbacks=[guard, Seen()])
        assert {w for _, w in seen} == {False} and not watch._waiting()
    finally:
        worker.stop()
        dispatcher.stop()
