"""Reports a user would rather look at than read: one self-contained HTML page (or one PNG of
the main charts) of a bench-input run, of several runs side by side, or of a training
monitor's windows. Drawn from the reports' JSON, after everything is measured."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from feedgpu import storage
from feedgpu.bench.schema import SCHEMA_ID
from feedgpu.errors import UsageError

SUFFIXES = (".html", ".htm", ".png")
SCHEMA_PREFIX = SCHEMA_ID.rsplit("/", 1)[0] + "/"  # any version of the report's schema


def check_report_path(path: str) -> None:
    """Refuse, before anything is measured, a report path of another kind or without
    matplotlib installed.

    Raises:
        UsageError: one line saying what to give or to install.
    """
    from feedgpu.report.charts import require_matplotlib

    if not path.lower().endswith(SUFFIXES):
        raise UsageError(f"--report {path}: name an .html page or a .png picture")
    require_matplotlib()


def write_report(
    path: str, reports: Sequence[Mapping[str, Any]], labels: Sequence[str] | None = None
) -> None:
    """One run's page (or picture), or several runs side by side, written atomically."""
    from feedgpu.report import charts, page

    check_report_path(path)
    if not reports:
        raise UsageError("a report needs at least one bench-input JSON")
    if path.lower().endswith(".png"):
        if len(reports) > 1:
            raise UsageError(f"{path}: a picture shows one run; write an .html page to compare")
        storage.write_atomic(path, charts.to_png(charts.summary(reports[0])))
        return
    if len(reports) == 1:
        text = page.render_html(reports[0])
    else:
        text = page.render_comparison(
            reports, labels or [f"run {i + 1}" for i in range(len(reports))]
        )
    storage.write_atomic(path, text.encode("utf-8"))


def write_monitor_report(path: str, windows: Sequence[Mapping[str, Any]], model: str) -> None:
    """A training run's monitored windows as a page (or their chart as a picture)."""
    from feedgpu.report import charts, page

    check_report_path(path)
    if path.lower().endswith(".png"):
        storage.write_atomic(path, charts.to_png(charts.windows(windows)))
        return
    text = page.render_monitor(windows, f"feedgpu FeedMonitor: {model}, input wait while training")
    storage.write_atomic(path, text.encode("utf-8"))


def load_report(path: str) -> dict[str, Any]:
    """A saved `bench-input --json` report.

    Raises:
        UsageError: not readable, not JSON, or not a bench-input report.
    """
    try:
        data = json.loads(storage.read_bytes(path))  # local or gs://, as reports are written
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(
            f"{path} is not JSON ({e}); give a file written by bench-input --json"
        ) from None
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith(SCHEMA_PREFIX):
        raise UsageError(f"{path} is not a bench-input report (no {SCHEMA_PREFIX}N schema)")
    return data


def label_of(path: str) -> str:
    """A run's name in a comparison: its file's name without the extension."""
    return os.path.splitext(os.path.basename(path))[0]
