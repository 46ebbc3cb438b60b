"""Does the fast WordPiece path give HF's ids on this corpus? A start-up sample decides.

The fast path (tensorflow-text) reproduces BERT normalisation and WordPiece, but a vocabulary or
normaliser setting it does not model would change most documents' ids, so a sample of the
corpus is tokenized both ways; any difference and HF (the reference) is used throughout.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from feedgpu.converters.text.examples import per_text_ids
from feedgpu.converters.text.sources import Document
from feedgpu.converters.text.tokenizer import TextTokenizer

logger = logging.getLogger(__name__)
# The parity sample: a five-thousandth of the corpus, within bounds. HF, the reference, is
# ~40x slower than the compiled step, so a fixed sample was a large part of a small conversion
# and nothing for a big one; proportional, it costs every corpus the same small share and
# looks harder at bigger corpora. At a thousandth (50k characters at least of a 48 MB corpus)
# HF's threads took 13 ms of a conversion's ~0.6 CPU-s, and skipping the check made it 3%
# faster; at 20k, 7 ms (~1%). The lower bound (~100
# short documents, ~4,000 words) still shows any difference in normalisation, vocabulary or
# unknown-token handling, which changes most documents; characters beyond ASCII are HF's
# answers anyway (`char_table`) (benchmarks/RESULTS.md, "the parity sample", and "Issue 29,
# eleventh session").
PARITY_SAMPLE_FRACTION = 0.0002
PARITY_SAMPLE_CHARS = (20_000, 2_000_000)


def compare_paths(
    tok: TextTokenizer, documents: Iterable[Any], corpus_bytes: int
) -> dict[str, Any]:
    """The parity verdict (the manifest's tokenizer fields): path taken, sample, mismatches.

    documents: the corpus's documents (and skips) in order; the sample is the first ones the
    fast path would take, up to PARITY_SAMPLE_FRACTION of the corpus within
    PARITY_SAMPLE_CHARS: with the compiled step, every one without an added token's text (its
    table of characters beyond ASCII is checked too); with tensorflow-text alone, not those
    it leaves to HF.
    """
    if not tok.fast_capable:
        return {"path": "hf", "reason": "not a BERT WordPiece tokenizer"}
    sample: list[str] = []
    plain: list[bool] = []
    chars = 0
    low, high = PARITY_SAMPLE_CHARS
    budget = min(high, max(low, int(corpus_bytes * PARITY_SAMPLE_FRACTION)))
    stepped = tok.plain_step() is not None
    for doc in documents:
        if (
            isinstance(doc, Document)
            and (stepped or not tok.needs_reference(doc.text))
            and not tok.typed_added([doc.text])
        ):
            sample.append(doc.text)
            plain.append(doc.plain)
            chars += len(doc.text)
            if chars >= budget:
                break
    mismatches = 0
    if sample:
        fast: list[Any] = [None] * len(sample)
        for route in (True, False):  # plain texts take their own graph: check both
            at = [i for i, p in enumerate(plain) if p == route]
            if at:
                values, lengths, _ = tok.fast_ids([sample[i] for i in at], [route] * len(at))
                for i, ids in zip(at, per_text_ids(values, lengths), strict=True):
                    fast[i] = ids
        reference = tok.encode_reference(sample)
        mismatches = sum(1 for f, r in zip(fast, reference, strict=True) if f.tolist() != r)
    if mismatches:
        logger.warning(
            "fast WordPiece differs from HF on %d of %d sample documents; "
            "using HF tokenizers (slower, exact)",
            mismatches,
            len(sample),
        )
    return {
        "path": "hf" if mismatches else "fast_wordpiece",
        "sample_documents": len(sample),
        "sample_characters": chars,
        "mismatched_documents": mismatches,
        "mismatch_rate": round(mismatches / len(sample), 6) if sample else 0.0,
    }
