"""The report's charts, drawn by matplotlib from a bench-input report's JSON (or a training
monitor's windows) and returned as inline SVG (text kept as text, so a page stays searchable and
small) or as one PNG of the main ones for terminals and chats.

matplotlib is optional (`pip install 'feedgpu[report]'`): `require_matplotlib` says so in one
line before anything is measured.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from feedgpu.bench.schema import HIGHLY_SHARE, SATURATED_SHARE
from feedgpu.errors import UsageError

INSTALL = "pip install 'feedgpu[report]' (or pip install matplotlib)"
WAIT, COMPUTE, UNTIMED, CEILING = "#e8743b", "#3b75af", "#c8c8c8", "#6aa84f"
LINES = (100 * SATURATED_SHARE, 100 * HIGHLY_SHARE)  # the verdicts' lines, in % of step time
LINES_SAID = " and ".join(f"{line:g}%" for line in LINES)
VERDICT_COLOURS = {
    "saturated": "#2e7d32",
    "moderately input-bound": "#ef8f00",
    "highly input-bound": "#c62828",
    "uncertain": "#616161",
}
UNKNOWN = "#616161"


def require_matplotlib() -> None:
    """One line saying how to install matplotlib, unless it is installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(f"a report draws its charts with matplotlib: {INSTALL}") from None


def _styled() -> Any:
    """Our chart styles, set only while a chart is made and saved (never the process's
    matplotlib: a notebook's backend and styles stay as they were)."""
    import matplotlib

    return matplotlib.rc_context(
        {
            "svg.fonttype": "none",  # text as text
            "svg.hashsalt": "feedgpu",  # the same ids every run: the same bytes
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )


def _figure(figsize: tuple[float, float], *grid: int, **kwargs: Any) -> tuple[Any, Any]:
    """A figure of its own (no pyplot, no backend switched) and its axes."""
    require_matplotlib()
    from matplotlib.figure import Figure

    with _styled():
        fig = Figure(figsize=figsize)
        return fig, fig.subplots(*grid, **kwargs)


def _saved(fig: Any, form: str, **kwargs: Any) -> bytes:
    buf = io.BytesIO()
    with _styled():
        fig.savefig(buf, format=form, bbox_inches="tight", **kwargs)
    return buf.getvalue()


def to_svg(fig: Any) -> str:
    """The figure as an inline <svg> element (no XML prolog)."""
    text = _saved(fig, "svg", metadata={"Date": None}).decode("utf-8")
    text = text[text.index("<svg") :]
    # matplotlib's RDF <metadata> block only names URLs (creator, licence): nothing to show
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)


def to_png(fig: Any) -> bytes:
    """The figure as PNG bytes."""
    return _saved(fig, "png", dpi=110)


def timeline(rounds: Sequence[Mapping[str, Any]], title: str) -> Any:
    """Every timed step of a phase as a bar: its input wait under the rest of the step, rounds
    marked; each round's untimed steps (compiling, warm-up, refilling) as grey bars first."""
    fig, ax = _figure((10, 3.2))
    draw_timeline(ax, rounds, title)
    return fig


def draw_timeline(ax: Any, rounds: Sequence[Mapping[str, Any]], title: str) -> None:
    x = 0
    timed = [s for r in rounds for s in r["steps"]]
    typical = sorted(w + c for w, c in timed)[len(timed) // 2] if timed else 1.0
    for number, r in enumerate(rounds):
        if number:
            ax.axvline(x - 0.5, color="#888888", linewidth=0.8, linestyle=":")
        ax.text(x, 0.98, f" round {number + 1}", transform=ax.get_xaxis_transform(), va="top")
        untimed = int(r.get("untimed", 0))
        if untimed:
            ax.bar(
                range(x, x + untimed),
                [typical] * untimed,
                color=UNTIMED,
                hatch="//",
                edgecolor="white",
                width=0.9,
                label="untimed (compiling, warm-up)" if number == 0 else None,
            )
            x += untimed
        waits = [w for w, _ in r["steps"]]
        rest = [c for _, c in r["steps"]]
        xs = range(x, x + len(waits))
        ax.bar(xs, waits, color=WAIT, width=0.9, label="input wait" if number == 0 else None)
        first = number == 0
        ax.bar(
            xs,
            rest,
            bottom=waits,
            color=COMPUTE,
            width=0.9,
            label="the rest of the step" if first else None,
        )
        x += len(waits)
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.06), frameon=False, ncol=3)
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax.set_title(title, loc="left")
    ax.set_ylim(0, max([typical, *(w + c for w, c in timed)]) * 1.25)


