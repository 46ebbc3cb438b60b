"""Does the compiled WordPiece step give HF's ids on this corpus? A sample spread over it decides.

The step reproduces BERT normalisation and WordPiece, but a vocabulary or normaliser setting it
does not model would change most documents' ids, so a sample of the corpus is tokenized both
ways; any difference and HF (the reference) tokenizes the whole corpus. The sample is read at
seeded places spread over the corpus (the same places, so the same verdict and bytes, on every
run), not only its start, where a corpus sorted by source or language would hide its other
parts.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Iterator, Sequence
from typing import Any

from feedgpu import storage
from feedgpu.converters.text.options import TextSource
from feedgpu.converters.text.plain_wordpiece import per_text_ids
from feedgpu.converters.text.sources import (
    Document,
    ReadOptions,
    input_bytes,
    iter_documents,
    line_document,
)
from feedgpu.converters.text.tokenizer import NO_STEP, NO_STEP_HELP, TextTokenizer

logger = logging.getLogger(__name__)
# The parity sample: a five-thousandth of the corpus, within bounds. HF, the reference, is
# ~40x slower than the compiled step, so a fixed sample was a large part of a small conversion
# and nothing for a big one; proportional, it costs every corpus the same small share and
# looks harder at bigger corpora. The lower bound (~100 short documents, ~4,000 words) still
# shows any difference in normalisation, vocabulary or unknown-token handling, which changes
# most documents; characters beyond ASCII are HF's answers anyway (`char_table`)
# (benchmarks/RESULTS.md, "Decisions").
PARITY_SAMPLE_FRACTION = 0.0002
PARITY_SAMPLE_CHARS = (20_000, 2_000_000)
PLACES = 32  # where the sample is read, spread over the corpus


def compare_paths(
    tok: TextTokenizer, sources: Sequence[TextSource], read: ReadOptions, seed: int
) -> dict[str, Any]:
    """The parity verdict (the manifest's tokenizer fields): the road taken and why, the
    sample, its mismatches. The sample: documents read at PLACES seeded places of the corpus
    (`spread_sample`), up to PARITY_SAMPLE_FRACTION of it within PARITY_SAMPLE_CHARS, but
    those that may hold an added token's text (HF's on either road)."""
    road, reason = tok.road()
    if road != "compiled":
        if reason == NO_STEP:  # once a run: a package that could be faster
            logger.warning("tokenizer: %s: %s", reason, NO_STEP_HELP)
        return {"road": road, "reason": reason}
    corpus_bytes = sum(input_bytes(s.file) for s in sources)
    low, high = PARITY_SAMPLE_CHARS
    budget = min(high, max(low, int(corpus_bytes * PARITY_SAMPLE_FRACTION)))
    texts = [d.text for d in spread_sample(sources, read, budget, seed)]
    typed = set(tok.typed_added(texts))
    sample = [t for i, t in enumerate(texts) if i not in typed]
    mismatches = 0
    if sample:
        ours = per_text_ids(*tok.ids(sample))
        reference = tok.encode_reference(sample)
        mismatches = sum(1 for a, b in zip(ours, reference, strict=True) if a.tolist() != b)
    if mismatches:
        reason = (
            f"the compiled step differed from HF on {mismatches} of {len(sample)} sample "
            "documents: HF tokenizes every text (slower, exact)"
        )
        logger.warning("tokenizer: %s", reason)
    return {
        "road": "hf" if mismatches else "compiled",
        "reason": reason,
        "sample_documents": len(sample),
        "sample_characters": sum(map(len, sample)),
        "mismatched_documents": mismatches,
        "mismatch_rate": round(mismatches / len(sample), 6) if sample else 0.0,
    }


def spread_sample(
    sources: Sequence[TextSource], read: ReadOptions, budget: int, seed: int
) -> Iterator[Document]:
    """Documents of about budget characters in all, read at PLACES places drawn from the
    corpus's bytes by seed (each from the first whole line after it, a share of budget). A
    file that cannot be entered in its middle (gzip, remote, a document a file) is read
    from its start at a place that falls in it."""
    sizes = [max(1, s.file.size) for s in sources]
    total = sum(sizes)
    rng = random.Random(f"feedgpu-parity\0{seed}")
    places = sorted(rng.randrange(total) for _ in range(PLACES))
    starts = list(itertools.accumulate(sizes, initial=0))
    share = max(1, budget // PLACES)
    done: set[int] = set()  # files read from their start already
    at = 0
    for place in places:
        while starts[at + 1] <= place:
            at += 1
        source = sources[at]
        if _enterable(source, read):
            yield from _taken(_documents_from(source, read, place - starts[at], 16 * share), share)
        elif at not in done:
            done.add(at)
            yield from _taken(iter_documents(source.file, read), share)


def _enterable(source: TextSource, read: ReadOptions) -> bool:
    name = source.file.rel.lower()
    lines = name.endswith((".jsonl", ".ndjson")) or read.doc_per_line
    return lines and not storage.is_remote(source.file.path) and not name.endswith(".gz")


def _documents_from(
    source: TextSource, read: ReadOptions, offset: int, limit: int
) -> Iterator[Any]:
    """A line-per-document file's documents from the first line starting at or after offset,
    within limit bytes (a place whose lines hold no document, a wrong --text-field, is not
    read to the end of its file)."""
    is_json = not source.file.rel.lower().endswith((".txt", ".text"))
    try:
        with open(source.file.path, "rb") as f:
            f.seek(max(0, offset - 1))
            if offset:
                _rest_of_line(f, b"")  # of the line the place fell in
            while limit > 0 and (line := f.readline(read.max_bytes + 1)):
                limit -= len(line)
                if len(line) > read.max_bytes:  # a document too large: never held whole
                    limit -= _rest_of_line(f, line)
                    continue
                yield line_document(line, source.file.rel, is_json, read)
    except OSError:  # the conversion itself reports an unreadable file
        return


def _rest_of_line(f: Any, part: bytes) -> int:
    """The rest of the line part began read and dropped, a MiB at a time; its bytes."""
    read = 0
    while not part.endswith(b"\n") and (part := f.readline(1 << 20)):
        read += len(part)
    return read


def _taken(documents: Iterator[Any], chars: int) -> Iterator[Document]:
    """Documents of the iterator up to chars characters (skips passed)."""
    for doc in documents:
        if isinstance(doc, Document):
            yield doc
            chars -= len(doc.text)
            if chars <= 0:
                return
