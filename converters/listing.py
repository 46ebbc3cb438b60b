"""Walking a source folder the way users' folders really are: symlinks, loops, hidden files.

Every file met is either returned or reported as a `Skip` with a reason, so a conversion can
account for every input.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from feedgpu import storage
from feedgpu.convert.plan import Skip
from feedgpu.errors import InputError, UsageError

SPLIT_FOLDERS = {
    "train": "train",
    "validation": "validation",
    "val": "validation",
    "valid": "validation",
    "test": "test",
}
# Reasons that are not errors in a user's folder: --strict does not stop for them.
BENIGN_REASONS = frozenset({"hidden", "not an image", "not a text file"})


@dataclass(frozen=True)
class SourceFile:
    """A file found under the source folder.

    Attributes:
        rel: path relative to the source, '/'-separated (stored in examples, used for hashing).
        path: the path to open.
        size: bytes.
        mtime_ns: modification time, part of the inputs fingerprint.
    """

    rel: str
    path: str
    size: int
    mtime_ns: int


def walk_source(
    src: str, accept: Callable[[str], bool], reject_reason: str
) -> tuple[list[SourceFile], list[Skip]]:
    """All regular files under src, following symlinks, sorted by relative path.

    Args:
        accept: called with a file name; False reports the file as skipped with reject_reason.

    Raises:
        UsageError: src is not a readable folder.
    """
    if storage.is_remote(src):
        return _walk_remote(src, accept, reject_reason)
    if not os.path.isdir(src):
        what = "is a file, not a folder" if os.path.exists(src) else "does not exist"
        raise UsageError(f"{src} {what}; give the folder that holds your data")
    files: list[SourceFile] = []
    skips: list[Skip] = []
    root_stat = os.stat(src)
    seen = {(root_stat.st_dev, root_stat.st_ino)}
    stack: list[tuple[str, str, frozenset[tuple[int, int]]]] = [("", src, frozenset(seen))]
    while stack:
        rel_dir, abs_dir, ancestors = stack.pop()
        try:
            entries = sorted(os.scandir(abs_dir), key=lambda e: e.name)
        except OSError as e:
            skips.append(Skip(rel_dir or ".", "unreadable", f"cannot list folder: {e.strerror}"))
            continue
        subdirs = []
        for entry in entries:
            rel = posixpath.join(rel_dir, entry.name) if rel_dir else entry.name
            if entry.name.startswith("."):
                kind = "folder" if entry.is_dir() else "file"
                skips.append(Skip(rel, "hidden", f"hidden {kind} ignored"))
                continue
            if not _utf8(entry.name):  # ids, labels and the manifest name it in UTF-8
                shown = rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                skips.append(Skip(shown, "name not UTF-8", "rename it to read it"))
                continue
            try:
                st = os.stat(entry.path)  # follows symlinks
            except FileNotFoundError:
                skips.append(
                    Skip(rel, "broken symlink", f"points to missing {os.readlink(entry.path)}")
                )
                continue
            except OSError as e:
                skips.append(Skip(rel, "unreadable", e.strerror or str(e)))
                continue
            if entry.is_dir():
                key = (st.st_dev, st.st_ino)
                if key in ancestors:
                    skips.append(Skip(rel, "symlink loop", "links back to a folder above it"))
                elif key in seen:
                    skips.append(
                        Skip(rel, "duplicate folder", "a symlink to a folder already read")
                    )
                else:
                    seen.add(key)
                    subdirs.append((rel, entry.path, ancestors | {key}))
            elif not entry.is_file():
                skips.append(Skip(rel, "not a regular file", "device, socket or pipe"))
            elif not accept(entry.name):
                skips.append(
                    Skip(
                        rel,
                        reject_reason,
                        f"extension {os.path.splitext(entry.name)[1] or '(none)'}",
                    )
                )
            else:
                files.append(SourceFile(rel, entry.path, st.st_size, st.st_mtime_ns))
        stack.extend(reversed(subdirs))
    files.sort(key=lambda f: f.rel)
    return files, skips


def _walk_remote(
    src: str, accept: Callable[[str], bool], reject_reason: str
) -> tuple[list[SourceFile], list[Skip]]:
    """walk_source for gs:// and other tf.io.gfile file systems."""
    if not storage.isdir(src):
        raise UsageError(f"{src} is not a folder; give the folder that holds your data")
    files: list[SourceFile] = []
    skips: list[Skip] = []
    for rel, size, mtime_ns in storage.walk_files(src):
        parts = rel.split("/")
        if any(p.startswith(".") for p in parts):
            skips.append(Skip(rel, "hidden", "hidden file ignored"))
        elif not accept(parts[-1]):
            extension = posixpath.splitext(parts[-1])[1] or "(none)"
            skips.append(Skip(rel, reject_reason, f"extension {extension}"))
        else:
            files.append(SourceFile(rel, storage.join(src, rel), size, mtime_ns))
    return files, skips


