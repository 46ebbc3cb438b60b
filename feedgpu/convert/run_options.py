"""How a conversion runs: one frozen `RunOptions` every converter passes to `write_dataset`,
which alone chooses the executor from it. None of these change the bytes written."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from feedgpu.convert.plan import default_workers
from feedgpu.errors import UsageError

RUNNERS = ("local", "beam")


@dataclass(frozen=True)
class RunOptions:
    """How a conversion runs (the dataset's bytes are the same whatever these are).

    Attributes:
        workers: processes (images) or tokenizer threads (text); None: every core.
        runner: "local" (a process pool, or threads) or "beam" (Apache Beam pipelines).
        beam_options: Beam's flags (None: DirectRunner on this machine).
        strict: stop at the first bad input instead of skipping it.
        overwrite: replace a finished dataset converted with other options.
        allow_skips: finish a run that skipped more inputs for one reason than it kept.
        quiet: no progress bars (and Beam workers log warnings only).

    Raises:
        UsageError: an unknown runner, fewer than one worker, or Beam asked for but not
            installed (said before anything is listed).
    """

    workers: int | None = None
    runner: str = "local"
    beam_options: str | None = None
    strict: bool = False
    overwrite: bool = False
    allow_skips: bool = False
    quiet: bool = False

    def __post_init__(self) -> None:
        if self.runner not in RUNNERS:
            raise UsageError(f"runner {self.runner!r}: choose {' or '.join(RUNNERS)}")
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"--workers {self.workers}: must be at least 1")
        if self.on_beam:
            from feedgpu.convert.beam import require_beam

            require_beam()

    @classmethod
    def given(cls, run: RunOptions | None, keywords: dict[str, Any]) -> RunOptions:
        """`run`, or the options the keywords name (a converter takes either).

        Raises:
            UsageError: both given (the keywords would be silently dropped).
        """
        if run is not None and keywords:
            raise UsageError(
                f"give run=RunOptions(...) or {', '.join(sorted(keywords))}=..., not both"
            )
        return run or cls(**keywords)

    @property
    def on_beam(self) -> bool:
        """Whether the work runs as Apache Beam pipelines."""
        return self.runner == "beam"

    def for_paths(self, *paths: str) -> RunOptions:
        """These options for a conversion reading or writing `paths`: one worker, in this
        process, when one is in TensorFlow's ram:// file system (it lives in this process)."""
        if any(p.startswith("ram://") for p in paths) and self.workers != 1:
            return replace(self, workers=1)
        return self

    def worker_count(self) -> int:
        """Workers to start: the ones asked for, else every core this process may use."""
        return self.workers or default_workers()

    def beam_flags(self) -> str:
        """The Beam flags to run with (see `beam.beam_flags`)."""
        from feedgpu.convert.beam import beam_flags

        return beam_flags(self.beam_options, self.quiet)
