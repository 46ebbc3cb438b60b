"""The `feedgpu` command: argument parsing and printing only; the work is in the library.

Nothing here imports TensorFlow at module load, so `feedgpu --help` answers at once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from feedgpu.errors import FeedgpuError, UsageError


class _Parser(argparse.ArgumentParser):
    """Usage errors become `UsageError`, printed like every other error: one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see: {self.prog} --help)")


def _common_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bar or log lines")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary on stdout")


def _conversion_options(p: argparse.ArgumentParser, *, workers: str) -> None:
    """Options every converter shares: splits, naming, sharding, parallelism, policy, output."""
    p.add_argument(
        "--split",
        metavar="SPEC",
        help="hash split when SRC has no split folders, e.g. train=0.9,validation=0.1",
    )
    p.add_argument("--name", help="dataset name (default: SRC's folder name)")
    p.add_argument("--shard-size-mb", type=float, default=128, help="target shard size")
    p.add_argument("--num-shards", type=int, help="shards per split (overrides --shard-size-mb)")
    p.add_argument("--seed", type=int, default=0, help="seed of the assignment to shards")
    p.add_argument("--workers", type=int, help=f"{workers} (default: all cores)")
    p.add_argument(
        "--runner",
        choices=("local", "beam"),
        default="local",
        help="local process pool, or the same shard tasks as an Apache Beam pipeline "
        "(same bytes; needs pip install 'feedgpu[beam]')",
    )
    p.add_argument(
        "--beam-options",
        metavar="FLAGS",
        help='Beam pipeline flags, e.g. "--runner=DataflowRunner --project=P --region=R" '
        "(default: DirectRunner on this machine)",
    )
    p.add_argument(
        "--strict",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="stop at the first bad input instead of skipping it",
    )
    p.add_argument(
        "--overwrite",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="replace a dataset in OUT that was made with other options",
    )
    _common_output(p)


