"""Accelerator set-up: GPU memory policy, mixed precision, XLA and the distribution strategy.

The seeds' advice, made safe: memory growth (or a hard limit) must be set before TensorFlow
creates its first tensor, so `setup_devices` checks that and says so in one line instead of
TensorFlow's RuntimeError; precision, XLA and strategy are resolved for the hardware found, and
fall back to float32 on one CPU when there is no GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from feedgpu.errors import DeviceSetupError, UsageError

logger = logging.getLogger(__name__)
PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
STRATEGIES = ("auto", "default", "mirrored", "multi_worker")
XLA_CHOICES = ("auto", "on", "off")


@dataclass(frozen=True)
class DeviceConfig:
    """What the user asks of the accelerators.

    Attributes:
        memory_growth: let each GPU's memory grow on demand instead of taking it all at start
            (other processes, e.g. a second experiment or TensorBoard, can share the GPU).
        memory_limit_mb: instead, a hard per-GPU limit (one logical device of this size).
        precision: "auto" picks mixed_float16 on GPUs of compute capability 7.0 or newer
            (tensor cores), mixed_bfloat16 on CPUs with AMX bfloat16 units, float32
            elsewhere; or name a Keras dtype policy explicitly.
        xla: compile the train step with XLA (`jit_compile=True`): "on", "off", or "auto":
            the built-in models on a GPU (off on CPU-only hosts, as Keras's own "auto": a
            minute-long compile for a short CPU run), your own model as it was compiled (its
            `jit_compile`, which Keras resolves when compiling).
            True and False mean "on" and "off".
        strategy: "auto" mirrors over several GPUs and uses the default strategy otherwise;
            "multi_worker" is MultiWorkerMirroredStrategy over the hosts TF_CONFIG names.
    """

    memory_growth: bool = True
    memory_limit_mb: int | None = None
    precision: str = "auto"
    xla: str | bool = "auto"
    strategy: str = "auto"

    def __post_init__(self) -> None:
        if isinstance(self.xla, bool):
            object.__setattr__(self, "xla", "on" if self.xla else "off")
        if self.xla not in XLA_CHOICES:
            raise UsageError(f"xla {self.xla!r}: choose one of {', '.join(XLA_CHOICES)}")
        if self.precision not in PRECISIONS:
            raise UsageError(f"precision {self.precision!r}: choose one of {', '.join(PRECISIONS)}")
        if self.strategy not in STRATEGIES:
            raise UsageError(f"strategy {self.strategy!r}: choose one of {', '.join(STRATEGIES)}")
        if self.memory_limit_mb is not None and self.memory_limit_mb < 1:
            raise UsageError(f"memory_limit_mb {self.memory_limit_mb}: must be at least 1")


@dataclass(frozen=True)
class DeviceSetup:
    """The devices found and the decisions taken for them.

    Attributes:
        device_type: "GPU" or "CPU": where the model runs.
        gpus: names of the GPUs found (empty on a CPU-only host).
        compute_capability: of the first GPU, (major, minor), when TensorFlow reports it.
        precision: the Keras dtype policy models should use.
        xla: whether the built-in models' train step is compiled with XLA.
        strategy: the `tf.distribute.Strategy` to build models and input under.
        notes: what was not applied and why (e.g. memory growth with no GPU).
        xla_rule: what was asked ("auto", "on", "off"): a loaded model's own setting decides
            under "auto".
    """

    device_type: str
    gpus: tuple[str, ...]
    compute_capability: tuple[int, int] | None
    precision: str
    xla: bool
    strategy: Any
    notes: tuple[str, ...] = ()
    xla_rule: str = "auto"

    @property
    def num_replicas(self) -> int:
        return int(self.strategy.num_replicas_in_sync)

    @property
    def distributed(self) -> bool:
        """Whether a real tf.distribute strategy (not the default) holds the model and input."""
        import tensorflow as tf

        return self.strategy is not tf.distribute.get_strategy()

    def to_json(self) -> dict[str, Any]:
        return {
            "device_type": self.device_type,
            "gpus": list(self.gpus),
            "compute_capability": list(self.compute_capability)
            if self.compute_capability
            else None,
            "precision": self.precision,
            "xla": self.xla,
            "xla_rule": self.xla_rule,
            "strategy": type(self.strategy).__name__,
            "num_replicas": self.num_replicas,
            "notes": list(self.notes),
        }


def tensorflow_initialized() -> bool:
    """Whether TensorFlow has created its runtime (after which devices cannot be changed)."""
    from feedgpu.tf_private import runtime_initialized

    return runtime_initialized()


def setup_devices(config: DeviceConfig | None = None) -> DeviceSetup:
    """Apply the GPU memory policy, then resolve precision, XLA and strategy.

    Call it first, before any tensor exists. It checks that on every host, a CPU-only one
    included, so a script that works on a laptop does not fail only on the GPU cluster.

    Raises:
        DeviceSetupError: TensorFlow already initialised its devices.
    """
    import tensorflow as tf

    config = config or DeviceConfig()
    if (config.memory_growth or config.memory_limit_mb) and tensorflow_initialized():
        raise DeviceSetupError(
            "GPU memory settings must be applied before TensorFlow creates its first tensor, "
            "and it already has: call feedgpu.setup_devices() at the start of the program "
            "(or use resolve_devices() to keep the current settings)"
        )
    notes = []
    gpus = tf.config.list_physical_devices("GPU")
    try:
        for gpu in gpus:
            if config.memory_limit_mb:
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=config.memory_limit_mb)]
                )
            elif config.memory_growth:
                tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as e:  # initialised by another thread between the check and here
        raise DeviceSetupError(f"GPU memory settings could not be applied: {e}") from e
    if not gpus and (config.memory_limit_mb or config.memory_growth):
        notes.append("no GPU: memory growth and limits do not apply")
    return resolve_devices(config, notes=tuple(notes))


def resolve_devices(config: DeviceConfig | None = None, notes: tuple[str, ...] = ()) -> DeviceSetup:
    """Precision, XLA and strategy for the devices TensorFlow sees. Changes no device setting;
    a multi-worker strategy starts this worker's collectives (and its server for the others)."""
    import tensorflow as tf

    config = config or DeviceConfig()
    notes_list = list(notes)
    # Collective ops are configured when the runtime starts, and listing logical devices
    # starts it: the multi-worker strategy is made first.
    strategy = _multi_worker_strategy() if config.strategy == "multi_worker" else None
    gpus = tf.config.list_logical_devices("GPU")
    capability = None
    if gpus:
        details = tf.config.experimental.get_device_details(
            tf.config.list_physical_devices("GPU")[0]
        )
        capability = details.get("compute_capability")
    precision, note = choose_precision(
        config.precision,
        has_gpu=bool(gpus),
        compute_capability=tuple(capability) if capability else None,
        cpu_has_amx=not gpus and config.precision == "auto" and _cpu_has_amx_bf16(),
    )
    if note:
        notes_list.append(note)
    if strategy is None and (
        config.strategy == "mirrored" or (config.strategy == "auto" and len(gpus) > 1)
    ):
        strategy = tf.distribute.MirroredStrategy()
    elif strategy is None:
        strategy = tf.distribute.get_strategy()
    return DeviceSetup(
        device_type="GPU" if gpus else "CPU",
        gpus=tuple(g.name for g in gpus),
        compute_capability=tuple(capability) if capability else None,
        precision=precision,
        xla=config.xla == "on" or (config.xla == "auto" and bool(gpus)),
        strategy=strategy,
        notes=tuple(notes_list),
        xla_rule=str(config.xla),
    )


