"""`FitBackup`: `model.fit` that survives a kill and resumes at the next batch, not the next epoch.

Keras's own `BackupAndRestore` restores the epoch and replays it from its first batch (and
`fit` takes no iterator to position), so the examples before the kill are seen twice in that
epoch and the weights have already learnt from them. FitBackup checkpoints the model, the
optimizer and an `InputPosition` together (`tf.train.Checkpoint`, written atomically by
`CheckpointManager`), and on restart builds the pipeline at the saved batch: the rest of the
interrupted epoch runs as one `fit` call, the later epochs as another, each with its exact
length, so Keras's progress bar, epoch numbers and `initial_epoch` all stay true.

Imports Keras and TensorFlow; reached only through lazy imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from feedgpu.errors import UsageError
from feedgpu.pipeline.build import build_pipeline
from feedgpu.pipeline.position import InputPosition

if TYPE_CHECKING:
    from feedgpu.pipeline.spec import PipelineSpec


class FitBackup(keras.callbacks.Callback):
    """Back up a `model.fit` run every `save_every` batches and at each epoch's end; `fit`
    resumes from the latest backup, at the batch after it.

    Usage::

        backup = feedgpu.FitBackup(spec, "/checkpoints/run1", save_every=200)
        history = backup.fit(model, epochs=10, validation_data=val)  # model built, compiled

    Run the same script again after a kill: it continues where the last backup was. The
    backups are kept when training ends (a finished run re-run trains nothing more); point a
    new run at a new directory.

    Attributes:
        position: where the run is in its input (epoch, step, batches).
        manager: the `tf.train.CheckpointManager` writing the backups (made by `fit`).
    """

    def __init__(
        self,
        spec: PipelineSpec,
        backup_dir: str,
        save_every: int = 100,
        keep: int = 2,
        input_context: Any = None,
    ) -> None:
        super().__init__()
        if spec.repeat:
            raise UsageError(
                "FitBackup runs Keras epochs as the data's epochs: build the spec with "
                "repeat=False (and no steps_per_epoch)"
            )
        for name, value in (("save_every", save_every), ("keep", keep)):
            if value < 1:
                raise UsageError(f"{name} {value}: must be at least 1")
        self.spec = spec
        self.backup_dir = backup_dir
        self.save_every = save_every
        self.keep = keep
        self.position = InputPosition(spec, input_context)
        self.dataset = build_pipeline(spec, input_context, position=self.position)
        self.manager: Any = None
        self._epoch_start = 0
        self._epoch_steps = self.position.batches_per_epoch
        self._saved_at = -1

    def fit(self, model: Any, epochs: int, **fit_kwargs: Any) -> Any:
        """`model.fit` over the spec's pipeline for `epochs` epochs in all, resumed from the
        latest backup if there is one; the Keras `History` of the epochs run now.

        Raises:
            UsageError: the model is not built (its weights must exist to restore), or the
                backup belongs to another seed, spec or dataset.
        """
        if not model.built:
            raise UsageError(
                "build the model before FitBackup.fit (call it on a batch, or give its first "
                "layer an input shape): its weights must exist to restore a backup into"
            )
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        checkpoint = tf.train.Checkpoint(
            model=model, optimizer=model.optimizer, input=self.position
        )
        self.manager = tf.train.CheckpointManager(checkpoint, self.backup_dir, self.keep)
        if self.manager.latest_checkpoint:
            checkpoint.restore(self.manager.latest_checkpoint).expect_partial()
        callbacks = [self, *fit_kwargs.pop("callbacks", [])]
        if not any(isinstance(c, keras.callbacks.ProgbarLogger) for c in callbacks):
            callbacks.append(_RunProgbar(epochs))  # "Epoch 2/4" for a resumed epoch too
        fit_kwargs.setdefault("shuffle", False)  # the pipeline shuffles; Keras would only warn
        count = self.position.batches_per_epoch
        epoch, step = self.position.epoch, self.position.step
        self._saved_at = self.position.batches
        say = print if fit_kwargs.get("verbose", "auto") != 0 else (lambda *a: None)
        if epoch >= epochs:
            say(f"FitBackup: already complete ({epochs} epochs, backups in {self.backup_dir})")
            history = keras.callbacks.History()
            history.set_model(model)
            history.epoch, history.history = [], {}  # as fit's own after no epoch
            return history
        if self.position.batches:
            say(
                f"FitBackup: resuming epoch {epoch + 1}/{epochs} at batch {step + 1} of {count} "
                f"(backup {self.manager.latest_checkpoint})"
            )
        runs = []
        if step:  # the rest of the interrupted epoch, as an epoch of its own
            self._epoch_steps = count - step
            rest = self.dataset.apply(tf.data.experimental.assert_cardinality(count - step))
            runs.append(
                model.fit(
                    rest, initial_epoch=epoch, epochs=epoch + 1, callbacks=callbacks, **fit_kwargs
                )
            )
            epoch += 1
        if epoch < epochs:
            self._epoch_steps = count
            whole = self.dataset.apply(tf.data.experimental.assert_cardinality(count))
            runs.append(
                model.fit(
                    whole, initial_epoch=epoch, epochs=epochs, callbacks=callbacks, **fit_kwargs
                )
            )
        history = runs[-1]
        for earlier in reversed(runs[:-1]):  # one History for the whole call, epochs in order
            history.epoch = earlier.epoch + history.epoch
            for name, values in earlier.history.items():
                history.history[name] = values + history.history.get(name, [])
        return history

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._epoch_start = self.position.batches

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        # `batch` is the last of the batches run (more than one with steps_per_execution), and
        # for an epoch's last, shorter execution Keras (3.15) still reports a whole one: at
        # most the epoch's length ran. A save is due when a multiple of save_every was passed
        # (with steps_per_execution=3 the count goes 3, 6, ... 99, 102: it may never equal 100).
        before = self.position.batches
        self.position.reset(self._epoch_start + min(batch + 1, self._epoch_steps))
        if self.position.batches // self.save_every > before // self.save_every:
            self._save()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.position.batches != self._saved_at:  # not just saved by the last batch
            self._save()

    def _save(self) -> None:
        if self.manager is None:
            raise UsageError("run training through FitBackup.fit(model, epochs), not model.fit")
        self.manager.save(checkpoint_number=self.position.batches)
        self._saved_at = self.position.batches


class _RunProgbar(keras.callbacks.ProgbarLogger):
    """Keras's progress bar with epochs numbered out of the run's `epochs=`: a resumed epoch's
    rest is fit on its own, which Keras alone would show as "Epoch 2/2"."""

    def __init__(self, epochs: int) -> None:
        super().__init__()
        self.run_epochs = epochs

    def set_params(self, params: dict[str, Any]) -> None:
        super().set_params({**params, "epochs": self.run_epochs})