def _build_parser() -> _Parser:
    parser = _Parser(
        prog="feedgpu",
        description="Keep accelerators fed: convert data to sharded TFRecords, check it, feed it.",
    )
    from feedgpu import __version__

    parser.add_argument("--version", action="version", version=f"feedgpu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    convert = sub.add_parser("convert", help="convert a folder into a sharded TFRecord dataset")
    kinds = convert.add_subparsers(dest="kind", required=True, parser_class=_Parser)
    images = kinds.add_parser(
        "images",
        help="image folder -> TFRecords",
        description="Convert SRC (class per sub-folder, optionally under train/validation/test, "
        "or a flat folder with --labels) into sharded TFRecords in OUT, readable by TFDS. "
        "Valid JPEGs are stored byte for byte; other images are normalised to RGB. "
        "Bad files are skipped with a reason in OUT/skipped.jsonl. Re-running the same "
        "command after a crash finishes the job.",
    )
    images.add_argument("src", metavar="SRC", help="folder of images")
    images.add_argument("out", metavar="OUT", help="output folder (local path or gs://...)")
    images.add_argument("--labels", metavar="FILE", help="CSV or JSONL with path and label columns")
    images.add_argument("--path-column", help="label file column holding the image path")
    images.add_argument("--label-column", help="label file column holding the class")
    images.add_argument(
        "--quality", type=int, default=95, help="JPEG quality for re-encoded images"
    )
    images.add_argument(
        "--lossless",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="re-encode non-JPEG images as PNG instead of JPEG",
    )
    images.add_argument(
        "--max-size", type=int, metavar="N", help="shrink the long side to N pixels"
    )
    images.add_argument(
        "--verify",
        choices=("fast", "full"),
        default="fast",
        help="validate JPEGs with a 1/8-scale decode (fast) or a full decode",
    )
    images.add_argument(
        "--max-pixels",
        type=int,
        default=None,
        help="skip larger images as decompression bombs (default: Pillow's limit)",
    )
    _conversion_options(images, workers="worker processes")
    images.set_defaults(func=_convert_images)

    text = kinds.add_parser(
        "text",
        help="text corpus -> pre-tokenized TFRecords",
        description="Tokenize SRC (a folder or glob of .txt/.jsonl files, gzip allowed; "
        "class folders optionally under train/validation/test) once, into sharded TFRecords of "
        "token ids in OUT, with the tokenizer saved beside them. Bad documents are skipped with "
        "a reason in OUT/skipped.jsonl. Re-running the same command after a crash finishes it.",
    )
    text.add_argument("src", metavar="SRC", help="folder or glob (quote it) of text files")
    text.add_argument("out", metavar="OUT", help="output folder")
    text.add_argument(
        "--tokenizer",
        required=True,
        metavar="SPEC",
        help="tokenizer.json, vocab.txt, or train:wordpiece:SIZE / train:bpe:SIZE",
    )
    text.add_argument(
        "--lowercase",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="lower-case and strip accents (vocab.txt and trained WordPiece)",
    )
    text.add_argument(
        "--doc-per-line",
        action="store_true",
        help="each line of a .txt file is a document (default: each file)",
    )
    text.add_argument("--text-field", default="text", help="JSON key of the text in .jsonl")
    text.add_argument("--label-field", help="JSON key of the label in .jsonl")
    text.add_argument(
        "--folder-labels",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="label documents by class folder (SRC/[SPLIT/]CLASS/*.txt)",
    )
    text.add_argument(
        "--encoding-errors",
        choices=("skip", "replace"),
        default="skip",
        help="documents that are not UTF-8: skip them, or replace bad bytes",
    )
    text.add_argument("--max-length", type=int, metavar="N", help="truncate examples to N ids")
    text.add_argument(
        "--stride",
        type=int,
        metavar="S",
        help="with --max-length: overlapping windows instead of truncation",
    )
    text.add_argument(
        "--pack",
        type=int,
        metavar="N",
        help="pack documents into sequences of N ids with segment_ids/positions",
    )
    text.add_argument(
        "--special",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="add the tokenizer's special tokens (CLS/SEP, BOS/EOS)",
    )
    text.add_argument(
        "--chunk-mb",
        type=float,
        default=32,
        help="input per resumable unit: a killed run redoes at most one chunk",
    )
    _conversion_options(text, workers="tokenizer threads")
    text.set_defaults(func=_convert_text)

    verify = sub.add_parser(
        "verify",
        help="re-read a dataset: CRCs, counts, optionally decode",
        description="Read every record of OUT (CRC checked) and compare "
        "with its manifest. Exit 1 if any problem is found.",
    )
    verify.add_argument("out", metavar="OUT", help="dataset folder")
    verify.add_argument(
        "--decode",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also decode every image",
    )
    _common_output(verify)
    verify.set_defaults(func=_verify)

    _bench_parser(sub)
    _serve_parser(sub)

    sample = sub.add_parser(
        "sample-images",
        help="write a generated sample image folder",
        description="Write DIR/CLASS/NNNNN.jpg photo-like images, to try "
        "feedgpu without data of your own.",
    )
    sample.add_argument("dir", metavar="DIR")
    sample.add_argument("--classes", type=int, default=4)
    sample.add_argument("--per-class", type=int, default=100)
    sample.add_argument("--seed", type=int, default=0)
    sample.set_defaults(func=_sample_images)
    return parser


def _bench_parser(sub: Any) -> None:
    bench = sub.add_parser(
        "bench-input",
        help="is the accelerator saturated by the input pipeline, and if not, why",
        description="Measure on DATA, in one run: the input pipeline alone, a synthetic model on "
        "resident batches (the compute ceiling) and the two together (step time and the share "
        "spent waiting for input). Judge saturated (< 5%% input wait), moderately (5-20%%) or "
        "highly (>= 20%%) input-bound, and when input-bound make each pipeline stage free in "
        "turn to name the one to fix. Without DATA, a generated sample image dataset is made "
        "in a temporary folder and measured.",
    )
    bench.add_argument("data", metavar="DATA", nargs="?", help="dataset written by feedgpu convert")
    bench.add_argument("--split", default="train", help="split to read")
    bench.add_argument("--batch-size", type=int, default=32, help="global batch size")
    bench.add_argument(
        "--model", choices=("small", "medium", "large"), default="small", help="model size"
    )
    bench.add_argument(
        "--training",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the training pipeline (shuffle, augmentation) or the evaluation one",
    )
    bench.add_argument(
        "--seconds", type=float, default=10, help="timed seconds per phase, after warm-up"
    )
    bench.add_argument(
        "--accumulate", type=int, default=1, metavar="K", help="gradient accumulation"
    )
    bench.add_argument(
        "--ablation",
        choices=("auto", "always", "never"),
        default="auto",
        help="make each stage free in turn: when input-bound (auto), always or never",
    )
    bench.add_argument("--ablation-seconds", type=float, default=3, help="seconds per variant")
    bench.add_argument("--image-size", type=int, metavar="N", help="square model input size")
    bench.add_argument("--max-length", type=int, metavar="N", help="text sequence length")
    bench.add_argument(
        "--text-mode", choices=("pad", "bucket", "packed"), help="text batching (default: auto)"
    )
    bench.add_argument("--spec", metavar="FILE", help="measure this saved PipelineSpec JSON")
    bench.add_argument(
        "--service",
        metavar="grpc://HOST:PORT",
        help="run the pipeline on tf.data service workers (see feedgpu serve)",
    )
    bench.add_argument(
        "--service-mode",
        choices=("parallel_epochs", "distributed_epoch"),
        help="each worker its own epochs, or one epoch split over the workers",
    )
    bench.add_argument(
        "--service-workers",
        type=int,
        default=1,
        metavar="N",
        help="workers serving --service (for the capacity plan)",
    )
    bench.add_argument(
        "--precision",
        choices=("auto", "float32", "mixed_float16", "mixed_bfloat16"),
        default="auto",
        help="auto: mixed_float16 on tensor-core GPUs, float32 on CPU",
    )
    bench.add_argument(
        "--xla", action=argparse.BooleanOptionalAction, default=True, help="jit_compile the step"
    )
    bench.add_argument(
        "--strategy",
        choices=("auto", "default", "mirrored", "multi_worker"),
        default="auto",
        help="auto: MirroredStrategy when there are several GPUs; multi_worker: "
        "MultiWorkerMirroredStrategy over the hosts in TF_CONFIG",
    )
    bench.add_argument(
        "--memory-growth",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="let GPU memory grow on demand",
    )
    bench.add_argument("--memory-limit-mb", type=int, help="hard per-GPU memory limit instead")
    bench.add_argument("--profile", metavar="DIR", help="write a TensorBoard profile of 10 steps")
    bench.add_argument("--json", metavar="FILE", help="write the report as JSON (- for stdout)")
    bench.add_argument(
        "--save-spec", metavar="FILE", help="write the best measured PipelineSpec as JSON"
    )
    bench.add_argument(
        "--inject-delay",
        action="append",
        default=[],
        metavar="STAGE=MS",
        help="calibration: sleep MS per element at decode (per example), batch or stall "
        "(per batch, after prefetch) and watch the verdict respond",
    )
    bench.add_argument(
        "--sample-per-class",
        type=int,
        default=128,
        metavar="N",
        help="without DATA: images per class (4 classes) in the generated dataset",
    )
    bench.add_argument("--print-schema", action="store_true", help="print the JSON schema, exit")
    bench.add_argument("--quiet", action="store_true", help="no progress bars or log lines")
    bench.set_defaults(func=_bench_input)


_NO_AUTH = (
    "The tf.data service has no authentication and TensorFlow listens on every interface: run "
    "it on a private network or behind a firewall. --host only sets the name it advertises."
)


def _serve_parser(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="run tf.data service servers (preprocessing on remote CPU workers)",
        description="Start a tf.data service dispatcher or worker and serve until SIGTERM or "
        "Ctrl-C. Trainers use it with PipelineSpec(service='grpc://HOST:PORT') or "
        "feedgpu bench-input DATA --service grpc://HOST:PORT. " + _NO_AUTH,
    )
    roles = serve.add_subparsers(dest="role", required=True, parser_class=_Parser)
    dispatcher = roles.add_parser(
        "dispatcher",
        help="the coordinator trainers and workers connect to",
        description="Start a dispatcher. " + _NO_AUTH,
    )
    dispatcher.add_argument("--port", type=int, default=5050, help="port to serve on (0: any)")
    dispatcher.add_argument(
        "--work-dir",
        metavar="DIR",
        help="journal state here (fault-tolerant: a restarted dispatcher resumes its jobs)",
    )
    dispatcher.add_argument("--host", default="localhost", help="name to advertise")
    dispatcher.set_defaults(func=_serve)
    worker = roles.add_parser(
        "worker",
        help="a CPU worker that runs input pipelines",
        description="Start a worker registered with DISPATCHER. Datasets are read by path: "
        "they must be at the same path here as on the trainer (shared FS or gs://). " + _NO_AUTH,
    )
    worker.add_argument("--dispatcher", required=True, metavar="HOST:PORT")
    worker.add_argument("--port", type=int, default=0, help="port to serve on (0: any)")
    worker.add_argument("--host", default="localhost", help="name to advertise")
    worker.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from feedgpu.pipeline.service import serve_until_signalled, start_dispatcher, start_worker

    if args.role == "dispatcher":
        server = start_dispatcher(args.port, work_dir=args.work_dir, host=args.host)
    else:
        server = start_worker(args.dispatcher, args.port, host=args.host)
    serve_until_signalled(
        server, lambda: print(f"feedgpu: {server.kind} serving at {server.address}", flush=True)
    )
    print(f"feedgpu: {server.kind} stopped", flush=True)
    return 0


def _setup_logging(quiet: bool) -> None:
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format="feedgpu: %(message)s",
        stream=sys.stderr,
    )


