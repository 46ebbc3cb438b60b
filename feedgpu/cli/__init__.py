"""The `feedgpu` command: parsing (`parser`, `flags`) and printing (`commands`) only; the work
is in the library. One base exception, `FeedgpuError`, is caught here and printed as one line.

Nothing here imports TensorFlow at module load, so `feedgpu --help` answers at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import NoReturn

from feedgpu.cli.parser import build_parser, join_dash_values, unknown_arguments
from feedgpu.errors import FeedgpuError, UsageError


def _setup_logging(quiet: bool, verbose: bool) -> None:
    """feedgpu's own log lines, prefixed "feedgpu:"; other libraries' keep their own format
    (a TensorFlow warning must not read as feedgpu's)."""
    logger = logging.getLogger("feedgpu")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("feedgpu: %(message)s"))
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)


def run() -> NoReturn:
    """The `feedgpu` command: `main`, then an exit that skips the interpreter's teardown.

    By then every file a command wrote is closed (the manifest fsynced) and the output is
    flushed here; the teardown would only free memory object by object, which with TensorFlow
    loaded is a noticeable wait after the last line is printed.
    """
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`| head`): no one reads
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 failure, 2 usage error)."""
    started = time.perf_counter()
    try:
        from feedgpu.cli import commands

        given = sys.argv[1:] if argv is None else argv
        args, extra = build_parser(commands).parse_known_args(join_dash_values(given))
        if extra:  # said by the command that was given, not by the top-level parser
            raise UsageError(unknown_arguments(extra, args))
        args.started = started  # the summary's time is the command's whole wall time
        quiet = bool(getattr(args, "quiet", False) or getattr(args, "json", False))
        _setup_logging(quiet, bool(getattr(args, "verbose", False)))
        return int(args.func(args))
    except UsageError as e:
        print(f"feedgpu: error: {e}", file=sys.stderr)
        return 2
    except FeedgpuError as e:
        print(f"feedgpu: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a file the system refused that no check above foresaw: which, why
        where = f"{e.filename}: " if e.filename else ""
        print(f"feedgpu: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("feedgpu: interrupted; re-run the same command to resume", file=sys.stderr)
        return 130