def distribution(phases: Mapping[str, Sequence[float]]) -> Any:
    """Step times (ms) of each phase, as overlaid histograms on shared bins."""
    fig, ax = _figure((10, 2.8))
    values = [v for times in phases.values() for v in times]
    if values:
        low, high = min(values), max(values)
        bins = [low + (high - low) * i / 40 for i in range(41)] if high > low else 10
        colours = {"compute ceiling": CEILING, "end to end": COMPUTE}
        for name, times in phases.items():
            ax.hist(
                times,
                bins=bins,
                histtype="stepfilled",
                alpha=0.55,
                color=colours.get(name),
                label=f"{name} ({len(times)} steps)",
            )
        ax.legend(frameon=False)
    ax.set_xlabel("step time, ms")
    ax.set_ylabel("steps")
    ax.set_title("Step time distribution", loc="left")
    return fig


def rates(report: Mapping[str, Any]) -> Any:
    """The three rates with their p10-p90 spreads."""
    fig, ax = _figure((10, 2.2))
    draw_rates(ax, report)
    return fig


def has_spread(spread: Mapping[str, Any] | None) -> TypeGuard[Mapping[str, Any]]:
    """Whether a measurement has a spread to show: one round has none (the text report says
    so too)."""
    return spread is not None and bool(spread) and spread["rounds"] >= 2


# Rates further apart than this are drawn on a log scale: beside a pipeline 1000x faster than
# the model, the ceiling's and end to end's bars would be a pixel wide.
LOG_RATIO = 20


def draw_rates(ax: Any, report: Mapping[str, Any]) -> None:
    names = ["pipeline alone", "compute ceiling", "end to end"]
    parts = [report["pipeline"], report["ceiling"], report["end_to_end"]]
    values = [part["examples_per_s"] for part in parts]
    log = min(values) > 0 and max(values) / min(values) > LOG_RATIO
    if log:
        ax.set_xscale("log")
    for i, part in enumerate(parts):
        value = part["examples_per_s"]
        spread = part.get("spread")
        err = None
        if has_spread(spread):
            err = [[max(0.0, value - spread["p10"])], [max(0.0, spread["p90"] - value)]]
        colour = [WAIT, CEILING, COMPUTE][i]
        ax.barh(i, value, xerr=err, color=colour, capsize=4, height=0.6)
        right = max(value, spread["p90"] if spread else value)
        ax.text(right, i, f"   {value:,.0f}", va="center")
    ax.set_yticks(range(3), names)
    ax.invert_yaxis()
    scale = ", log scale" if log else ""
    ax.set_xlabel(f"examples/s{scale} (bars: median of the rounds; whiskers: p10-p90)")
    ax.set_title("Rates", loc="left")


def ablation(rows: Sequence[Mapping[str, Any]], baseline: float) -> Any:
    """What each stage costs per example (host ms saved when made free), with the range its
    spread allows; a stage without a measurable effect is drawn grey and says so."""
    stages = [r for r in rows if r.get("stage")]
    fig, ax = _figure((10, 0.5 + 0.45 * max(1, len(stages))))
    draw_ablation(ax, rows, baseline)
    return fig