def _convert_images(args: argparse.Namespace) -> int:
    from feedgpu.converters.images import DEFAULT_MAX_PIXELS, ImageOptions, convert_images

    options = ImageOptions(
        quality=args.quality,
        lossless=args.lossless,
        max_size=args.max_size,
        verify=args.verify,
        max_pixels=args.max_pixels or DEFAULT_MAX_PIXELS,
        split=args.split,
        seed=args.seed,
        shard_size_mb=args.shard_size_mb,
        num_shards=args.num_shards,
        name=args.name,
    )
    _check_workers(args)
    report = convert_images(
        args.src,
        args.out,
        options,
        labels_file=args.labels,
        path_column=args.path_column,
        label_column=args.label_column,
        workers=args.workers,
        strict=args.strict,
        overwrite=args.overwrite,
        quiet=args.quiet or args.json,
        runner=args.runner,
        beam_options=args.beam_options,
    )
    rate = f"{report.to_json()['inputs_per_s']} files/s"
    return _print_conversion(args, report, f"{report.num_examples} images", rate, {})


def _convert_text(args: argparse.Namespace) -> int:
    from feedgpu.converters.text import TextOptions, convert_text
    from feedgpu.format.manifest import read_manifest

    options = TextOptions(
        tokenizer=args.tokenizer,
        lowercase=args.lowercase,
        doc_per_line=args.doc_per_line,
        text_field=args.text_field,
        label_field=args.label_field,
        folder_labels=args.folder_labels,
        encoding_errors=args.encoding_errors,
        max_length=args.max_length,
        stride=args.stride,
        pack=args.pack,
        special=args.special,
        split=args.split,
        seed=args.seed,
        shard_size_mb=args.shard_size_mb,
        num_shards=args.num_shards,
        name=args.name,
        chunk_mb=args.chunk_mb,
    )
    _check_workers(args)
    report = convert_text(
        args.src,
        args.out,
        options,
        workers=args.workers,
        strict=args.strict,
        overwrite=args.overwrite,
        quiet=args.quiet or args.json,
        runner=args.runner,
        beam_options=args.beam_options,
    )
    text = read_manifest(args.out).text
    tokens = text.tokens if text else 0
    rate = tokens / report.seconds / 1e6 if report.seconds else 0.0
    what = f"{report.num_examples} examples from {text.documents if text else 0} documents"
    extra = {"text": text.to_json() if text else {}}
    return _print_conversion(args, report, what, f"{rate:.2f} M tokens/s", extra)