def _utf8(name: str) -> bool:
    """Whether a file name (as os gives it: undecodable bytes as surrogates) is UTF-8."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def fingerprint_files(files: Iterable[SourceFile], *extra: bytes) -> str:
    """Hash of the listing (paths, sizes, mtimes): cheap, and changes when any input changes."""
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.rel}\0{f.size}\0{f.mtime_ns}\n".encode())
    for e in extra:
        h.update(e)
    return h.hexdigest()


def parse_split_fractions(spec: str) -> dict[str, float]:
    """'train=0.9,validation=0.1' -> fractions, checked to be names and to sum to 1."""
    fractions: dict[str, float] = {}
    for part in spec.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        try:
            fractions[name] = float(value)
        except ValueError:
            raise UsageError(
                f"--split {spec!r}: {part!r} is not NAME=FRACTION (e.g. train=0.9)"
            ) from None
        if not name.isidentifier() or fractions[name] < 0:
            raise UsageError(
                f"--split {spec!r}: bad split {part!r}; use names like train, validation"
            )
    if abs(sum(fractions.values()) - 1) > 1e-6:
        raise UsageError(
            f"--split {spec!r}: fractions add up to {sum(fractions.values()):g}, not 1"
        )
    return fractions


_GZ = re.compile(r"\.gz(?=(:\d+)?$)", re.IGNORECASE)  # a.jsonl.gz:7 splits as a.jsonl:7


def hash_split(rel: str, fractions: dict[str, float]) -> str:
    """Deterministic split for a path (or a document, "path:line"): the same file lands in the
    same split on every run, and whether or not it is gzip-compressed."""
    if len(fractions) == 1:  # one split (the usual train=1.0): nothing to hash
        return next(iter(fractions))
    key = _GZ.sub("", rel)
    point = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    total = 0.0
    for name, fraction in fractions.items():
        total += fraction
        if point < total:
            return name
    return list(fractions)[-1]


def split_folders(files: Iterable[SourceFile]) -> bool:
    """True when every top-level folder is a split name (train/, validation/, test/)."""
    tops = {f.rel.split("/", 1)[0] for f in files if "/" in f.rel}
    return bool(tops) and all(t in SPLIT_FOLDERS for t in tops)


def assign_splits(
    files: list[SourceFile], split_spec: str | None
) -> list[tuple[str, str, SourceFile]]:
    """(split, path below the split folder, file) for each file.

    Raises:
        UsageError: --split given for a folder that already has split folders.
    """
    if split_folders(files):
        if split_spec:
            raise UsageError("the source already has train/validation/test folders; drop --split")
        out = []
        for f in files:
            top, _, rest = f.rel.partition("/")
            out.append((SPLIT_FOLDERS[top], rest, f) if rest else ("", f.rel, f))
        return out
    fractions = parse_split_fractions(split_spec) if split_spec else {"train": 1.0}
    return [(hash_split(f.rel, fractions), f.rel, f) for f in files]


def sort_labels(labels: Iterable[str]) -> list[str]:
    """Class names in index order: numerically if all are integers, else alphabetically."""
    unique = set(labels)
    if unique and all(s.lstrip("-").isdigit() for s in unique):
        return sorted(unique, key=int)
    return sorted(unique)


def check_strict(skips: Iterable[Skip], strict: bool) -> None:
    """With --strict, stop at the first skipped input that is a real problem."""
    if not strict:
        return
    for s in skips:
        if s.reason not in BENIGN_REASONS:
            raise InputError(f"cannot use {s.path}: {s.reason}, {s.detail} (stopped by --strict)")
