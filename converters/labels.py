"""Label files for flat folders: CSV or JSONL rows that pair a path with a class."""

from __future__ import annotations

import csv
import json
import os
import posixpath

from feedgpu.errors import UsageError

PATH_COLUMNS = ("path", "file", "filename", "file_name", "image", "image_path", "filepath")
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
    lcol = _pick(columns, label_column, LABEL_COLUMNS, "label", file)
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
