"""Label files for flat folders: CSV or JSONL rows that pair a path with a class."""

from __future__ import annotations

import csv
import json
import logging
import os
import posixpath
import shlex
from typing import Any

from feedgpu.convert.plan import Skip
from feedgpu.converters.listing import SourceFile
from feedgpu.errors import UsageError

PATH_COLUMNS = ("path", "file", "filename", "file_name", "image", "image_path", "filepath")
logger = logging.getLogger(__name__)

LABEL_COLUMNS = ("label", "class", "category", "class_name", "label_name")


def _pick(
    columns: list[str], wanted: str | None, candidates: tuple[str, ...], what: str, file: str
) -> str:
    if wanted:
        if wanted not in columns:
            raise UsageError(f"{file}: no column {wanted!r} (columns: {', '.join(columns)})")
        return wanted
    lowered = {c.lower().strip(): c for c in columns}
    for c in candidates:
        if c in lowered:
            return lowered[c]
    raise UsageError(
        f"{file}: cannot tell which column holds the {what} (columns: {', '.join(columns)}); "
        f"name it with --{what}-column"
    )


def _class_column(file: str, rows: list[dict[str, Any]], candidates: list[str], pcol: str) -> str:
    """The one column besides the path, with a value in every row, whose values repeat as
    classes do (at most one distinct value per two rows, at least two): `species` beside a
    free-text `notes`. Otherwise a UsageError that lists what was seen and names the flag."""
    distinct = {c: len({_cell(r.get(c)) for r in rows} - {""}) for c in candidates}
    full = [c for c in candidates if all(_cell(r.get(c)) for r in rows)]
    classes = [c for c in full if 2 <= distinct[c] <= len(rows) / 2]
    if len(classes) == 1:
        logger.warning(
            "labels from column %r of %s (--label-column picks another)", classes[0], file
        )
        return classes[0]
    seen = ", ".join(f"{c} ({distinct[c]} distinct)" for c in candidates) or "none"
    example = f" {shlex.quote(classes[0])}" if classes else " NAME"
    raise UsageError(
        f"{file}: cannot tell which column holds the label (path column {pcol!r}; others, of "
        f"{len(rows)} rows: {seen}); name it with --label-column{example}"
    )


def _cell(value: Any) -> str:
    """A label cell as text: 0 and False are values, only a missing cell is empty."""
    return "" if value is None else str(value).strip()


def normalize_rel(path: str, src: str) -> str:
    """A label file's path as a '/'-separated path relative to the source folder."""
    path = path.strip().replace("\\", "/")
    if os.path.isabs(path):
        path = os.path.relpath(path, src).replace(os.sep, "/")
    return posixpath.normpath(path)


def read_label_file(
    file: str, src: str, path_column: str | None = None, label_column: str | None = None
) -> dict[str, str]:
    """Map relative path -> label name from a .csv or .jsonl file.

    Raises:
        UsageError: unreadable file, unknown columns, bad rows, or one path with two labels.
    """
    try:
        with open(file, encoding="utf-8-sig", newline="") as f:
            if file.lower().endswith((".jsonl", ".ndjson", ".json")):
                rows = []
                for number, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except ValueError as e:
                        raise UsageError(f"{file}:{number}: not a JSON object ({e})") from None
                    if not isinstance(row, dict):
                        raise UsageError(f"{file}:{number}: expected a JSON object per line")
                    rows.append((number, row))
                columns = sorted({k for _, r in rows for k in r})
            else:
                reader = csv.DictReader(f)
                columns = list(reader.fieldnames or [])
                rows = [(number, row) for number, row in enumerate(reader, 2)]
    except OSError as e:
        raise UsageError(f"cannot read label file {file}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise UsageError(f"label file {file} is not UTF-8 text ({e.reason})") from e
    if not rows:
        raise UsageError(f"label file {file} has no rows")
    pcol = _pick(columns, path_column, PATH_COLUMNS, "path", file)
    try:
        lcol = _pick(columns, label_column, LABEL_COLUMNS, "label", file)
    except UsageError:
        if label_column:
            raise
        lcol = _class_column(file, [r for _, r in rows], [c for c in columns if c != pcol], pcol)
    labels: dict[str, str] = {}
    for number, row in rows:
        path, label = row.get(pcol), row.get(lcol)
        if path in (None, "") or label in (None, ""):
            raise UsageError(f"{file}:{number}: empty {pcol!r} or {lcol!r}")
        rel = normalize_rel(str(path), src)
        label = str(label).strip()
        if labels.get(rel, label) != label:
            raise UsageError(
                f"{file}:{number}: {rel} has two labels, {labels[rel]!r} and {label!r}"
            )
        labels[rel] = label
    return labels


def labels_from_file(
    labels_file: str,
    src: str,
    placed: list[tuple[str, str, SourceFile]],
    skips: list[Skip],
    path_column: str | None,
    label_column: str | None,
) -> tuple[list[tuple[str, SourceFile, str]], list[Skip], bytes]:
    """(split, file, label) of each listed file, the skips with the unlabelled and missing ones,
    and the label file's bytes (part of the inputs' fingerprint).

    The label file inside SRC is not an input; a listed file skipped while listing (not an
    image, unreadable) is counted under that reason once, not again as missing.
    """
    label_of = read_label_file(labels_file, src, path_column, label_column)
    with open(labels_file, "rb") as stream:
        content = stream.read()
    itself = normalize_rel(os.path.abspath(labels_file), os.path.abspath(src))
    skips = [s for s in skips if s.path != itself]
    present = {f.rel for _, _, f in placed} | {s.path for s in skips}
    name = os.path.basename(labels_file)
    labelled = []
    for split, _, f in placed:
        if f.rel in label_of:
            labelled.append((split or "train", f, label_of[f.rel]))
        else:
            skips.append(Skip(f.rel, "no label", f"not listed in {name}"))
    skips += [
        Skip(rel, "missing file", f"listed in {name}") for rel in sorted(set(label_of) - present)
    ]
    return labelled, skips, content
