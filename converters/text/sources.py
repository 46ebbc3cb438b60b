"""Text corpora as documents: .txt (a document per file or per line), .jsonl, gzip, class folders.

Reading is streamed: a file is never held in memory beyond the document being read, or a block
of JSON lines (about `raw_lines.BLOCK_BYTES`, or one line if longer: `RawLines`). Every
document is yielded or reported as a `Skip` with its file and line.
"""

from __future__ import annotations

import codecs
import contextlib
import glob
import gzip
import json
import logging
import os
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, cast

import orjson

from feedgpu import storage
from feedgpu.convert.plan import Skip
from feedgpu.converters.listing import SourceFile, walk_source
from feedgpu.converters.text import raw_lines
from feedgpu.converters.text.raw_lines import RawLines
from feedgpu.errors import UsageError

logger = logging.getLogger(__name__)
TEXT_SUFFIXES = (".txt", ".text", ".jsonl", ".ndjson")
_BINARY_PROBE = 8192
MAX_DOCUMENT_MB = 2.0  # --max-document-mb's default: HF on 2 MB of BPE text, ~0.9 GB peak


@dataclass(frozen=True)
class Document:
    """One document: id (file, plus :line for line-based files), text, label name or None."""

    doc_id: str
    text: str
    label: str | None = None
    label_number: bool = False  # its label was a JSON number or boolean, made text
    replaced: int = 0  # bytes not in the encoding, each run replaced by U+FFFD


@dataclass(frozen=True)
class ReadOptions:
    """How files become documents.

    Attributes:
        doc_per_line: each non-blank line of a .txt file is a document.
        text_field: JSON key of the text in .jsonl lines.
        label_field: JSON key of the label in .jsonl lines, if any.
        encoding_errors: "skip" drops non-UTF-8 documents; "replace" substitutes U+FFFD.
        max_bytes: a longer line (or .txt file read whole) is a Skip, never held.
        encoding: of .txt files (a JSON line is UTF-8 by definition).
    """

    doc_per_line: bool = False
    text_field: str = "text"
    label_field: str | None = None
    encoding_errors: str = "skip"
    max_bytes: int = int(MAX_DOCUMENT_MB * (1 << 20))
    encoding: str = "utf-8"

    def too_large(self, where: str, size: int) -> Skip:
        """The Skip of a document over max_bytes (size: its bytes, as far as they were read)."""
        limit = self.max_bytes / (1 << 20)
        return Skip(
            where,
            "document too large",
            f"{size / (1 << 20):.1f}+ MB, over --max-document-mb {limit:g} (split it, or raise "
            "the limit: tokenizing one text takes ~75-130 bytes of memory a character)",
        )


def is_text_name(name: str) -> bool:
    """True for .txt/.jsonl files, gzip-compressed or not."""
    name = name.lower()
    return name.removesuffix(".gz").endswith(TEXT_SUFFIXES)


def list_text_files(src: str) -> tuple[list[SourceFile], list[Skip]]:
    """One corpus file, the files of a folder (walked as for images), or of a glob pattern
    such as corpus/*.jsonl.gz."""
    if not any(c in src for c in "*?["):
        if storage.exists(src) and not storage.isdir(src):
            return [_single_file(src)], []
        return walk_source(src, is_text_name, "not a text file")
    if storage.is_remote(src):
        return _glob_remote(src)
    base = src.split("*")[0].split("?")[0].split("[")[0]
    base = base if base.endswith(os.sep) else os.path.dirname(base)
    files, skips = [], []
    for path in sorted(glob.glob(src, recursive=True)):
        rel = os.path.relpath(path, base or ".").replace(os.sep, "/")
        if not os.path.isfile(path):
            continue
        if is_text_name(path):
            st = os.stat(path)
            files.append(SourceFile(rel, path, st.st_size, st.st_mtime_ns))
        else:
            skips.append(Skip(rel, "not a text file", "extension not .txt/.jsonl(.gz)"))
    if not files and not skips:
        raise UsageError(f"{src}: the pattern matches no files")
    return files, skips


def _single_file(path: str) -> SourceFile:
    """A corpus given as one file: its name is its relative path (as under a folder)."""
    if not is_text_name(path):
        raise UsageError(
            f"{path} is not a .txt or .jsonl file (gzip-compressed or not); give a corpus "
            "file, the folder that holds them, or a pattern such as 'corpus/*.jsonl'"
        )
    name = (
        path.rstrip("/").rsplit("/", 1)[-1] if storage.is_remote(path) else os.path.basename(path)
    )
    if storage.is_remote(path):
        import tensorflow as tf

        stat = tf.io.gfile.stat(path)
        return SourceFile(name, path, int(stat.length), int(stat.mtime_nsec))
    st = os.stat(path)
    return SourceFile(name, path, st.st_size, st.st_mtime_ns)