def workers_agree(setup: DeviceSetup) -> Callable[[bool], bool] | None:
    """For a strategy over several worker processes: a function from "this worker would stop"
    to "some worker stops", decided by an all-reduce so that every worker stops at the same
    step (a timed loop left alone to its own clock would leave one worker waiting for the
    others' collectives forever). None on one worker."""
    import tensorflow as tf

    resolver = getattr(setup.strategy, "cluster_resolver", None)
    cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if len(cluster.get("worker", [])) + len(cluster.get("chief", [])) < 2:
        return None
    strategy = setup.strategy

    @tf.function
    def stops(flag: Any) -> Any:
        votes = strategy.run(lambda f: tf.cast(f, tf.int32), args=(flag,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, votes, axis=None) > 0

    return lambda stop: bool(stops(tf.constant(stop)))


def _multi_worker_strategy() -> Any:
    """MultiWorkerMirroredStrategy over the hosts TF_CONFIG names (one worker when unset).

    Raises:
        DeviceSetupError: TensorFlow's runtime already started, or TF_CONFIG is not valid.
    """
    import tensorflow as tf

    try:
        return tf.distribute.MultiWorkerMirroredStrategy()
    except (RuntimeError, ValueError) as e:
        started = tensorflow_initialized()
        raise DeviceSetupError(
            "MultiWorkerMirroredStrategy must be made before TensorFlow's runtime starts: "
            "call feedgpu.setup_devices(DeviceConfig(strategy='multi_worker')) first in the "
            "program, before any tensor"
            if started
            else f"MultiWorkerMirroredStrategy: TF_CONFIG is not valid ({str(e).splitlines()[0]})"
        ) from e


def choose_precision(
    requested: str,
    *,
    has_gpu: bool,
    compute_capability: tuple[int, ...] | None,
    cpu_has_amx: bool,
) -> tuple[str, str | None]:
    """The Keras dtype policy for the hardware found, and a note saying why (or None).

    "auto": mixed_float16 on GPUs with tensor cores (compute capability 7.0 or newer),
    mixed_bfloat16 on a CPU with AMX bfloat16 units (its fast matmul path), float32 elsewhere.
    A pure rule of what was detected, so each branch is tested without the hardware.
    """
    if requested != "auto":
        if requested != "float32" and not has_gpu:
            return requested, f"{requested} on CPU: correct, but usually slower than float32"
        return requested, None
    if has_gpu and compute_capability and tuple(compute_capability) >= (7, 0):
        return "mixed_float16", None  # tensor cores: float16 matmuls with float32 weights
    if has_gpu:
        return "float32", f"float32: compute capability {compute_capability} has no tensor cores"
    if cpu_has_amx:
        return "mixed_bfloat16", "mixed_bfloat16: this CPU has AMX bfloat16 units"
    return "float32", "float32: no GPU, and this CPU has no AMX bfloat16 units"


def _cpu_has_amx_bf16() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return any(line.startswith("flags") and " amx_bf16" in line for line in f)
    except OSError:
        return False
