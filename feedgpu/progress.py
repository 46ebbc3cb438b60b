"""Progress bars: tqdm on a terminal; on a pipe or a log file, a plain line every few seconds
(tqdm's carriage returns would make one endless line there)."""

from __future__ import annotations

import sys
from typing import Any

# Seconds between lines when stderr is not a terminal (CI logs, `2> log`, `| tee`).
PLAIN_INTERVAL_S = 10.0


class _Lines:
    """A stream that turns each tqdm refresh into a line of its own."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        line = text.replace("\r", "").strip()
        if line:
            self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(total: float | None = None, **kwargs: Any) -> Any:
    """A tqdm bar on stderr (keyword arguments as tqdm's), plain lines when not a terminal."""
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # no monitor thread: worker processes may be forked after this
    stream = sys.stderr
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if terminal:
        return tqdm(total=total, file=stream, dynamic_ncols=True, **kwargs)
    kwargs.setdefault("mininterval", PLAIN_INTERVAL_S)
    return tqdm(total=total, file=_Lines(stream), ncols=100, **kwargs)
