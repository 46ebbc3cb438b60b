"""The `feedgpu` command line: sub-commands, their descriptions and their flag tables."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from feedgpu.cli.bench_flags import BENCH, VERBOSE
from feedgpu.cli.flags import COMMAND, Flag, add_flags, switch, value
from feedgpu.errors import UsageError


class Parser(argparse.ArgumentParser):
    """Usage errors become `UsageError`, printed like every other error: one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see: {self.prog} --help)")


def docs_per_record(text: str) -> int | None:
    """--docs-per-record: a count, or auto (None)."""
    if text == "auto":
        return None
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or auto")
    return int(text)


OUTPUT = [
    switch("--quiet", "no progress bar or log lines", target=COMMAND),
    switch("--json", "print a machine-readable summary on stdout", target=COMMAND),
    VERBOSE,
]
# Shared by every converter: splits, naming, sharding, parallelism, policy, output.
CONVERSION = [
    value(
        "--split",
        "hash split when SRC has no split folders, e.g. train=0.9,validation=0.1",
        metavar="SPEC",
    ),
    value("--name", "dataset name (default: SRC's folder name)"),
    value("--shard-size-mb", "target shard size", float),
    value("--num-shards", "shards per split (overrides --shard-size-mb)", int),
    value("--seed", "seed of the assignment to shards", int),
    value("--workers", "worker processes (default: all cores)", int, target=COMMAND),
    value(
        "--runner",
        "local process pool, or the same shard tasks as an Apache Beam pipeline "
        "(same bytes; needs pip install 'apache-beam[tfrecord]')",
        choices=("local", "beam"),
        default="local",
        target=COMMAND,
    ),
    value(
        "--beam-options",
        'Beam pipeline flags, e.g. "--runner=DataflowRunner --project=P --region=R" '
        "(default: DirectRunner on this machine)",
        metavar="FLAGS",
        target=COMMAND,
    ),
    switch(
        "--index",
        "also write each shard's record index (SHARD.idx: offset and length per record), "
        "for NVIDIA DALI and PyTorch tfrecord readers",
    ),
    switch("--strict", "stop at the first bad input instead of skipping it", target=COMMAND),
    switch(
        "--allow-skips",
        "keep a dataset although more inputs were skipped for one reason than converted "
        "(without it such a run exits 1, its shards kept for this re-run)",
        target=COMMAND,
    ),
    switch(
        "--overwrite", "replace a dataset in OUT that was made with other options", target=COMMAND
    ),
    *OUTPUT,
]
IMAGES = [
    value("src", "folder of images", metavar="SRC", target=COMMAND),
    value("out", "output folder (local path or gs://...)", metavar="OUT", target=COMMAND),
    value("--labels", "CSV or JSONL with path and label columns", metavar="FILE", target=COMMAND),
    value("--path-column", "label file column holding the image path", target=COMMAND),
    value("--label-column", "label file column holding the class", target=COMMAND),
    value("--quality", "JPEG quality for re-encoded images", int),
    switch("--lossless", "re-encode non-JPEG images as PNG instead of JPEG"),
    value("--max-size", "shrink the long side to N pixels", int, metavar="N"),
    value(
        "--verify",
        "validate JPEGs with a 1/8-scale decode (fast) or a full decode",
        choices=("fast", "full"),
    ),
    value(
        "--max-pixels", "skip larger images as decompression bombs (default: Pillow's limit)", int
    ),
    *CONVERSION,
]
TEXT = [
    value("src", "folder or glob (quote it) of text files", metavar="SRC", target=COMMAND),
    value("out", "output folder", metavar="OUT", target=COMMAND),
    value(
        "--tokenizer",
        "tokenizer.json, vocab.txt, or train:wordpiece:SIZE / train:bpe:SIZE",
        metavar="SPEC",
        required=True,
    ),
    switch(
        "--lowercase",
        "fold case and strip accents (vocab.txt, trained WordPiece); default: a trained "
        "vocabulary keeps them, a vocab.txt is uncased unless a token has a capital",
    ),
    value(
        "--encoding",
        "encoding of .txt files (cp1251, koi8-r, latin-1, shift_jis...; default utf-8); JSON "
        "lines are UTF-8",
    ),
    switch("--doc-per-line", "each line of a .txt file is a document (default: each file)"),
    value("--text-field", "JSON key of the text in .jsonl"),
    value("--label-field", "JSON key of the label in .jsonl"),
    switch("--folder-labels", "label documents by class folder (SRC/[SPLIT/]CLASS/*.txt)"),
    value(
        "--encoding-errors",
        "documents not in their encoding: skip them, or replace bad bytes (counted)",
        choices=("skip", "replace"),
    ),
    value("--max-length", "truncate examples to N ids", int, metavar="N"),
    value(
        "--stride", "with --max-length: overlapping windows instead of truncation", int, metavar="S"
    ),
    value(
        "--pack",
        "pack documents into sequences of N ids with segment_ids/positions",
        int,
        metavar="N",
    ),
    value(
        "--pad-id",
        "the id padding holds (default: the tokenizer's pad token, else its end-of-text token)",
        int,
        metavar="ID",
    ),
    switch("--special", "add the tokenizer's special tokens (CLS/SEP, BOS/EOS)"),
    value("--chunk-mb", "input per resumable unit: a killed run redoes at most one chunk", float),
    value(
        "--max-document-mb",
        "skip (counted) a document larger than this: a line, or a .txt file read whole "
        "(default 2; tokenizing one text holds ~75-130 bytes of memory a character)",
        float,
    ),
    value(
        "--docs-per-record",
        "documents a record holds: N, or auto (short documents: blocks of about 4k ids; "
        "longer ones: 1, one document a record, format 2's layout)",
        docs_per_record,
        metavar="N|auto",
    ),
    *[
        value("--workers", "tokenizer threads (default: all cores)", int, target=COMMAND)
        if f.name == "--workers"
        else f
        for f in CONVERSION
    ],
]
INDEX = [value("out", "dataset folder", metavar="OUT", target=COMMAND), *OUTPUT]
VERIFY = [
    value("out", "dataset folder", metavar="OUT", target=COMMAND),
    switch(
        "--decode",
        "also decode every record: images, and text blocks' documents (counted)",
        target=COMMAND,
    ),
    *OUTPUT,
]
_NO_AUTH = (
    "The tf.data service has no authentication and TensorFlow listens on every interface: run "
    "it on a private network or behind a firewall. --host only sets the name it advertises."
)
DISPATCHER = [
    value("--port", "port to serve on (0: any)", int, default=5050, target=COMMAND),
    value(
        "--work-dir",
        "journal state here (fault-tolerant: a restarted dispatcher resumes its jobs)",
        metavar="DIR",
        target=COMMAND,
    ),
    value("--host", "name to advertise", default="localhost", target=COMMAND),
    VERBOSE,
]
WORKER = [
    value("--dispatcher", "", metavar="HOST:PORT", required=True, target=COMMAND),
    value("--port", "port to serve on (0: any)", int, default=0, target=COMMAND),
    value("--host", "name to advertise", default="localhost", target=COMMAND),
    VERBOSE,
]
REPORT = [
    value("reports", "", nargs="+", metavar="JSON", target=COMMAND),
    value(
        "-o",
        "the page (.html) or picture (.png, one run) to write",
        metavar="FILE",
        target=COMMAND,
        dest="out",
        required=True,
    ),
]
SAMPLE = [
    value("dir", "", metavar="DIR", target=COMMAND),
    value("--classes", "", int, default=4, target=COMMAND),
    value("--per-class", "", int, default=100, target=COMMAND),
    value("--seed", "", int, default=0, target=COMMAND),
]


