"""Progress bars: tqdm on a terminal; on a pipe or a log file, a plain line every few seconds
(tqdm's carriage returns would make one endless line there)."""

from __future__ import annotations

import re
import sys
from typing import Any

_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Seconds between lines when stderr is not a terminal (CI logs, `2> log`, `| tee`).
PLAIN_INTERVAL_S = 10.0


class _Lines:
    """A stream that turns each tqdm refresh into a line of its own."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        line = _ESCAPES.sub("", text.replace("\r", "")).strip()  # no cursor moves in a file
        if line:
            self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(total: float | None = None, **kwargs: Any) -> Any:
    """A tqdm bar on stderr (keyword arguments as tqdm's), plain lines when not a terminal."""
    from tqdm import tqdm

    stream = sys.stderr
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if terminal:
        kwargs.update(file=stream, dynamic_ncols=True)
    else:
        kwargs.setdefault("mininterval", PLAIN_INTERVAL_S)
        kwargs.update(file=_Lines(stream), ncols=100)
    # No monitor thread (worker processes may be forked after this), without changing tqdm's
    # setting for the rest of the process: the thread is started, or not, when a bar is made.
    interval = tqdm.monitor_interval
    tqdm.monitor_interval = 0
    try:
        return tqdm(total=total, **kwargs)
    finally:
        tqdm.monitor_interval = interval