def draw_ablation(ax: Any, rows: Sequence[Mapping[str, Any]], baseline: float) -> None:
    stages = [r for r in rows if r.get("stage")]
    for i, row in enumerate(stages):
        saved = row.get("saved_ms_per_example") or 0.0
        measurable = bool(row.get("measurable")) and saved > 0
        err = None
        spread = row.get("spread")
        if has_spread(spread) and baseline > 0:
            per = [1000 / baseline - 1000 / rate for rate in (spread["p10"], spread["p90"])]
            low, high = min(per), max(per)
            err = [[max(0.0, saved - low)], [max(0.0, high - saved)]]
        if measurable:
            ax.barh(i, saved, xerr=err, color=WAIT, capsize=3, height=0.6)
            right = saved + (err[1][0] if err else 0.0)
            ax.text(right, i, f"   {saved:.3f} ms", va="center")
        else:  # inside the noise: no bar, no whisker to misread
            ax.text(0, i, "  no measurable effect", va="center", color="#777777")
    ax.set_yticks(range(len(stages)), [r["variant"] for r in stages])
    ax.set_ylim(len(stages) - 0.5, -0.5)  # every row in view, the first on top
    ax.set_xlabel("host ms saved per example when the stage is made free")
    ax.set_xlim(left=0)
    ax.set_title("What each input stage costs", loc="left")


def compared(runs: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> Any:
    """Several runs side by side: each one's three rates, and its input share."""
    fig, (left, right) = _figure((10, 0.9 + 0.7 * len(runs)), 1, 2)
    names = ("pipeline", "ceiling", "end_to_end")
    colours = (WAIT, CEILING, COMPUTE)
    height = 0.8 / len(names)
    for j, (name, colour) in enumerate(zip(names, colours, strict=True)):
        values = [r[name]["examples_per_s"] for r in runs]
        ys = [i + j * height for i in range(len(runs))]
        left.barh(ys, values, height=height, color=colour, label=name.replace("_", " "))
    left.set_yticks([i + height for i in range(len(runs))], labels)
    left.invert_yaxis()
    left.set_xlabel("examples/s")
    # above the bars, never over them
    left.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3, frameon=False, fontsize=8)
    shares = [100 * r["input_share"] for r in runs]
    right.barh(
        range(len(runs)), shares, color=[VERDICT_COLOURS.get(r["verdict"], UNKNOWN) for r in runs]
    )
    for i, share in enumerate(shares):
        right.text(share, i, f"  {share:.1f}%", va="center")
    right.set_yticks(range(len(runs)), labels)
    right.invert_yaxis()
    for line in LINES:
        right.axvline(line, color="#888888", linestyle=":")
    right.set_xlabel(f"input wait, % of step time ({LINES_SAID} lines)")
    fig.suptitle("Runs side by side", x=0.02, ha="left")
    return fig


def windows(rows: Sequence[Mapping[str, Any]]) -> Any:
    """A training run's monitored windows: input share and examples/s per window."""
    fig, (top, bottom) = _figure((10, 4.2), 2, 1, sharex=True)
    xs = [f"{r['epoch']}:{r['first_step']}" for r in rows]
    shares = [100 * r["input_share"] for r in rows]
    top.plot(xs, shares, marker="o", color=WAIT)
    for line in LINES:
        top.axhline(line, color="#888888", linestyle=":")
    top.set_ylabel("input wait, %")
    top.set_title(f"Input wait per monitored window ({LINES_SAID} lines)", loc="left")
    bottom.bar(xs, [r.get("examples_per_s") or 0 for r in rows], color=COMPUTE)
    bottom.set_ylabel("examples/s")
    bottom.set_xlabel("window (epoch:first step)")
    return fig


def summary(report: Mapping[str, Any]) -> Any:
    """The main charts of a report as one figure: rates, the end-to-end timeline, and the
    ablation when there is one, under the verdict."""
    ablation_rows = (report.get("ablation") or {}).get("rows")
    fig, axes = _figure((10, 9 if ablation_rows else 6), 3 if ablation_rows else 2, 1)
    draw_rates(axes[0], report)
    rounds = report["end_to_end"].get("rounds") or []
    draw_timeline(axes[1], rounds, "End to end, step by step")
    if ablation_rows:
        draw_ablation(axes[2], ablation_rows, report["ablation"]["baseline_examples_per_s"])
    fig.suptitle(
        f"{report['verdict']}: input wait {report['input_share']:.1%} of step time",
        color=VERDICT_COLOURS.get(report["verdict"], UNKNOWN),
        x=0.02,
        ha="left",
        fontsize=12,
    )
    fig.tight_layout()
    return fig
