"""Where a text conversion's time goes, stage by stage, per length profile (issue 29).

Each stage of `convert text` runs alone on one thread, on the batches the converter makes of
the benchmark's corpus (`bench_data.make_corpus`), with the converter's own functions: reading
lines; where feedgpu's compiled steps are built, parsing JSON and tokenizing plain lines at once
then the texts it left (the tokenizer step: the compiled step for plain chunks,
tensorflow-text's graph for the rest, HF's redo of odd texts), else parsing JSON then that
step; routing, building serialized examples, statistics and framed writes, and a conversion's
fixed cost (a one-document corpus: tokenizer build, graph tracing, planning, parity, final
files). The tokenizer step alone, on texts parsed first, is what (a'') runs and what each
stage's share is taken of. Then the whole conversion: its
wall time, the CPU it used, that CPU less the stages' (in no stage: threads handing over the
GIL and batches), and (a') of bench_convert_text (the tokenizer graph on a thread a core,
nothing else) and (a'') (ours' own tokenizer step alone on threads) as the references.

A stage's share is its CPU time (the process's) over the tokenizer step's: on 2 cores a
conversion can reach 0.7x of the strongest reference only if everything but tokenizing costs
under ~0.43 of it, perfectly overlapped.

Usage: python benchmarks/profile_convert_text.py [--mb 50] [--lengths short,medium,long,real]
       [--tokenizer vocab.txt]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench_convert_text import models_built, run_step, run_threads, step_threads
from bench_data import LENGTHS, corpus_reading, make_corpus, step_batches, train_tokenizer


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _best(fn: Callable[[], Any], rounds: int = 3) -> tuple[float, Any]:
    """The least CPU time of rounds (seconds, the whole process's), and the last result.

    CPU, not wall: TensorFlow runs a graph's independent ops at once on its own threads, so a
    stage's wall time on one calling thread can be under its cost (a graph of two branches
    read 17% faster by wall, and no faster by CPU, on two threads).
    """
    best, out = float("inf"), None
    for _ in range(rounds):
        start = _cpu()
        out = fn()
        best = min(best, _cpu() - start)
    return best, out


def _timed_cpu(fn: Callable[..., float], *args: Any) -> tuple[float, float]:
    """fn(*args), and the process CPU it took (seconds)."""
    start = _cpu()
    return fn(*args), _cpu() - start


def stages(src: str, vocab: str, out: str) -> tuple[dict[str, float], float, int]:
    """CPU seconds of each stage alone, one thread, over the corpus in src; the tokenizer
    step's alone (on texts parsed first); and the corpus's tokens (no special tokens: what
    (a') counts)."""
    import numpy as np

    from feedgpu import convert_text
    from feedgpu.converters.text.batches import Batch, iter_batches
    from feedgpu.converters.text.blocks import choose_per_record
    from feedgpu.converters.text.convert import _mean_ids
    from feedgpu.converters.text.examples import ExampleBuilder
    from feedgpu.converters.text.framed import varints_unk
    from feedgpu.converters.text.options import TextOptions
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    tok = load_tokenizer(TokenizerSpec.parse(vocab))
    files, read, labels = corpus_reading(src)
    took: dict[str, float] = {}
    took["read lines"], batches = _best(lambda: list(iter_batches(files, read, labels, [], False)))

    raw = [b.raw for b in batches]
    line_ids = tok.line_ids(read.text_field)  # None where the compiled step is not built

    framing = ExampleBuilder([2], [3], None, tok.unk_id, False, 1)  # unlabelled, as below

    def parse(fused: bool) -> list[Batch]:
        parsed = []
        for lines in raw:
            batch = Batch(raw=list(lines))
            # As a conversion asks: ids as varints where the records are framed from them.
            unk = varints_unk(framing, batch) if fused else None
            batch.parse(read, labels.fractions, False, line_ids if fused else None, unk)
            parsed.append(batch)
        return parsed

    # The tokenizer step alone on texts parsed in Python, what (a'') runs: each stage's share
    # is taken of it. Where the step is built, the converter parses plain lines and tokenizes
    # them at once, and tokenizes the texts it left after.
    _, texts = _best(lambda: parse(False), 1)
    tok.ids(texts[0].texts[:4], texts[0].plain[:4])  # traced before the clock
    tok.ids(["é"], [False])
    step, _ = _best(lambda: [tok.ids(b.texts, b.plain) for b in texts])
    if line_ids is None:
        took["parse JSON"], batches = _best(lambda: parse(False))
        took["tokenizer step"], ids = _best(lambda: [tok.ids(b.texts, b.plain) for b in batches])
    else:
        took["parse and tokenize at once"], batches = _best(lambda: parse(True))
        took["texts it left"], ids = _best(lambda: [b.ids(tok.ids) for b in batches])
    mean = float(np.mean(np.concatenate([lengths for _, lengths in ids]))) + 2
    builder = ExampleBuilder([2], [3], None, tok.unk_id, False, choose_per_record(mean))
    took.update(_records_stages(batches, ids, builder, out))
    tiny = os.path.join(out, "tiny")
    os.makedirs(tiny)
    with (
        open(files[0].file.path, "rb") as f,
        open(os.path.join(tiny, "a.jsonl"), "wb") as t,
    ):
        t.write(f.readline())
    options = TextOptions(tokenizer=vocab)
    # auto's layout sample (HF on the first documents, during planning): it grows with the
    # documents' length, which the one-document corpus below does not show.
    took["layout sample (auto)"], _ = _best(lambda: _mean_ids(files, options, tok))

    def tiny_conversion() -> None:
        with models_built():  # each conversion builds them, as a vocabulary's first does
            convert_text(tiny, os.path.join(out, "tiny-out"), options, quiet=True, overwrite=True)

    took["fixed (1-document corpus)"], _ = _best(tiny_conversion)
    return took, step, int(sum(int(lengths.sum()) for _, lengths in ids))


def _records_stages(
    batches: list[Any], ids: list[tuple[Any, Any]], builder: Any, out: str
) -> dict[str, float]:
    """CPU seconds of what makes and writes the records of tokenized batches: where the
    compiled steps are built, the one step that names, routes, builds and frames them
    (`framed`), then statistics and writes; else routing, examples, then statistics, framing
    and writes."""
    import numpy as np

    from feedgpu.converters.text.examples import route, route_key
    from feedgpu.converters.text.framed import shard_records, write_framed
    from feedgpu.converters.text.pieces import ChunkWriter

    key, names, took = route_key(0), ["a", "b", "c", "d"], {}

    def fresh() -> ChunkWriter:
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        return ChunkWriter(out, None, 0, schema=None)  # type: ignore[arg-type]

    def frame_all() -> list[Any]:
        pairs = zip(ids, batches, strict=True)
        return [shard_records(builder, *pair, b.runs, key, (0, 4)) for pair, b in pairs]

    if batches[0].runs and shard_records(builder, *ids[0], batches[0].runs, key, (0, 4)):
        took["names, blocks, routes, records, framing (one step)"], framed = _best(frame_all)

        def write_all() -> None:
            writer = fresh()
            for batch in framed:
                write_framed(writer, names, batch)
            writer.close()

        took["statistics, writes"], _ = _best(write_all)
        return took
    doc_ids = [b.names() for b in batches]  # lists, as the converter passes them
    took["route"], _ = _best(lambda: [route(n, key) for n in doc_ids])
    builder(*ids[0], doc_ids[0], None, batches[0].splits)
    took["examples"], built = _best(
        lambda: [
            builder(values, lengths, n, None, b.splits)
            for (values, lengths), n, b in zip(ids, doc_ids, batches, strict=True)
        ]
    )

    def write() -> None:
        writer = fresh()
        for example in built:
            shards = np.arange(len(example.records), dtype=np.int64) % 4
            doc_shards = np.repeat(shards, example.blocks.sizes)
            stats = (example.full_lengths, example.unknown, example.stored)
            writer.count_batch(names, doc_shards, *stats)
            writer.write_routed(names, shards, example.records)
        writer.close()

    took["statistics, framing, writes"], _ = _best(write)
    return took


def whole(src: str, vocab: str, out: str) -> tuple[float, float]:
    """A conversion's best wall time, and the CPU it used (cores)."""
    from feedgpu import convert_text
    from feedgpu.converters.text.options import TextOptions

    best, cores = float("inf"), 0.0
    for _ in range(3):
        shutil.rmtree(out, ignore_errors=True)
        with models_built():
            start, cpu = time.perf_counter(), _cpu()
            convert_text(src, out, TextOptions(tokenizer=vocab), quiet=True)
            wall = time.perf_counter() - start
        if wall < best:
            best, cores = wall, (_cpu() - cpu) / wall
    return best, cores


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=50)
    parser.add_argument("--lengths", default="short,medium,long,real")
    parser.add_argument("--tokenizer", metavar="VOCAB", help="a vocab.txt instead of a trained one")
    args = parser.parse_args(argv)
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    tmp = tempfile.mkdtemp(prefix="profile_text_")
    results = {}
    try:
        with models_built():  # the stages' models: not kept in the user's cache
            vocab = args.tokenizer or os.path.join(tmp, "vocab.txt")
            if not args.tokenizer:  # as bench_convert_text's vocabulary
                sample = make_corpus(os.path.join(tmp, "sample"), 2.5)
                sample += make_corpus(os.path.join(tmp, "sample-real"), 0.6, length="real")
                train_tokenizer("train:wordpiece:8000", sample, tmp)
            tok = load_tokenizer(TokenizerSpec.parse(vocab))
            for profile in [p for p in args.lengths.split(",") if p in LENGTHS]:
                src = os.path.join(tmp, f"corpus-{profile}")
                docs = make_corpus(src, args.mb, length=profile)
                took, graph, tokens = stages(src, vocab, os.path.join(tmp, "stages"))
                wall, cores = whole(src, vocab, os.path.join(tmp, "out"))
                # (a') thrice: its best rate, and the CPU that round used; and its graph's CPU
                # on one thread (does running it on two threads at once cost more?).
                threads, threads_cpu = max(_timed_cpu(run_threads, tok, docs) for _ in range(3))
                one_cpu = min(_timed_cpu(run_threads, tok, docs, 1)[1] for _ in range(3))
                batches = step_batches(tok, src)
                step = max(  # (a''), the strongest mostly: its best of six, three at each count
                    run_step(tok, batches, n) for n in step_threads() for _ in range(3)
                )
                del batches  # not held through the next profile's measures
                best = max(threads, step)
                print(f"\n{profile}: {len(docs)} documents, {tokens / len(docs):.0f} tokens each")
                for stage, seconds in took.items():
                    print(f"  {stage:<30}{seconds:>8.3f} s  {seconds / graph:>6.2f}x the step")
                print(f"  {'(the step alone)':<30}{graph:>8.3f} s  {1:>6.2f}x the step")
                other = sum(took.values()) - graph
                print(f"  {'all but the step':<30}{other:>8.3f} s  {other / graph:>6.2f}x the step")
                # What no stage alone shows (the conversion's CPU less the stages'): threads
                # handing the GIL and batches to each other, and what grows with the corpus in the
                # parity sample and assembling shards (the fixed row is a one-document corpus's).
                # Whether it is the graph's on two threads at once: (a')'s CPU on two threads
                # against on one, printed next. (a') takes BERT's normaliser on every text, which
                # ours skips for plain ones: its graph costs more than ours.
                rest = wall * cores - sum(took.values())
                print(f"  {'in no stage':<30}{rest:>8.3f} s  {rest / graph:>6.2f}x the step")
                for label, seconds in (
                    ("(a'), its CPU", threads_cpu),
                    ("(a') on one thread", one_cpu),
                ):
                    print(f"  {label:<30}{seconds:>8.3f} s  {seconds / graph:>6.2f}x the step")
                print(
                    f"  conversion {wall:.2f} s on {cores:.2f} cores: {tokens / wall / 1e6:.2f} M "
                    f"tokens/s; (a') {threads / 1e6:.2f}, (a'') {step / 1e6:.2f}: ours/best "
                    f"{tokens / wall / best:.2f}x"
                )
                results[profile] = {
                    **took,
                    "tokenizer step alone": graph,
                    "conversion": wall,
                    "ours/(a')": tokens / wall / threads,
                    "ours/best": tokens / wall / best,
                }
                shutil.rmtree(src, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