# Flags whose value may itself start with "-": argparse would read `--beam-options
# "--runner=DataflowRunner ..."` as two options, so such a value is joined to its flag.
DASH_VALUES = ("--beam-options",)


def join_dash_values(argv: Sequence[str]) -> list[str]:
    """argv with `FLAG VALUE` written `FLAG=VALUE` for the flags in DASH_VALUES."""
    out: list[str] = []
    rest = iter(argv)
    for arg in rest:
        if arg in DASH_VALUES:
            value = next(rest, None)
            out.append(arg if value is None else f"{arg}={value}")
        else:
            out.append(arg)
    return out


def unknown_arguments(extra: Sequence[str], args: argparse.Namespace) -> str:
    """The error for arguments the command does not take: its own help, and the closest flag."""
    import difflib

    message = f"unrecognized arguments: {' '.join(extra)}"
    names = [f.name for f in getattr(args, "flags", ()) if f.name.startswith("-")]
    names += [f"--no-{n[2:]}" for n in names]
    typo = next((a.split("=", 1)[0] for a in extra if a.startswith("--")), None)
    close = difflib.get_close_matches(typo, names, n=1) if typo else []
    if close:
        message += f"; did you mean {close[0]}?"
    return f"{message} (see: {getattr(args, 'prog', 'feedgpu')} --help)"


def _command(
    sub: Any,
    name: str,
    flags: Sequence[Flag],
    run: Callable[[argparse.Namespace], int],
    **texts: str,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, **texts)
    add_flags(parser, flags)
    parser.set_defaults(func=run, flags=flags, prog=parser.prog)
    return parser


