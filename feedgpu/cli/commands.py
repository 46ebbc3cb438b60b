"""What each sub-command does with its parsed flags: build the options object (declared in
`parser`), call the library, print the result. Nothing here imports TensorFlow at module load."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import TYPE_CHECKING, Any

from feedgpu.chatter import load_tensorflow
from feedgpu.cli.flags import DEVICE, SPEC, options_from, values_for
from feedgpu.errors import UsageError

if TYPE_CHECKING:
    from feedgpu.convert.run_options import RunOptions


def _load_tensorflow(args: argparse.Namespace) -> None:
    """TensorFlow loaded without its native start-up chatter, unless --verbose; its C++ INFO
    and WARNING logs off too (TF_CPP_MIN_LOG_LEVEL, if set, wins)."""
    if not args.verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    load_tensorflow(verbose=bool(args.verbose))
    args.import_s = time.perf_counter() - started


def serve(args: argparse.Namespace) -> int:
    _load_tensorflow(args)
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


def convert_images(args: argparse.Namespace) -> int:
    from feedgpu.converters.images import ImageOptions, convert_images

    report = convert_images(
        args.src,
        args.out,
        options_from(ImageOptions, args, args.flags),
        labels_file=args.labels,
        path_column=args.path_column,
        label_column=args.label_column,
        run=_run_options(args),
    )
    rate = f"{report.to_json()['inputs_per_s'] or 0} files/s"
    return _print_conversion(args, report, f"{report.num_examples} images", rate, {})


def convert_text(args: argparse.Namespace) -> int:
    from feedgpu.converters.text.convert import TextOptions, convert_text
    from feedgpu.format.manifest import read_manifest

    options = options_from(TextOptions, args, args.flags)
    _load_tensorflow(args)
    report = convert_text(args.src, args.out, options, run=_run_options(args))
    manifest = read_manifest(args.out)
    text, tok = manifest.text, manifest.tokenizer
    tokens = text.tokens if text else 0
    writing = report.stages_s.get("conversion", report.seconds)
    rate = tokens / writing / 1e6 if writing else 0.0
    what = f"{report.num_examples} examples from {text.documents if text else 0} documents"
    extra = {"text": text.to_json() if text else {}, "tokenizer": tok.to_json() if tok else {}}
    code = _print_conversion(args, report, what, f"{rate:.2f} M tokens/s", extra)
    road = tok.parity.get("road") if tok else None
    if road and not args.json:  # which road tokenized, and why (the manifest keeps it too)
        print(f"tokenizer: the {road} road ({tok.parity.get('reason', '')})")  # type: ignore[union-attr]
    if tok and tok.lowercase is not None and not args.json and tok.model == "WordPiece":
        how = "its tokenizer.json decides"
        if not tok.spec.endswith(".json"):
            how = "--no-lowercase keeps them" if tok.lowercase else "--lowercase folds them"
        casing = (
            "uncased: case and accents folded" if tok.lowercase else "cased: case and accents kept"
        )
        print(f"tokenizer: {casing} ({how})")
    if text and text.replaced_bytes and not args.json:
        print(
            f"text: {text.replaced_bytes:,} bytes not in their encoding were replaced by "
            "U+FFFD (--encoding NAME reads .txt files in another encoding)"
        )
    asked = tok.vocab_size_asked if tok else None
    if tok and asked and tok.vocab_size != asked and not args.json:
        why = (
            "the training documents hold no more pieces seen at least twice (a larger corpus "
            "would; or ask for fewer)"
            if tok.vocab_size < asked
            else "every character of the corpus has its pieces, and they alone are more"
        )
        print(f"tokenizer: learned {tok.vocab_size:,} of the {asked:,} entries asked: {why}")
    return code


def _run_options(args: argparse.Namespace) -> RunOptions:
    """How a conversion runs (flags every converter shares, none of which change the bytes)."""
    from feedgpu.convert.run_options import RunOptions

    return RunOptions(
        workers=args.workers,
        strict=bool(args.strict),
        overwrite=bool(args.overwrite),
        allow_skips=bool(args.allow_skips),
        quiet=bool(args.quiet or args.json),
        runner=args.runner,
        beam_options=args.beam_options,
    )


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
            f"wrote {what} ({splits}) in {_count(report.num_shards, 'shard')}, "
            f"{report.num_bytes / 1e6:.1f} MB in {_wall_time(args, report)} ({rate})"
        )
        if report.num_skipped:
            reasons = ", ".join(f"{n} {r}" for r, n in report.skipped_by_reason.items())
            print(f"skipped {report.num_skipped} ({reasons}); see {args.out}/skipped.jsonl")
    return 0


def verify(args: argparse.Namespace) -> int:
    from feedgpu.format.verify import verify_dataset

    report = verify_dataset(args.out, decode=bool(args.decode), quiet=bool(args.quiet or args.json))
    if args.json:
        _print_json(report.to_json())
    else:
        for problem in report.problems:
            print(problem)
        status = "ok" if report.ok else f"{len(report.problems)} problem(s)"
        shards = _count(report.num_shards, "shard")
        print(f"{args.out}: {_count(report.num_records, 'record')} in {shards}: {status}")
    return 0 if report.ok else 1


def index(args: argparse.Namespace) -> int:
    from feedgpu.errors import DatasetError
    from feedgpu.format.index import index_dataset

    try:
        written = index_dataset(args.out, quiet=bool(args.quiet or args.json))
    except ValueError as e:
        raise DatasetError(f"{e}; run feedgpu verify {args.out}") from None
    if args.json:
        _print_json({"out_dir": args.out, "written": written})
    else:
        print(f"{args.out}: {_count(len(written), 'index file')} written")
    return 0


def sample_images(args: argparse.Namespace) -> int:
    from feedgpu.samples import write_sample_images

    n = write_sample_images(
        args.dir, num_classes=args.classes, images_per_class=args.per_class, seed=args.seed
    )
    print(f"wrote {n} images in {args.classes} class folders under {args.dir}")
    return 0


def report(args: argparse.Namespace) -> int:
    from feedgpu.report import label_of, load_report, write_report

    reports = [load_report(path) for path in args.reports]
    write_report(args.out, reports, [label_of(path) for path in args.reports])
    print(f"wrote {args.out}: {len(reports)} run(s)")
    return 0


def bench_input(args: argparse.Namespace) -> int:
    import tempfile

    if args.print_schema:
        from feedgpu.bench.schema import BENCH_REPORT_SCHEMA

        _print_json(BENCH_REPORT_SCHEMA)
        return 0
    _load_tensorflow(args)  # its start-up chatter would bury the table
    from feedgpu.bench.device import DeviceConfig
    from feedgpu.bench.measure import BenchOptions, bench_input
    from feedgpu.bench.render import render_report
    from feedgpu.bench.user_data import dataset_from_fn, import_modules
    from feedgpu.bench.user_model import is_user_model
    from feedgpu.pipeline.measure_hooks import StageChanges
    from feedgpu.pipeline.spec import PipelineSpec
    from feedgpu.samples import make_default_dataset

    overrides = values_for(args, args.flags, SPEC)
    options = options_from(
        BenchOptions,
        args,
        args.flags,
        overrides=overrides,
        stages=StageChanges(delay_s=tuple(_parse_delay(d) for d in args.inject_delay or ())),
        quiet=bool(args.quiet or args.json == "-"),
        trace_stages=bool(args.json),  # a saved run can be drawn later (feedgpu report)
    )
    device = values_for(args, args.flags, DEVICE)
    if is_user_model(options.model) and device.get("precision", "auto") != "auto":
        raise UsageError(
            f"--precision {device['precision']}: your model keeps the dtype policy it was "
            "saved with; drop --precision (or save the model under the policy you want)"
        )
    config = DeviceConfig(**device)
    import_modules(getattr(args, "import") or [])
    spec = None
    if args.spec:
        try:
            with open(args.spec, encoding="utf-8") as f:
                spec = PipelineSpec.from_json(f.read())
        except OSError as e:
            raise UsageError(f"cannot read --spec {args.spec}: {e.strerror}") from e
    with tempfile.TemporaryDirectory(prefix="feedgpu-bench-") as workdir:
        # The dataset: DATA, else the spec's own, else a generated sample.
        data = args.data or (spec.data_dir if spec else None)
        if data is None and not args.dataset_fn:
            if not options.quiet:
                print("no DATA given: generating and converting a sample image dataset", flush=True)
            data = make_default_dataset(
                workdir, images_per_class=args.sample_per_class, quiet=options.quiet
            )
        if data is not None:
            from feedgpu.format.manifest import read_manifest

            read_manifest(data)  # a dataset that is not there is said before anything starts
        from feedgpu.bench.device import setup_devices

        setup = setup_devices(config)  # before the first tensor (the user's dataset makes some)
        dataset = dataset_from_fn(args.dataset_fn) if args.dataset_fn else None
        report = bench_input(data, options, dataset=dataset, setup=setup, spec=spec)
    if args.json == "-":
        _print_json(report.to_json())
    else:
        print(render_report(report))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(report.to_json(), f, indent=2, sort_keys=True)
    if args.save_spec:
        if report.spec is None:
            print("note: --save-spec: your own tf.data pipeline has no feedgpu spec to save")
        else:
            with open(args.save_spec, "w", encoding="utf-8") as f:
                f.write(report.spec.to_json() + "\n")
    return 0


def _parse_delay(text: str) -> tuple[str, float]:
    stage, _, ms = text.partition("=")
    try:
        return stage, float(ms) / 1000
    except ValueError:
        raise UsageError(f"--inject-delay {text!r}: expected STAGE=MS, e.g. decode=5") from None


def _wall_time(args: argparse.Namespace, report: Any) -> str:
    """The command's whole wall time, with its parts (TensorFlow's import, the tokenizer,
    listing, conversion) when more than the conversion took a noticeable share of it."""
    total = time.perf_counter() - getattr(args, "started", time.perf_counter() - report.seconds)
    parts = {"TensorFlow import": getattr(args, "import_s", 0.0), **report.stages_s}
    shown = [f"{name} {s:.1f} s" for name, s in parts.items() if s >= 0.1]
    return f"{total:.1f} s" + (f" ({', '.join(shown)})" if len(shown) > 1 else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))
