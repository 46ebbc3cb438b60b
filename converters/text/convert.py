"""Text corpora to pre-tokenized shards: options, listing and the plan (chunks, shards).

Token ids are stored once, so training never tokenizes. Planning happens here; reading,
tokenizing and writing the chunks is `chunks.TextRunner`'s job.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from feedgpu import storage
from feedgpu.convert.gc_freeze import heap_frozen
from feedgpu.convert.plan import DatasetPlan, ShardTask, Skip, count_shards
from feedgpu.convert.run import ConversionReport, finished_dataset, write_dataset
from feedgpu.convert.run_options import RunOptions
from feedgpu.converters.listing import (
    SPLIT_FOLDERS,
    SourceFile,
    check_strict,
    fingerprint_files,
    hash_split,
    parse_split_fractions,
    sort_labels,
    split_folders,
)
from feedgpu.converters.text.chunk_plan import plan_chunks
from feedgpu.converters.text.chunks import TextRunner
from feedgpu.converters.text.options import TextOptions, TextSource
from feedgpu.converters.text.records import SAMPLE_DOCUMENTS, SHORT_IDS, choose_per_record
from feedgpu.converters.text.sources import (
    MAX_DOCUMENT_MB,
    Document,
    ReadOptions,
    input_bytes,
    is_text_name,
    iter_documents,
    list_text_files,
    new_conversion,
)
from feedgpu.converters.text.tokenizer import TextTokenizer, TokenizerSpec, load_tokenizer
from feedgpu.errors import UsageError
from feedgpu.format import names
from feedgpu.format.manifest import TokenizerInfo
from feedgpu.format.schema import Feature
from feedgpu.progress import progress_bar

logger = logging.getLogger(__name__)


def _sources(files: list[SourceFile], options: TextOptions) -> list[TextSource]:
    folders = split_folders(files)
    if folders and options.split:
        raise UsageError("the source already has train/validation/test folders; drop --split")
    sources = []
    classes: set[str] = set()
    flat = 0  # files not exactly one folder deep (below any split folder)
    for f in files:
        split, below = None, f.rel
        if folders:
            top, _, below = f.rel.partition("/")
            split = SPLIT_FOLDERS[top]
        if below.count("/") == 1:
            classes.add(below.split("/", 1)[0])
        else:
            flat += 1
        label = below.split("/", 1)[0] if options.folder_labels and "/" in below else None
        sources.append(TextSource(f, split, label))
    if not options.folder_labels and not options.label_field and len(classes) > 1 and not flat:
        shown = ", ".join(sorted(classes)[:8]) + (", ..." if len(classes) > 8 else "")
        logger.warning(
            "the source looks like class folders (%s): documents are converted without "
            "labels; add --folder-labels to label them by folder",
            shown,
        )
    return sources


@dataclass
class _TrainSplit:
    """The train split's documents, read anew on each iteration (a tokenizer trainer may read
    them more than once), each pass with its own bar."""

    sources: list[TextSource]
    read: ReadOptions
    fractions: dict[str, float]
    quiet: bool
    passes: int
    documents: int = 0
    _started: int = 0

    def __iter__(self) -> Iterator[str]:
        self._started += 1
        of = f" ({self._started}/{self.passes})" if self.passes > 1 else ""
        bar = None if self.quiet else progress_bar(desc=f"tokenizer: reading{of}", unit="doc")
        count = 0
        for s in self.sources:
            for d in iter_documents(s.file, self.read):
                if isinstance(d, Document) and (
                    (s.split or hash_split(d.doc_id, self.fractions)) == "train"
                ):
                    count += 1
                    if bar is not None and count % 256 == 0:
                        bar.update(256)
                    yield d.text
        if bar is not None:
            bar.update(count % 256)
            bar.close()
        self.documents = count


def plan_text_dataset(
    src: str, out_dir: str, options: TextOptions, run: RunOptions
) -> tuple[DatasetPlan, TextRunner]:
    """List the corpus, load or train the tokenizer, and plan chunks and shards: the plan, and
    the stage that tokenizes the chunks into the shards' pieces.

    Raises:
        UsageError: no text files, bad options, or an unusable tokenizer.
        InputError: with strict, the first bad input found while listing.
    """
    new_conversion()
    files, skips = list_text_files(src)
    check_strict(skips, run.strict)
    if not files:
        raise UsageError(f"no .txt or .jsonl files found in {src} ({len(skips)} other files)")
    fractions = parse_split_fractions(options.split) if options.split else {"train": 1.0}
    sources, skips, label_names = _labelled_sources(files, skips, options)
    spec = TokenizerSpec.parse(options.tokenizer, options.lowercase)
    options = dataclasses.replace(options, lowercase=spec.lowercase)  # recorded as decided
    name = _dataset_name(src, options)
    inputs = fingerprint_files(files)
    # Another finished dataset in out_dir is refused now, not after a tokenizer is trained:
    # its recorded options are these, whatever --docs-per-record auto decides.
    choices = [{**_recorded(options, options.blocks), "name": name}]
    if options.docs_per_record is None:
        choices.append({**_recorded(options, False), "name": name})
    done = finished_dataset(out_dir, choices, inputs, name, run.overwrite)
    started = time.perf_counter()
    if done is not None and spec.kind == "train" and not storage.is_remote(out_dir):
        # The same dataset, finished: its trained tokenizer is saved beside it, not trained again.
        tokenizer = load_tokenizer(TokenizerSpec.parse(os.path.join(out_dir, "tokenizer.json")))
    else:
        tokenizer = _tokenizer(spec, options, sources, fractions, run.quiet)
    tokenizer_s = time.perf_counter() - started
    options.check_room(sum(map(len, tokenizer.special_ids())))
    layout = options  # the options as written: --docs-per-record auto decided
    if options.blocks and options.docs_per_record is None:
        if done is not None:  # what auto chose is recorded (blocks record docs_per_record)
            per_record = None if "docs_per_record" in done.options else 1
        else:
            per_record = choose_per_record(_mean_ids(sources, options, tokenizer))
        layout = dataclasses.replace(options, docs_per_record=per_record)
    shard_counts = _shard_counts(sources, fractions, options)
    tasks = [
        ShardTask(split, i, n, names.shard_filename(name, split, i, n), (), options.index)
        for split, n in sorted(shard_counts.items(), key=lambda kv: names.split_order(kv[0]))
        for i in range(n)
    ]
    labelled = bool(label_names)
    recorded = _recorded(options, layout.blocks)
    plan = DatasetPlan(
        out_dir=out_dir,
        name=name,
        converter="text",
        source=src,
        options={**recorded, "name": name},
        inputs_fingerprint=inputs,
        features=text_features(layout, labelled),
        label_names=label_names,
        # (ids, label) pairs only where a record is one document: a block's are lists.
        supervised_keys=("input_ids", "label")
        if labelled and not options.pack and not layout.blocks
        else None,
        tasks=tasks,
        listing_skips=skips,
        tokenizer=_tokenizer_info(tokenizer, spec, options),
        stages_s={"tokenizer": tokenizer_s},
    )
    chunks = plan_chunks(sources, options) if done is None else [sources]  # none to run
    return plan, TextRunner(plan, sources, chunks, shard_counts, tokenizer, layout, fractions)


def _recorded(options: TextOptions, blocks: bool) -> dict[str, Any]:
    """The options a dataset records (its fingerprint's): pad_id, index, encoding and
    max_document_mb only when set, docs_per_record only when records hold blocks, so datasets
    converted before they existed (or with a document a record, the same bytes) keep their
    fingerprint and re-running the same command finds them complete; blocks are other bytes,
    never the resumption of a run without them."""
    recorded = {
        k: v
        for k, v in asdict(options).items()
        if k != "docs_per_record"
        and (k != "pad_id" or v is not None)
        and (k != "index" or v)
        and (k != "max_document_mb" or v != MAX_DOCUMENT_MB)
        and (k != "encoding" or v != "utf-8")
    }
    if blocks:
        recorded["docs_per_record"] = options.docs_per_record or "auto"
    return recorded


def _id_counts(tokenizer: TextTokenizer, texts: list[str]) -> list[int]:
    """How many ids HF gives each text, by the tokenizer's road (`TextTokenizer.ids`)."""
    counts: list[int] = tokenizer.ids(texts)[1].tolist()
    return counts


def _mean_ids(
    sources: list[TextSource], options: TextOptions, tokenizer: TextTokenizer
) -> float | None:
    """Ids a document of the corpus's first SAMPLE_DOCUMENTS averages, as stored (special
    tokens included, truncated): what --docs-per-record auto decides by. Tokenized in batches
    of 4, 8, 16, ... 64 documents, and stopped as soon as the mean is known to be over
    SHORT_IDS: a corpus of books is not held in memory, and long documents decide after a few
    dozen (at 64 from the first, planning a 50 MB corpus of ~2,300-token documents spent
    0.13 s here, serially; benchmarks/RESULTS.md, "Decisions").

    Counted without TensorFlow (`_id_counts`): planning runs before the run knows whether
    the dataset is already complete, and re-running a complete conversion must not import
    it to decide a layout it does not need.
    """
    extra = sum(map(len, tokenizer.special_ids())) if options.special else 0
    limit = options.max_length or 1 << 62
    count = total = 0
    texts: list[str] = []
    batch = 4

    def tokenize() -> None:
        nonlocal count, total, batch
        for n in _id_counts(tokenizer, texts):
            total += min(n + extra, limit)
        count += len(texts)
        texts.clear()
        batch = min(64, 2 * batch, SAMPLE_DOCUMENTS - count)  # 4 + 8 + ... + 64 + 4: 256

    for source in sources:
        for doc in iter_documents(source.file, options.read):
            if isinstance(doc, Document):
                texts.append(doc.text[: 64 * SHORT_IDS])  # enough to be over SHORT_IDS ids
            if len(texts) == batch:
                tokenize()
            if count >= SAMPLE_DOCUMENTS or total > SHORT_IDS * SAMPLE_DOCUMENTS:
                return total / count  # the file is closed as its reader is dropped
    tokenize()
    return total / count if count else None


def _labelled_sources(
    files: list[SourceFile], skips: list[Skip], options: TextOptions
) -> tuple[list[TextSource], list[Skip], list[str]]:
    """The planned files (those outside a class folder skipped when labelled by folder), the
    skips so far, and the label names (read from every document for --label-field)."""
    sources = _sources(files, options)
    if options.folder_labels:
        outside = [s.file.rel for s in sources if s.label is None]
        skips = skips + [Skip(rel, "no label", "not inside a class folder") for rel in outside]
        sources = [s for s in sources if s.label is not None]
    label_names: list[str] = sort_labels(s.label for s in sources if s.label is not None)
    if options.label_field:  # a pre-pass: label names must be known before the first example
        seen: dict[str, Document] = {}  # each label's first document
        numbers, first = 0, None  # documents labelled by a number, the first of them
        for s in sources:
            for d in iter_documents(s.file, options.read):
                if isinstance(d, Document) and d.label is not None:
                    seen.setdefault(d.label, d)
                    numbers += d.label_number
                    first = first or (d if d.label_number else None)
        label_names = sort_labels(seen)
        if first is not None and not all(d.label_number for d in seen.values()):  # stray
            logger.warning(
                "--label-field %s: %d documents hold a number or boolean where the others hold "
                "text (%s at %s): each is taken as the class named %r; fix them if not meant",
                options.label_field, numbers, first.label, first.doc_id, first.label,
            )  # fmt: skip
    return sources, skips, label_names


def _tokenizer(
    spec: TokenizerSpec,
    options: TextOptions,
    sources: list[TextSource],
    fractions: dict[str, float],
    quiet: bool,
) -> TextTokenizer:
    """The tokenizer --tokenizer names: loaded, or trained on the training split's documents."""
    if spec.kind != "train":
        return load_tokenizer(spec)
    passes = 2 if spec.model == "wordpiece" else 1  # WordPiece: its alphabet, then pieces
    split = _TrainSplit(sources, options.read, fractions, quiet=quiet, passes=passes)
    tokenizer = load_tokenizer(spec, split)
    learned = (spec.model, tokenizer.vocab_size, spec.vocab_size, split.documents)
    logger.info("tokenizer: learned a %s vocabulary of %d (%d asked) from %d documents", *learned)
    return tokenizer


def _dataset_name(src: str, options: TextOptions) -> str:
    """--name, else the source folder's name (one corpus file: its stem, corpus.jsonl.gz ->
    corpus), made TFDS-safe."""
    base = os.path.basename(os.path.abspath(src.split("*")[0]))
    if is_text_name(base):
        stem = base[:-3] if base.lower().endswith(".gz") else base
        base = stem.rsplit(".", 1)[0] or base
    return names.sanitize_name(options.name or base)


def _shard_counts(
    sources: list[TextSource], fractions: dict[str, float], options: TextOptions
) -> dict[str, int]:
    """Shards per split from the expected output: ~4 bytes of text per token, ~2 bytes per id
    (an estimate of the stored size, not a measurement)."""
    total = sum(input_bytes(s.file) for s in sources)
    split_bytes: dict[str, float] = {}
    if any(s.split for s in sources):
        for s in sources:
            split_bytes[s.split or "train"] = (
                split_bytes.get(s.split or "train", 0) + input_bytes(s.file) / 2
            )
    else:
        split_bytes = {k: total * v / 2 for k, v in fractions.items() if v > 0}
    target = options.shard_size_mb * (1 << 20)
    return {
        split: count_shards(est, target, options.num_shards) for split, est in split_bytes.items()
    }


def text_features(options: TextOptions, labelled: bool) -> list[Feature]:
    """What each stored text example holds: packed sequences, or one document (or window)."""
    if options.pack:
        return [Feature(k, "int64", (-1,)) for k in ("input_ids", "segment_ids", "positions")]
    each = (-1,) if options.blocks else ()  # a block: one value per document
    features = [
        Feature("input_ids", "int64", (-1,)),
        Feature("length", "int64", each),
        Feature("doc_id", "string", each, kind="text"),
    ]
    if options.stride is not None:
        features.append(Feature("window", "int64"))
    if labelled:
        features.append(Feature("label", "int64", each, kind="class_label"))
    return features


def _tokenizer_info(
    tokenizer: TextTokenizer, spec: TokenizerSpec, options: TextOptions
) -> TokenizerInfo:
    """The tokenizer as the manifest records it: the ids readers need. Its identity and
    parity verdict are the runner's to add (`TextRunner.run`), once the chunks are done."""
    pad_id, pad_token, pad_choice = tokenizer.choose_pad(options.pad_id)
    before, after = tokenizer.special_ids() if options.special else ([], [])
    return TokenizerInfo(
        identity="",
        spec=options.tokenizer,
        model=tokenizer.config["model"]["type"],
        vocab_size=tokenizer.vocab_size,
        lowercase=tokenizer.lowercase,
        files=("tokenizer.json", *(["vocab.txt"] if tokenizer.is_wordpiece else [])),
        special_ids=(tuple(before), tuple(after)),
        pad_id=pad_id,
        pad_token=pad_token,
        pad_choice=pad_choice,
        vocab_size_asked=spec.vocab_size if spec.kind == "train" else None,
    )


@heap_frozen()
def convert_text(
    src: str,
    out_dir: str,
    options: TextOptions,
    *,
    run: RunOptions | None = None,
    **run_options: Any,
) -> ConversionReport:
    """Convert a text corpus into pre-tokenized TFRecord shards in out_dir (see module doc).

    How it runs is `run` (or `RunOptions(**run_options)`: workers=, strict=, overwrite=,
    allow_skips=, quiet=, runner=, beam_options=). runner="beam" tokenizes the chunks and
    assembles the shards as Apache Beam pipelines (same bytes as the local run); the work
    folder must be shared by the Beam workers. A run that skipped more inputs for one reason
    than it kept documents raises InputError unless allow_skips (see `check_kept`).
    """
    run = RunOptions.given(run, run_options)
    storage.ensure_output_dir(out_dir)
    started = time.perf_counter()
    plan, stage = plan_text_dataset(src, out_dir, options, run)
    return write_dataset(plan, stage, run, unit="doc", rate_unit="M tokens/s", started=started)