def _glob_remote(pattern: str) -> tuple[list[SourceFile], list[Skip]]:
    import tensorflow as tf

    base = pattern.split("*")[0].split("?")[0].split("[")[0].rsplit("/", 1)[0]
    files, skips = [], []
    for path in sorted(tf.io.gfile.glob(pattern)):
        if tf.io.gfile.isdir(path):
            continue
        rel = path[len(base) + 1 :]
        if is_text_name(path):
            stat = tf.io.gfile.stat(path)
            files.append(SourceFile(rel, path, int(stat.length), int(stat.mtime_nsec)))
        else:
            skips.append(Skip(rel, "not a text file", "extension not .txt/.jsonl(.gz)"))
    if not files and not skips:
        raise UsageError(f"{pattern}: the pattern matches no files")
    return files, skips


def _decode(
    raw: bytes, where: str, options: ReadOptions, encoding: str = "utf-8"
) -> tuple[str, int] | Skip:
    """raw as text, and how many of its bytes were not in the encoding (replaced by U+FFFD,
    with --encoding-errors replace; else a Skip). A document mostly replaced is said, once a
    run: its files are likely in another encoding."""
    try:
        return raw.decode(encoding), 0
    except UnicodeDecodeError as e:
        name = "UTF-8" if encoding == "utf-8" else encoding
        if options.encoding_errors != "replace":
            return Skip(
                where,
                f"not {name}",
                f"invalid byte at offset {e.start} (pass --encoding NAME if the files use "
                "another encoding, or --encoding-errors replace to keep it)",
            )
    _replaced.bytes = 0
    text = raw.decode(encoding, errors="feedgpu-replace")
    replaced = _replaced.bytes
    if replaced * 10 > len(raw) and not _warned.is_set():
        _warned.set()
        logger.warning(
            "%s: %d of its %d bytes are not %s (replaced by U+FFFD, which BERT's normaliser "
            "drops): its files are likely in another encoding; pass --encoding NAME (cp1251, "
            "koi8-r, latin-1, shift_jis...) for .txt files",
            where, replaced, len(raw), name,
        )  # fmt: skip
    return text, replaced


def _count_replaced(error: UnicodeError) -> tuple[str, int]:
    """The "replace" error handler, counting the bytes it replaces (`_decode`)."""
    assert isinstance(error, UnicodeDecodeError)
    _replaced.bytes += error.end - error.start
    return "\ufffd", error.end


_replaced = threading.local()
_warned = threading.Event()  # once a conversion (`new_conversion`)


def new_conversion() -> None:
    """A conversion begins: its warnings may be said again."""
    _warned.clear()


codecs.register_error("feedgpu-replace", _count_replaced)


@contextlib.contextmanager
def _opened(path: str) -> Iterator[IO[bytes]]:
    """A file, local or remote (gs://...), gzip-compressed or not, for reading bytes; a remote
    file's errors surface as OSError."""
    gzipped = path.lower().endswith(".gz")
    if not storage.is_remote(path):
        with cast(IO[bytes], gzip.open(path, "rb") if gzipped else open(path, "rb")) as f:
            yield f
        return
    import tensorflow as tf

    try:
        with storage.open_file(path, "rb") as raw:
            yield cast(IO[bytes], gzip.GzipFile(fileobj=raw) if gzipped else raw)
    except tf.errors.OpError as e:
        raise OSError(e.message) from e


def input_bytes(f: SourceFile) -> int:
    """The text a file holds, about: gzip is taken as ~3:1 for text."""
    return f.size * 3 if f.rel.lower().endswith(".gz") else f.size


def iter_documents(file: SourceFile, options: ReadOptions) -> Iterator[Document | Skip]:
    """Documents of one file, in order, with a Skip for each one that cannot be used."""
    return cast(Iterator[Document | Skip], _read(file, options, blocks=False))


def iter_blocks(
    file: SourceFile, options: ReadOptions, span: tuple[int, int, int] | None = None
) -> Iterator[Document | Skip | RawLines]:
    """`iter_documents`, but an unlabelled JSONL file's lines as `RawLines` (`parse_lines`);
    of span's lines only, if given (`TextSource.span`)."""
    return _read(file, options, blocks=True, span=span)


def _read(
    file: SourceFile,
    options: ReadOptions,
    blocks: bool,
    span: tuple[int, int, int] | None = None,
) -> Iterator[Document | Skip | RawLines]:
    name = file.rel.lower().removesuffix(".gz")
    is_json = name.endswith((".jsonl", ".ndjson"))
    try:
        if is_json or options.doc_per_line:
            for found in _raw_lines(file, options, span):
                if isinstance(found, Skip) or (blocks and is_json and not options.label_field):
                    yield found
                    continue
                for offset, line in enumerate(found.lines()):
                    where = f"{file.rel}:{found.number + offset}"
                    document = line_document(line, where, is_json, options)
                    if document is not None:
                        yield document
            return
        with _opened(file.path) as f:  # one document per file: the document is the file
            raw = f.read(options.max_bytes + 1)
        if len(raw) > options.max_bytes:
            yield options.too_large(file.rel, len(raw))
            return
        if b"\0" in raw[:_BINARY_PROBE]:
            yield Skip(file.rel, "binary file", "contains NUL bytes")
            return
        decoded = _decode(raw, file.rel, options, options.encoding)
        if isinstance(decoded, Skip):
            yield decoded
        elif not decoded[0].strip():
            yield Skip(file.rel, "empty document", "no text")
        else:
            yield Document(file.rel, decoded[0], replaced=decoded[1])
    except (OSError, EOFError, zlib.error) as e:
        yield Skip(file.rel, "unreadable", f"{type(e).__name__}: {e} (documents before it kept)")


