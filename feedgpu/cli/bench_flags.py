"""`feedgpu bench-input`'s flags (the other commands' are in parser.py)."""

from __future__ import annotations

from feedgpu.cli.flags import COMMAND, DEVICE, SPEC, Flag, action, switch, value

VERBOSE = switch(
    "--verbose", "also show TensorFlow's start-up lines and debug logs", target=COMMAND
)
# --no-xla, as before --xla took a value: writes "off" where --xla keeps its choice
NO_XLA = {"action": "store_const", "const": "off", "dest": "xla"}
BENCH = [
    value("data", "dataset written by feedgpu convert", metavar="DATA", nargs="?", target=COMMAND),
    value("--split", "split to read"),
    value("--batch-size", "global batch size", int),
    value(
        "--model",
        "built-in model size (small, medium, large) or your compiled model saved as .keras",
        metavar="SIZE|PATH",
    ),
    value(
        "--dataset-fn",
        "measure your own tf.data pipeline: MODULE:FUNCTION returning a batched Dataset "
        "(with DATA too: the two side by side)",
        metavar="MODULE:FUNCTION",
        target=COMMAND,
    ),
    value(
        "--import",
        "import MODULE first (registers your model's custom Keras layers)",
        action="append",
        metavar="MODULE",
        target=COMMAND,
        to="imports",
    ),
    switch("--training", "the training pipeline (shuffle, augmentation) or the evaluation one"),
    value("--seconds", "timed seconds per phase, after warm-up, in 5 rounds", float),
    value(
        "--max-seconds",
        "cap per phase when 20 steps take longer than --seconds (default 5x --seconds)",
        float,
    ),
    value("--accumulate", "gradient accumulation", int, metavar="K"),
    value(
        "--ablation",
        "make each stage free in turn: when input-bound (auto), always or never",
        choices=("auto", "always", "never"),
    ),
    value("--ablation-seconds", "seconds per variant", float),
    value(
        "--image-size",
        "square model input size",
        int,
        metavar="N",
        target=SPEC,
        convert=lambda n: (n, n),
    ),
    value("--max-length", "text sequence length", int, metavar="N", target=SPEC),
    value(
        "--text-mode",
        "text batching (default: auto)",
        choices=("pad", "bucket", "packed"),
        target=SPEC,
    ),
    value("--spec", "measure this saved PipelineSpec JSON", metavar="FILE", target=COMMAND),
    value(
        "--service",
        "run the pipeline on tf.data service workers (see feedgpu serve)",
        metavar="grpc://HOST:PORT",
        target=SPEC,
    ),
    value(
        "--service-mode",
        "each worker its own epochs, or one epoch split over the workers",
        choices=("parallel_epochs", "distributed_epoch"),
        target=SPEC,
    ),
    value(
        "--service-workers", "workers serving --service (for the capacity plan)", int, metavar="N"
    ),
    value(
        "--precision",
        "auto: mixed_float16 on tensor-core GPUs, mixed_bfloat16 on CPUs with AMX, float32 "
        "elsewhere",
        choices=("auto", "float32", "mixed_float16", "mixed_bfloat16"),
        target=DEVICE,
    ),
    value(
        "--xla",
        "compile the train step with XLA: auto (the built-in models on; your model as it was "
        "compiled, its jit_compile), on or off",
        choices=("auto", "on", "off"),
        target=DEVICE,
    ),
    Flag("--no-xla", "same as --xla off", DEVICE, "xla", None, NO_XLA),
    value(
        "--strategy",
        "auto: MirroredStrategy when there are several GPUs; multi_worker: "
        "MultiWorkerMirroredStrategy over the hosts in TF_CONFIG",
        choices=("auto", "default", "mirrored", "multi_worker"),
        target=DEVICE,
    ),
    switch("--memory-growth", "let GPU memory grow on demand", target=DEVICE),
    value("--memory-limit-mb", "hard per-GPU memory limit instead", int, target=DEVICE),
    value("--profile", "write a TensorBoard profile of 10 steps", metavar="DIR", to="profile_dir"),
    value("--json", "write the report as JSON (- for stdout)", metavar="FILE", target=COMMAND),
    value(
        "--report",
        "write a report a browser opens offline (.html: verdict, charts, the pipeline as "
        "built) or the main charts as one picture (.png); needs matplotlib",
        metavar="FILE",
    ),
    value(
        "--save-spec",
        "write the best measured PipelineSpec as JSON",
        metavar="FILE",
        target=COMMAND,
    ),
    value(
        "--inject-delay",
        "calibration: sleep MS per element at decode (per example), batch or stall "
        "(per batch, after prefetch) and watch the verdict respond",
        action="append",
        metavar="STAGE=MS",
        target=COMMAND,
    ),
    value(
        "--sample-per-class",
        "without DATA: images per class (4 classes) in the generated dataset",
        int,
        default=128,
        metavar="N",
        target=COMMAND,
    ),
    action("--print-schema", "print the JSON schema, exit"),
    switch("--quiet", "no progress bars or log lines", target=COMMAND),
    VERBOSE,
]