def build_parser(commands: Any) -> Parser:
    """The whole command line; `commands` holds the function each sub-command runs."""
    from feedgpu import __version__

    parser = Parser(
        prog="feedgpu",
        description="Keep accelerators fed: convert data to sharded TFRecords, check it, feed it.",
    )
    parser.add_argument("--version", action="version", version=f"feedgpu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    _add_convert(sub, commands)
    _command(
        sub,
        "verify",
        VERIFY,
        commands.verify,
        help="re-read a dataset: CRCs, counts, optionally decode",
        description="Read every record of OUT (CRC checked) and compare "
        "with its manifest. Exit 1 if any problem is found.",
    )
    _command(
        sub,
        "index",
        INDEX,
        commands.index,
        help="add record indexes (DALI, PyTorch tfrecord) to a converted dataset",
        description="Write OUT's missing SHARD.idx files (one 'OFFSET LENGTH' line per record, "
        "read from the record headers) and name them in its manifest, as --index does while "
        "converting.",
    )
    _command(
        sub,
        "bench-input",
        BENCH,
        commands.bench_input,
        help="is the accelerator saturated by the input pipeline, and if not, why",
        description="Measure on DATA, in one run: the input pipeline alone, a synthetic model on "
        "resident batches (the compute ceiling) and the two together (step time and the share "
        "spent waiting for input). Judge saturated (< 5% input wait), moderately (5-20%) or "
        "highly (>= 20%) input-bound, and when input-bound make each pipeline stage free in "
        "turn to name the one to fix. Without DATA, a generated sample image dataset is made "
        "in a temporary folder and measured.",
    )
    _add_serve(sub, commands)
    _command(
        sub,
        "report",
        REPORT,
        commands.report,
        help="a page of saved bench-input --json runs: one run, or several side by side",
        description="Draw the report of each bench-input --json file given: one run's page "
        "(verdict, rates, step timeline, ablation, the pipeline as built), or with several, "
        "a side by side comparison first (before and after a fix, two hosts, two pipelines). "
        "The page is one file that opens offline. Needs matplotlib.",
    )
    _command(
        sub,
        "sample-images",
        SAMPLE,
        commands.sample_images,
        help="write a generated sample image folder",
        description="Write DIR/CLASS/NNNNN.jpg photo-like images, to try "
        "feedgpu without data of your own.",
    )
    return parser


def _add_convert(sub: Any, commands: Any) -> None:
    """`convert images` and `convert text`."""
    convert = sub.add_parser("convert", help="convert a folder into a sharded TFRecord dataset")
    kinds = convert.add_subparsers(dest="kind", required=True, parser_class=Parser)
    _command(
        kinds,
        "images",
        IMAGES,
        commands.convert_images,
        help="image folder -> TFRecords",
        description="Convert SRC (class per sub-folder, optionally under train/validation/test, "
        "or a flat folder with --labels) into sharded TFRecords in OUT, readable by TFDS. "
        "Valid JPEGs are stored byte for byte; other images are normalised to RGB. "
        "Bad files are skipped with a reason in OUT/skipped.jsonl. Re-running the same "
        "command after a crash finishes the job.",
    )
    _command(
        kinds,
        "text",
        TEXT,
        commands.convert_text,
        help="text corpus -> pre-tokenized TFRecords",
        description="Tokenize SRC (a folder or glob of .txt/.jsonl files, gzip allowed; "
        "class folders optionally under train/validation/test) once, into sharded TFRecords of "
        "token ids in OUT, with the tokenizer saved beside them. Bad documents are skipped with "
        "a reason in OUT/skipped.jsonl. Re-running the same command after a crash finishes it.",
    )


def _add_serve(sub: Any, commands: Any) -> None:
    """`serve dispatcher` and `serve worker`: the tf.data service's servers."""
    serve = sub.add_parser(
        "serve",
        help="run tf.data service servers (preprocessing on remote CPU workers)",
        description="Start a tf.data service dispatcher or worker and serve until SIGTERM or "
        "Ctrl-C. Trainers use it with PipelineSpec(service='grpc://HOST:PORT') or "
        "feedgpu bench-input DATA --service grpc://HOST:PORT. " + _NO_AUTH,
    )
    roles = serve.add_subparsers(dest="role", required=True, parser_class=Parser)
    _command(
        roles,
        "dispatcher",
        DISPATCHER,
        commands.serve,
        help="the coordinator trainers and workers connect to",
        description="Start a dispatcher. " + _NO_AUTH,
    )
    _command(
        roles,
        "worker",
        WORKER,
        commands.serve,
        help="a CPU worker that runs input pipelines",
        description="Start a worker registered with DISPATCHER. Datasets are read by path: "
        "they must be at the same path here as on the trainer (shared FS or gs://). " + _NO_AUTH,
    )