def line_document(
    line: bytes, where: str, is_json: bool, options: ReadOptions
) -> Document | Skip | None:
    """One line's document (None for a blank line: blank lines separate documents)."""
    if not line or line.isspace():
        return None
    if is_json:
        try:  # the usual line: valid UTF-8 and JSON, parsed at once (orjson, in C)
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            row = None  # the exact reason comes from the careful path below
        if row is not None:
            return _json_row(row, where, options, line)
    decoded = _decode(line, where, options, "utf-8" if is_json else options.encoding)
    if isinstance(decoded, Skip):
        return decoded
    text, replaced = decoded
    if is_json:
        return _json_document(text, where, options, replaced)
    return Document(where, text.rstrip("\r\n"), replaced=replaced)


def _raw_lines(
    file: SourceFile, options: ReadOptions, span: tuple[int, int, int] | None = None
) -> Iterator[RawLines | Skip]:
    """A line-per-document file's lines (span's: from its first byte to its end, numbered
    from its first line) in blocks of BLOCK_LINES at most, as read (`raw_lines.read_blocks`);
    a line over options.max_bytes, and a binary file, a Skip."""
    start, end, number = span or (0, None, 1)
    with _opened(file.path) as f:
        if start:
            f.seek(start)
        size = None if end is None else end - start
        for block in raw_lines.read_blocks(f, options.max_bytes, size):
            if isinstance(block, int):  # a line too long to hold: its size so far
                yield options.too_large(f"{file.rel}:{number}", block)
                number += 1
                continue
            data, ends = block
            if number == (span or (0, 0, 1))[2] and b"\0" in data[: min(ends[1], _BINARY_PROBE)]:
                where = file.rel if number == 1 else f"{file.rel}:{number}"  # a part of it
                yield Skip(where, "binary file", "contains NUL bytes")
                return
            for start in range(0, len(ends) - 1, raw_lines.BLOCK_LINES):
                bounds = ends[start : start + raw_lines.BLOCK_LINES + 1]
                yield RawLines(file.rel, number, data, bounds)
                number += len(bounds) - 1


def parse_lines(
    raw: RawLines, start: int, end: int, options: ReadOptions
) -> Iterator[Document | Skip]:
    """The documents of lines start..end of raw, unlabelled, as `iter_documents` reads them
    (a blank, malformed, non-object line, or one without a non-blank string text, makes a
    Skip or nothing)."""
    for offset, line in enumerate(raw.lines(start, end)):
        found = line_document(line, f"{raw.rel}:{raw.number + start + offset}", True, options)
        if found is not None:
            yield found


def _json_document(text: str, where: str, options: ReadOptions, replaced: int) -> Document | Skip:
    """A line orjson refused (not UTF-8, or JSON only Python's parser takes, or malformed)."""
    try:
        row = json.loads(text)
    except (ValueError, RecursionError) as e:  # RecursionError: nested past Python's limit
        return Skip(where, "malformed JSON", str(e))
    return _json_row(row, where, options, None, replaced)


def _json_row(
    row: Any, where: str, options: ReadOptions, line: bytes | None = None, replaced: int = 0
) -> Document | Skip:
    """The document in a parsed JSON line."""
    if not isinstance(row, dict):
        return Skip(where, "malformed JSON", "not a JSON object")
    value = row.get(options.text_field)
    if not isinstance(value, str):
        return Skip(where, "no text field", f"no string field {options.text_field!r}")
    if not value or value.isspace():
        return Skip(where, "empty document", "no text")
    label = None
    if options.label_field:
        raw_label = row.get(options.label_field)
        if raw_label is None or isinstance(raw_label, (dict, list)):
            return Skip(where, "no label", f"no scalar field {options.label_field!r}")
        label = str(raw_label)
    if line is None and _SURROGATE.search(f"{value}{label}"):  # json reads "\ud800" alone
        if options.encoding_errors != "replace":
            return Skip(where, "not UTF-8", _SURROGATE_DETAIL)
        value = _SURROGATE.sub("\ufffd", value)
        label = label if label is None else _SURROGATE.sub("\ufffd", label)
    number = label is not None and not isinstance(raw_label, str)
    return Document(where, value, label, number, replaced)


_SURROGATE = re.compile("[\ud800-\udfff]")  # text no UTF-8 can hold
_SURROGATE_DETAIL = "a lone \\ud800-\\udfff escape (use --encoding-errors replace to keep it)"