def _check_workers(args: argparse.Namespace) -> None:
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers {args.workers}: must be at least 1")


def _print_conversion(
    args: argparse.Namespace, report: Any, what: str, rate: str, extra: dict[str, Any]
) -> int:
    """The conversion summary: JSON with --json, else two readable lines."""
    if args.json:
        _print_json({**report.to_json(), **extra})
    elif report.already_done:
        print(f"{args.out}: already converted with these options and inputs; nothing to do")
    else:
        splits = ", ".join(f"{k} {v}" for k, v in report.examples_by_split.items())
        print(
            f"wrote {what} ({splits}) in {report.num_shards} shards, "
            f"{report.num_bytes / 1e6:.1f} MB in {report.seconds:.1f} s ({rate})"
        )
        if report.num_skipped:
            reasons = ", ".join(f"{n} {r}" for r, n in report.skipped_by_reason.items())
            print(f"skipped {report.num_skipped} ({reasons}); see {args.out}/skipped.jsonl")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from feedgpu.format.verify import verify_dataset

    report = verify_dataset(args.out, decode=args.decode, quiet=args.quiet or args.json)
    if args.json:
        _print_json(report.to_json())
    else:
        for problem in report.problems:
            print(problem)
        status = "ok" if report.ok else f"{len(report.problems)} problem(s)"
        print(f"{args.out}: {report.num_records} records in {report.num_shards} shards: {status}")
    return 0 if report.ok else 1


