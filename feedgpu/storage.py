"""File access for local paths and, through `tf.io.gfile`, for URLs such as gs://.

Local paths use the standard library, so converter workers never import TensorFlow; a path with a
scheme (gs://, s3://, hdfs://) is handed to `tf.io.gfile`, imported only then.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
import uuid
from typing import IO, Any

from feedgpu.errors import UsageError


def is_remote(path: str) -> bool:
    """True for URLs (gs://bucket/x) that only `tf.io.gfile` can open."""
    return "://" in path and not path.startswith("file://")


def _gfile() -> Any:
    import tensorflow as tf  # only for remote paths

    return tf.io.gfile


def join(*parts: str) -> str:
    """Join path parts with '/' for URLs and os.path rules locally."""
    if is_remote(parts[0]):
        return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts))
    return os.path.join(*parts)


def open_file(path: str, mode: str) -> IO[Any]:
    """Open a local or remote file."""
    if is_remote(path):
        return _gfile().GFile(path, mode)
    return open(path, mode)


def create_streamed(path: str) -> IO[bytes]:
    """A new file for one large sequential write (a shard), through the page cache: training
    right after a conversion then reads the shards from memory. (Writing around the page cache
    with O_DIRECT measured no faster: benchmarks/RESULTS.md, "Decisions".)"""
    if is_remote(path):
        stream: IO[bytes] = _gfile().GFile(path, "wb")
        return stream
    return open(path, "wb")


