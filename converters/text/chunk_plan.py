"""A text corpus's chunks, the unit of resumption: consecutive files, or parts of a big one.

A chunk is tokenized whole or not at all (its marker is written last), so a killed run redoes
at most one. A file of a document a line bigger than a chunk is cut at line starts found in
one pass over it (`raw_lines.line_cuts`), each part numbered from its first line, so a 100 GB
JSONL file resumes where it stopped; a gzip or remote file, which cannot be entered in its
middle, stays whole.
"""

from __future__ import annotations

import dataclasses

from feedgpu import storage
from feedgpu.converters.text.options import TextOptions, TextSource
from feedgpu.converters.text.raw_lines import line_cuts
from feedgpu.converters.text.sources import input_bytes


def plan_chunks(sources: list[TextSource], options: TextOptions) -> list[list[TextSource]]:
    """Consecutive files, about chunk_mb of input each: the unit of resumption. A bigger file
    of a document a line (local, not gzip: it can be entered in its middle) is cut into parts
    of whole lines, a chunk each (`line_cuts`), so a killed run redoes at most one whatever
    the layout."""
    limit = int(options.chunk_mb * (1 << 20))
    chunks: list[list[TextSource]] = [[]]
    size = 0
    for s in sources:
        for part in _parts(s, limit, options.doc_per_line):
            bytes_in = input_bytes(s.file) if part.span is None else part.span[1] - part.span[0]
            if chunks[-1] and size + bytes_in > limit:
                chunks.append([])
                size = 0
            chunks[-1].append(part)
            size += bytes_in
    return chunks


def _parts(source: TextSource, limit: int, doc_per_line: bool) -> list[TextSource]:
    name, path = source.file.rel.lower(), source.file.path
    lines = name.endswith((".jsonl", ".ndjson")) or doc_per_line
    if not lines or source.file.size <= limit or name.endswith(".gz") or storage.is_remote(path):
        return [source]
    try:
        cuts = line_cuts(path, limit)
    except OSError:  # unreadable: whole, and its reading reports the skip
        return [source]
    ends = [*cuts[1:], (source.file.size, 0)]
    return [
        dataclasses.replace(source, span=(start, end, line))
        for (start, line), (end, _) in zip(cuts, ends, strict=True)
        if end > start
    ]