def _sample_images(args: argparse.Namespace) -> int:
    from feedgpu.samples import write_sample_images

    n = write_sample_images(
        args.dir, num_classes=args.classes, images_per_class=args.per_class, seed=args.seed
    )
    print(f"wrote {n} images in {args.classes} class folders under {args.dir}")
    return 0


def _bench_input(args: argparse.Namespace) -> int:
    import os
    import tempfile

    if args.print_schema:
        from feedgpu.bench.report import BENCH_REPORT_SCHEMA

        _print_json(BENCH_REPORT_SCHEMA)
        return 0
    # TensorFlow's C++ start-up chatter would bury the table; TF_CPP_MIN_LOG_LEVEL wins if set.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from feedgpu.bench.device import DeviceConfig
    from feedgpu.bench.measure import BenchOptions, bench_input, make_default_dataset
    from feedgpu.bench.report import render_report
    from feedgpu.pipeline.spec import PipelineSpec
    from feedgpu.pipeline.stages import StageChanges

    overrides: dict[str, Any] = {}
    if args.image_size:
        overrides["image_size"] = (args.image_size, args.image_size)
    if args.max_length:
        overrides["max_length"] = args.max_length
    if args.text_mode:
        overrides["text_mode"] = args.text_mode
    if args.service:
        overrides["service"] = args.service
    if args.service_mode:
        overrides["service_mode"] = args.service_mode
    options = BenchOptions(
        split=args.split,
        batch_size=args.batch_size,
        model=args.model,
        training=args.training,
        seconds=args.seconds,
        accumulate=args.accumulate,
        ablation=args.ablation,
        ablation_seconds=args.ablation_seconds,
        profile_dir=args.profile,
        overrides=overrides,
        stages=StageChanges(delay_s=tuple(_parse_delay(d) for d in args.inject_delay)),
        service_workers=args.service_workers,
        quiet=args.quiet or args.json == "-",
    )
    config = DeviceConfig(
        memory_growth=args.memory_growth,
        memory_limit_mb=args.memory_limit_mb,
        precision=args.precision,
        xla=args.xla,
        strategy=args.strategy,
    )
    with tempfile.TemporaryDirectory(prefix="feedgpu-bench-") as workdir:
        data = args.data
        if data is None:
            if not options.quiet:
                print("no DATA given: generating and converting a sample image dataset", flush=True)
            data = make_default_dataset(
                workdir, images_per_class=args.sample_per_class, quiet=options.quiet
            )
        spec = None
        if args.spec:
            try:
                with open(args.spec, encoding="utf-8") as f:
                    spec = PipelineSpec.from_json(f.read()).with_changes(data_dir=data, **overrides)
            except OSError as e:
                raise UsageError(f"cannot read --spec {args.spec}: {e.strerror}") from e
        from feedgpu.bench.device import setup_devices

        setup = setup_devices(config)  # before the first tensor
        report = bench_input(data, options, setup=setup, spec=spec)
    if args.json == "-":
        _print_json(report.to_json())
    else:
        print(render_report(report))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(report.to_json(), f, indent=2, sort_keys=True)
    if args.save_spec:
        with open(args.save_spec, "w", encoding="utf-8") as f:
            f.write(report.spec.to_json() + "\n")
    return 0


def _parse_delay(text: str) -> tuple[str, float]:
    stage, _, ms = text.partition("=")
    try:
        return stage, float(ms) / 1000
    except ValueError:
        raise UsageError(f"--inject-delay {text!r}: expected STAGE=MS, e.g. decode=5") from None


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))


def run() -> NoReturn:
    """The `feedgpu` command: `main`, then an exit that skips the interpreter's teardown.

    By then every file a command wrote is closed (the manifest fsynced) and the output is
    flushed here; the teardown would only free memory object by object: 0.6 s after a text
    conversion (TensorFlow loaded), ~30 ms after an image one, measured from the command's
    last output line to its exit.
    """
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`| head`): no one reads
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 failure, 2 usage error)."""
    try:
        args = _build_parser().parse_args(argv)
        _setup_logging(getattr(args, "quiet", False) or getattr(args, "json", False))
        return int(args.func(args))
    except UsageError as e:
        print(f"feedgpu: error: {e}", file=sys.stderr)
        return 2
    except FeedgpuError as e:
        print(f"feedgpu: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("feedgpu: interrupted; re-run the same command to resume", file=sys.stderr)
        return 130