def exists(path: str) -> bool:
    """True if a file or folder exists at path."""
    return bool(_gfile().exists(path)) if is_remote(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    """True if path is a folder (a prefix with objects under it, remotely)."""
    return bool(_gfile().isdir(path)) if is_remote(path) else os.path.isdir(path)


def makedirs(path: str) -> None:
    """Create a folder and its parents; fine if it exists."""
    if is_remote(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def ensure_output_dir(path: str, finished_marker: str = "manifest.json") -> None:
    """Make path a folder this process can write in, or say in one line why it cannot be.

    Checked before any work (listing, a vocabulary to train): a conversion that can only fail
    at its end fails first. Folders made for the check are removed again, so a run that fails
    before writing (a SRC that does not exist) leaves no empty OUT. A folder holding a finished
    dataset (finished_marker) is left to the run, whose re-run writes nothing: it may sit on a
    read-only disk. Remote stores are checked by their first write.

    Raises:
        UsageError: path is empty, a file, under a file, or cannot be created or written.
    """
    if is_remote(path):
        return
    if not path:
        raise UsageError("output: an empty path; give a folder")
    if os.path.isfile(os.path.join(path, finished_marker)):
        return
    made = []  # the folders this check creates, deepest first: removed again after it
    folder = os.path.abspath(path)
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        made.append(folder)
        folder = os.path.dirname(folder)
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".feedgpu-probe-", dir=path)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise UsageError(output_error(path, e)) from None
    finally:  # the run makes OUT once it has something to write: a failed plan leaves none
        for folder in made:  # only if still empty: another run may have written there since
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def output_error(path: str, e: OSError) -> str:
    """One line for an output folder the system refused, saying what to give instead."""
    if e.errno in (errno.EEXIST, errno.ENOTDIR, errno.ENOENT):
        blocker = _not_a_folder(path)
        if blocker == path:
            return f"output {path} is a file, not a folder; give a new or empty folder"
        if blocker:
            return f"output {path}: {blocker}; give another path"
    if e.errno == errno.EROFS:
        return f"output {path} is on a read-only file system; give a folder on a writable disk"
    if e.errno in (errno.EACCES, errno.EPERM):
        return f"output {path}: permission denied; give a folder you can write in"
    if e.errno == errno.ENOSPC:
        return f"output {path}: no space left on the device; free some or give another disk"
    return f"output {path} cannot be written ({e.strerror}); give a folder you can write in"


def _not_a_folder(path: str) -> str | None:
    """The first part of path, as written, that is not a folder (what stopped makedirs): the
    path itself, or "PART is a file" / "PART is a broken symlink"; None if none is found."""
    parts = path.split(os.sep)
    for i in range(1, len(parts) + 1):
        part = os.sep.join(parts[:i]) or os.sep
        if not os.path.lexists(part) or os.path.isdir(part):
            continue
        if part == path and os.path.isfile(part):
            return path
        what = "a broken symlink" if os.path.islink(part) and not os.path.exists(part) else "a file"
        return f"{part} is {what}, not a folder"
    return None


def listdir(path: str) -> list[str]:
    """Names in a folder, sorted; empty if the folder does not exist."""
    if not exists(path):
        return []
    names = _gfile().listdir(path) if is_remote(path) else os.listdir(path)
    return sorted(n.rstrip("/") for n in names)


def replace(src: str, dst: str) -> None:
    """Rename src to dst, replacing dst: the commit step of every atomic write."""
    if is_remote(src):
        _gfile().rename(src, dst, overwrite=True)
    else:
        os.replace(src, dst)


def remove(path: str) -> None:
    """Delete a file or a folder tree if it exists."""
    if is_remote(path):
        if _gfile().isdir(path):
            _gfile().rmtree(path)
        elif _gfile().exists(path):
            _gfile().remove(path)
    elif os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def write_atomic(path: str, data: bytes, *, durable: bool = False) -> None:
    """Write a whole small file under a temporary name, then rename it into place. The name is
    the writer's own (two threads of a process may write one path at once), and a write that
    fails leaves it behind only if removing it fails too.

    Args:
        durable: fsync before the rename, so the file survives a power loss once it exists.
    """
    tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with open_file(tmp, "wb") as f:
            f.write(data)
            if durable and not is_remote(path):
                f.flush()
                os.fsync(f.fileno())
        replace(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            remove(tmp)
        raise


def sync_files(paths: list[str]) -> None:
    """Flush local files to disk (remote stores commit on close)."""
    for path in paths:
        if not is_remote(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def read_bytes(path: str) -> bytes:
    """The whole content of a file.

    Raises:
        OSError: it cannot be read (TensorFlow's errors for remote paths included).
    """
    if not is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    import tensorflow as tf

    try:
        with _gfile().GFile(path, "rb") as f:
            remote: bytes = f.read()
    except tf.errors.OpError as e:
        raise OSError(e.message) from e
    return remote


def file_size(path: str) -> int:
    """A file's size in bytes.

    Raises:
        OSError: it does not exist or cannot be read.
    """
    if not is_remote(path):
        return os.path.getsize(path)
    import tensorflow as tf

    try:
        return int(_gfile().stat(path).length)
    except tf.errors.OpError as e:
        raise OSError(e.message) from e


def walk_files(root: str) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime_ns) of every file under a remote folder, sorted.

    Object stores have no symlinks, devices or loops: a listing is all there is.
    """
    out = []
    gfile = _gfile()
    for folder, _, names in gfile.walk(root):
        for name in names:
            path = join(folder, name)
            stat = gfile.stat(path)
            rel = path[len(root.rstrip("/")) + 1 :]
            out.append((rel, int(stat.length), int(stat.mtime_nsec)))
    return sorted(out)


def write_json(path: str, obj: Any, *, durable: bool = False) -> None:
    """Deterministic, readable JSON, written atomically: the text of `json.dumps(obj,
    indent=2, sort_keys=True, ensure_ascii=False)` and a newline. Made by orjson with each
    float (and int beyond 64 bits) as the standard library writes it (`_as_python`): the
    standard library's encoder is its pure-Python one once asked to indent, 2.5 ms for a text
    dataset's 70 KB manifest at a conversion's end while both cores wait, this 0.75
    (benchmarks/RESULTS.md, "Decisions"). What orjson would write otherwise
    (a key not a str, a type of another library) goes to the standard library."""
    import orjson  # here: ~8 ms at import, which a reader of datasets never needs

    try:
        options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
        text = orjson.dumps(_as_python(obj, orjson.Fragment), option=options)
    except TypeError:  # orjson.JSONEncodeError is one; its own error, if any, is json's to raise
        text = (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    write_atomic(path, text, durable=durable)


def _as_python(value: Any, fragment: Any) -> Any:
    """value for orjson to write as the standard library would: floats (1e-05, NaN, which
    orjson writes 0.00001 and null) and ints beyond 64 bits (which it refuses) as the
    standard library's text. Raises TypeError for anything but str-keyed dicts, lists,
    tuples, str, int, float, bool and None (subclasses too). fragment: `orjson.Fragment`."""
    kind = type(value)
    if kind is dict:
        if not all(type(key) is str for key in value):
            raise TypeError("a key not a str")
        return {key: _as_python(item, fragment) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [_as_python(item, fragment) for item in value]
    if kind is int:
        return value if -(1 << 63) <= value < 1 << 64 else fragment(str(value))
    if kind is float:
        return fragment(json.dumps(value))
    if value is None or kind is bool or kind is str:
        return value
    raise TypeError(f"{kind.__name__} is left to json")
