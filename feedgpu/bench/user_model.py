"""The user's own Keras model in bench-input: loaded, fitted to the dataset, and trained by its
own `train_step` (its loss, metrics and optimizer), so the numbers are about the real model.

A loaded model keeps what it was saved with (dtype policy, optimizer): bench-input options that
would change those are refused rather than silently ignored.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any

from feedgpu.bench.device import DeviceSetup
from feedgpu.bench.models import MODEL_SIZES
from feedgpu.errors import UsageError

logger = logging.getLogger(__name__)
# What a text batch can feed a model, by name (the dataset's features; label as the target).
TEXT_FEATURES = ("input_ids", "attention_mask", "segment_ids", "positions")


def is_user_model(model: Any) -> bool:
    """True for a Keras model object or a path, False for a built-in size."""
    return not (isinstance(model, str) and model in MODEL_SIZES)


def load_user_model(model: Any, setup: DeviceSetup) -> Any:
    """The model itself, or loaded from a `.keras` (or legacy `.h5`) file under the strategy.

    Raises:
        UsageError: no such file, Keras cannot load it, or it is not compiled.
    """
    if not isinstance(model, str):
        return check_compiled(model, f"model {getattr(model, 'name', '')}".strip())
    if not os.path.isfile(model):
        raise UsageError(
            f"--model {model}: no such file; give {', '.join(MODEL_SIZES)} or a model saved "
            "with model.save('model.keras')"
        )
    import keras

    try:
        with setup.strategy.scope(), warnings.catch_warnings():
            # A model saved before it trained has an optimizer without state; Keras warns it
            # skips loading it. The measurement starts the optimizer afresh either way.
            warnings.filterwarnings("ignore", "Skipping variable loading for optimizer")
            loaded = keras.saving.load_model(model)
    except Exception as e:  # Keras raises TypeError, ValueError and others, per cause
        full = " ".join(str(e).split())
        text = full[:200] or type(e).__name__
        hint = "check that it is a model saved with model.save('model.keras')"
        missing = re.search(r"Could not locate (?:class|function) '([^']+)'", full)
        if missing:
            text = f"it uses {missing.group(1)}, which is not registered"
        if missing or "custom" in full.lower() or "deserializ" in full:
            hint = (
                "register its custom layers with @keras.saving.register_keras_serializable() "
                "in a module and pass it with --import MODULE"
            )
        raise UsageError(f"--model {model}: Keras cannot load it ({text}); {hint}") from None
    return check_compiled(loaded, f"--model {model}")


def check_compiled(model: Any, where: str) -> Any:
    """The model, if compiled with an optimizer (its own train step is what is measured)."""
    if not getattr(model, "compiled", False) or getattr(model, "optimizer", None) is None:
        raise UsageError(
            f"{where}: the model is not compiled: call model.compile(optimizer=..., loss=...) "
            "before saving it (bench-input trains it with its own loss and optimizer)"
        )
    return model


@dataclass(frozen=True)
class ModelFit:
    """How batches feed the model.

    Attributes:
        kind: "image" or "text".
        names: the text features the model takes, in its input order (images: empty).
        dtypes: each input's dtype (batches are cast on the accelerator).
        overrides: PipelineSpec changes the model asks for (image size, text length).
    """

    kind: str
    names: tuple[str, ...]
    dtypes: tuple[str, ...]
    overrides: dict[str, Any]


def fit_model(
    model: Any, kind: str, pack_length: int | None = None, vocab_size: int | None = None
) -> ModelFit:
    """Match the model's inputs to a dataset of `kind` (text: ids below `vocab_size`).

    Raises:
        UsageError: one line naming what the model wants and what the dataset has.
    """
    inputs = _inputs(model)
    dtypes = tuple(str(getattr(t.dtype, "name", t.dtype)) for t in inputs)
    if kind == "image":
        shape = tuple(inputs[0].shape)
        if len(inputs) != 1 or len(shape) != 4 or shape[-1] not in (None, 3):
            raise UsageError(
                f"the model wants inputs {_describe(inputs)}; an image dataset gives one batch "
                "of RGB images, shape (batch, height, width, 3)"
            )
        overrides: dict[str, Any] = {}
        if shape[1] and shape[2]:
            overrides["image_size"] = (int(shape[1]), int(shape[2]))
        return ModelFit(kind, (), dtypes, overrides)
    names = tuple(t.name for t in inputs)
    if len(inputs) == 1 and names[0] not in TEXT_FEATURES:
        names = ("input_ids",)  # one unnamed input: the token ids
    missing = [n for n in names if n not in TEXT_FEATURES]
    if missing or any(len(tuple(t.shape)) != 2 for t in inputs):
        have = ", ".join(TEXT_FEATURES if pack_length else TEXT_FEATURES[:2])
        raise UsageError(
            f"the model wants inputs {_describe(inputs)}; the dataset gives {have} (batch, "
            "length) and label: name the model's keras.Input after them"
        )
    _check_vocabulary(model, vocab_size)
    length = next((t.shape[1] for t in inputs if t.shape[1]), None)
    overrides = {}
    if length and pack_length and int(length) != pack_length:
        raise UsageError(
            f"the model takes sequences of {length} tokens; this dataset is packed into "
            f"{pack_length}: re-convert with --pack {length}"
        )
    if length and not pack_length:
        overrides = {"max_length": int(length), "text_mode": "pad"}  # the model's one shape
    return ModelFit(kind, names, dtypes, overrides)


def _check_vocabulary(model: Any, vocab_size: int | None) -> None:
    """Refuse, in one line before anything runs, a model whose token embedding (its largest
    Embedding layer) holds fewer ids than the dataset's tokenizer makes: the first batch would
    otherwise fail deep in TensorFlow (`indices[28,6] = 11520 is not in [0, 8000)`)."""
    import keras

    from feedgpu.tf_private import all_layers

    if not vocab_size:
        return
    sizes = [
        int(layer.input_dim)
        for layer in all_layers(model)
        if isinstance(layer, keras.layers.Embedding)
    ]
    if sizes and max(sizes) < vocab_size:
        raise UsageError(
            f"the model's token embedding holds {max(sizes)} ids; this dataset's tokenizer makes "
            f"ids up to {vocab_size - 1}: use a model built for a vocabulary of {vocab_size}, or "
            "re-convert the text with the model's own tokenizer"
        )


def _inputs(model: Any) -> list[Any]:
    try:
        inputs = list(model.inputs or [])
    except (AttributeError, ValueError):
        inputs = []
    if not inputs:
        raise UsageError(
            f"model {model.name}: it declares no inputs (a subclassed model never called): "
            "build it from keras.Input, or call it once on a batch before saving it"
        )
    return inputs


def _describe(inputs: list[Any]) -> str:
    return ", ".join(f"{t.name} {tuple(t.shape)}" for t in inputs)


def model_xla(model: Any, setup: DeviceSetup) -> tuple[bool, str]:
    """Whether the model's train step compiles with XLA here, and why: as `model.fit` would
    run it (the model's own `jit_compile`, which Keras resolved when it was compiled and keeps
    when saved; "auto" resolved off under tf.distribute), unless `--xla on|off` says otherwise."""
    if setup.xla_rule in ("on", "off"):
        return setup.xla_rule == "on", f"--xla {setup.xla_rule}"
    own = bool(getattr(model, "jit_compile", False))
    return own, f"the model's jit_compile={own}"


def make_model_step(model: Any, fit: ModelFit, setup: DeviceSetup) -> FallbackStep:
    """A callable: the batches of one execution in, that many steps of the model's own
    `train_step`, the last loss out; as `model.fit` runs it (its XLA setting, its
    `steps_per_execution` batches a call). A model that does not compile with XLA falls back
    to no XLA, and `note` says so.

    Unlabelled text trains on its own ids as the targets (`y = input_ids`), what a language
    model's or a masked-LM's loss takes.
    """
    import tensorflow as tf

    def to_model(batch: Any) -> tuple[Any, Any]:
        features, labels = batch if isinstance(batch, tuple) else (batch, None)
        if fit.kind == "image":
            x = tf.cast(features, fit.dtypes[0])
        else:
            # only the inputs the model takes: a dict with more keys than it declares makes
            # Keras warn that the structure of its inputs does not match
            cast = [tf.cast(features[n], d) for n, d in zip(fit.names, fit.dtypes, strict=True)]
            x = cast[0] if len(cast) == 1 else dict(zip(fit.names, cast, strict=True))
        return x, labels if labels is not None else features["input_ids"]

    def one(batch: Any) -> Any:
        logs = model.train_step(to_model(batch))
        loss = logs.get("loss") if isinstance(logs, dict) else None
        return tf.constant(0.0) if loss is None else tf.cast(loss, tf.float32)

    xla, why = model_xla(model, setup)
    per_call = max(1, int(getattr(model, "steps_per_execution", 1) or 1))
    if setup.distributed:

        def replicated(batch: Any) -> Any:
            losses = setup.strategy.run(one, args=(batch,))
            return setup.strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

        return FallbackStep(replicated, xla, why, per_call)
    return FallbackStep(one, xla, why, per_call)


class FallbackStep:
    """`fn` compiled as Keras compiles a train step (a tf.function with the model's XLA
    setting and reduce_retracing, so text buckets trace without retracing warnings), run
    `batches_per_call` batches a call as `steps_per_execution` runs them; with XLA until a
    compilation fails, then without it.

    Attributes:
        xla: whether the step now runs with XLA.
        xla_reason: why XLA is on or off.
        batches_per_call: batches each call trains on (the model's steps_per_execution).
        note: set when XLA had to be dropped.
    """

    def __init__(self, fn: Any, xla: bool, xla_reason: str, batches_per_call: int = 1) -> None:
        self.fn, self.xla, self.xla_reason = fn, xla, xla_reason
        self.batches_per_call = batches_per_call
        self.note: str | None = None
        self.compiled = self._compile(xla)

    def _compile(self, xla: bool) -> Any:
        import tensorflow as tf

        # Keras's train_function has this shape: an outer function without XLA calling the
        # step compiled with the model's jit_compile, once per batch of the execution; a
        # step compiled alone would skip the call between the two (measurable on short steps).
        one = tf.function(self.fn, jit_compile=xla, reduce_retracing=True)
        per_call = self.batches_per_call

        def execution(batches: Any) -> Any:
            if per_call == 1:
                return one(batches)
            loss = None
            for batch in batches:  # one traced call of the compiled step per batch
                loss = one(batch)
            return loss

        return tf.function(execution, reduce_retracing=True)

    def __call__(self, batch: Any) -> Any:
        import tensorflow as tf

        try:
            return self.compiled(batch)
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as e:
            if not self.xla:
                raise
            first = " ".join(str(e).split())[:160]
            self.note = (
                f"the model's train step does not compile with XLA ({first}): measured without"
            )
            logger.warning(self.note)
            self.xla, self.xla_reason = False, "it does not compile with XLA"
            self.compiled = self._compile(False)
            return self.compiled(batch)

    def compiled_as(self, xla: bool) -> FallbackStep:
        """The same step compiled with or without XLA (to compare the two on this host)."""
        return FallbackStep(self.fn, xla, "compared", self.batches_per_call)
