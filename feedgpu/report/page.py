"""One self-contained HTML page of a bench-input run (or of several, side by side, or of a
training monitor's windows): styles and charts inline, nothing fetched, readable offline and
printable. Drawn from the report's JSON (`BenchReport.to_json()` or a saved `--json`), so a
page made later from a saved file shows what the run's own page showed.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from feedgpu.pipeline.spec_checks import ONLY_FOR, other_kind
from feedgpu.report import charts

_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222;
       max-width: 1100px; margin: 24px auto; padding: 0 16px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px;
     border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.banner { color: #fff; padding: 14px 18px; border-radius: 6px; margin: 16px 0; }
.banner .verdict { font-size: 22px; font-weight: 600; }
.banner ul { margin: 8px 0 0; padding-left: 20px; }
table { border-collapse: collapse; margin: 6px 0; } td, th { padding: 3px 10px;
        border-bottom: 1px solid #eee; text-align: left; vertical-align: top;
        overflow-wrap: anywhere; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.muted { color: #777; } figure { margin: 8px 0; } figure svg { max-width: 100%; height: auto; }
@media print { body { margin: 0; } .banner { -webkit-print-color-adjust: exact;
               print-color-adjust: exact; } }
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _table(rows: Sequence[Sequence[Any]], head: Sequence[str], numeric: Sequence[int] = ()) -> str:
    cells = "".join(
        f"<th class='num'>{_e(h)}</th>" if i in numeric else f"<th>{_e(h)}</th>"
        for i, h in enumerate(head)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='num'>{_e(c)}</td>" if i in numeric else f"<td>{_e(c)}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


def _figure(name: str, fig: Any) -> str:
    return f"<figure class='chart' data-chart='{_e(name)}'>{charts.to_svg(fig)}</figure>"


def _section(anchor: str, title: str, body: str) -> str:
    return f"<section id='{_e(anchor)}'><h2>{_e(title)}</h2>{body}</section>"


def _page(title: str, sections: Sequence[str]) -> str:
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>"
        + "".join(sections)
        + "<p class='muted'>Made by feedgpu; everything on this page is in this file.</p>"
        "</body></html>"
    )


def _spread(part: Mapping[str, Any], form: str = ",.0f") -> str:
    spread = part.get("spread")
    if not charts.has_spread(spread):
        return "-"
    return f"{format(spread['p10'], form)}-{format(spread['p90'], form)}"


def banner(report: Mapping[str, Any], anchor: str = "verdict") -> str:
    """The verdict in colour, with the share, its spread and what to change."""
    share = report["end_to_end"].get("share_spread")
    spread = f" (rounds: {share['p10']:.1%}-{share['p90']:.1%})" if charts.has_spread(share) else ""
    why = report.get("uncertain_reason")
    advice = "".join(f"<li>{_e(a)}</li>" for a in report.get("advice") or [])
    return _banner(
        report["verdict"],
        f"input wait is {report['input_share']:.1%} of step time{spread}; end to end runs at "
        f"{report['fraction_of_ceiling']:.0%} of the compute ceiling",
        (f"<div>{_e(why)}</div>" if why else "")
        + (f"<div>What to change:</div><ul>{advice}</ul>" if advice else ""),
        anchor,
    )


def _banner(verdict: str, line: str, extra: str = "", anchor: str = "verdict") -> str:
    """A verdict in its colour, with one line under it (and any markup after)."""
    colour = charts.VERDICT_COLOURS.get(verdict, charts.UNKNOWN)
    return (
        f"<div class='banner' id='{_e(anchor)}' style='background:{colour}'>"
        f"<div class='verdict'>{_e(verdict)}</div><div>{_e(line)}</div>{extra}</div>"
    )


def _rates(report: Mapping[str, Any]) -> str:
    p, c, e = report["pipeline"], report["ceiling"], report["end_to_end"]
    rows = [
        ["pipeline alone", f"{p['examples_per_s']:,.1f}", _spread(p), "-", "-"],
        [
            "compute ceiling",
            f"{c['examples_per_s']:,.1f}",
            _spread(c),
            f"{c['step_ms_median']:.1f} / {c['step_ms_p90']:.1f}",
            "-",
        ],
        [
            "end to end",
            f"{e['examples_per_s']:,.1f}",
            _spread(e),
            f"{e['step_ms_median']:.1f} / {e['step_ms_p90']:.1f}",
            f"{e['input_share']:.1%}",
        ],
    ]
    head = ["phase", "examples/s", "p10-p90", "step ms p50 / p90", "input wait"]
    first = f"<p>First batch of a fresh pipeline: {p['first_batch_s']:.2f} s.</p>"
    return _table(rows, head, numeric=(1, 2, 3, 4)) + first + _figure("rates", charts.rates(report))


def _steps(report: Mapping[str, Any]) -> str:
    e, c = report["end_to_end"], report["ceiling"]
    rounds = e.get("rounds") or []
    if not rounds:
        return "<p class='muted'>Not available: this report holds no step-by-step data.</p>"
    timeline = charts.timeline(rounds, "End to end: each timed step, input wait below the rest")
    phases = {
        "compute ceiling": [w + x for r in c.get("rounds") or [] for w, x in r["steps"]],
        "end to end": [w + x for r in rounds for w, x in r["steps"]],
    }
    return _figure("timeline", timeline) + _figure("distribution", charts.distribution(phases))


def _ablation(report: Mapping[str, Any]) -> str:
    a = report.get("ablation")
    if not a:
        why = (
            "not run: the run was not input-bound"
            if report["verdict"] == "saturated"
            else "not run for this run"
        )
        return f"<p class='muted'>{_e(why)}.</p>"
    rows = [
        [
            r["variant"],
            f"{r['examples_per_s']:,.1f}",
            _spread(r),
            f"{r['speedup']:.2f}x",
            "-" if r.get("saved_ms_per_example") is None else f"{r['saved_ms_per_example']:.3f}",
            _effect(r),
        ]
        for r in a["rows"]
    ]
    head = ["variant", "examples/s", "p10-p90", "vs baseline", "wall ms saved/example", "effect"]
    base = (
        f"<p>Baseline: {a['baseline_examples_per_s']:,.1f} examples/s. A saving is wall time "
        "per example of the pipeline alone; the capacity plan counts CPU time summed over "
        "cores, so a stage that leaves cores idle (waiting on a sequential step or on I/O) "
        "saves more wall time than the whole pipeline's CPU per example.</p>"
    )
    chart = _figure("ablation", charts.ablation(a["rows"], a["baseline_examples_per_s"]))
    return base + chart + _table(rows, head, numeric=(1, 2, 3, 4))


def _effect(row: Mapping[str, Any]) -> str:
    """A row's effect as the text report words it: faster, slower, or inside the noise."""
    if not row.get("measurable"):
        return "no measurable effect"
    return "faster" if row["speedup"] > 1 else "slower"


def _capacity(report: Mapping[str, Any]) -> str:
    plan = report["capacity"]
    rows = [
        ["host CPU per example (summed over cores)", f"{plan['host_cpu_ms_per_example']:.3f} ms"],
        [
            "cores to feed the ceiling",
            f"{plan['cores_needed']:.2f} (this host: {plan['host_cores']})",
        ],
        ["hosts or service workers of this size", plan["hosts_needed"]],
    ]
    if plan.get("service_workers"):
        rows.append(
            [
                "tf.data service workers",
                f"{plan['service_workers']} now, {plan['service_workers_needed']} needed",
            ]
        )
    return _table(rows, ["", ""])


def _pipeline(report: Mapping[str, Any]) -> str:
    spec = report.get("spec")
    if spec is None:
        decisions = "<p class='muted'>Your own tf.data pipeline: no feedgpu spec.</p>"
    else:
        reasons = dict(report.get("spec_reasons") or [])
        other = ONLY_FOR[other_kind(report["kind"])]  # an image run has no max_length
        rows = [[k, v, reasons.get(k, "")] for k, v in sorted(spec.items()) if k not in other]
        host = "chosen on the host it runs on (not saved with the spec)"
        rows += [[k, host, why] for k, why in sorted(reasons.items()) if k not in spec]
        decisions = _table(rows, ["field", "value", "why"])
    stages = report.get("stages")
    if not stages:
        traced = (
            "<p class='muted'>Per-stage parallelism and buffers: not available (this run did "
            "not trace its pipeline; run bench-input with --report or --json).</p>"
        )
    else:
        rows = []
        for s in stages["stages"]:
            for name, value in s["settings"].items():
                span = s.get("ranges", {}).get(name)
                shown = f"{value} (traced {span[0]}-{span[1]})" if span else value
                auto = {True: "yes", False: "no", None: "-"}[s.get("autotune")]
                if s.get("autotune") and spec is not None and not spec.get("autotune"):
                    auto = "AUTOTUNE value, autotuner off"  # fixed when the pipeline starts
                rows.append([s["stage"], name, shown, auto, s["path"]])
        seen = [s["stage"] for s in stages["stages"]]
        for kind, (what, prefixes) in _PARALLEL_STAGES.items():
            if spec is not None and not any(n.startswith(prefixes) for n in seen):
                rows.append([kind, what, "not available", "-", "TensorFlow traced nothing for it"])
        traced = (
            f"<p>As TensorFlow ran it: {_e(stages['source'])}. A stage that did not run while "
            "traced (upstream of a filled cache) is not available.</p>"
            + _table(rows, ["stage", "setting", "value", "autotune", "where"])
        )
    return decisions + traced


# The parallel stages every feedgpu pipeline has, and the names TensorFlow traces them under
# (a map fused with its batch traces as MapAndBatch).
_PARALLEL_STAGES = {
    "ParallelInterleave": ("parallel reading of the shard files", ("ParallelInterleave",)),
    "ParallelMap": ("parallel maps (parsing, decoding)", ("ParallelMap", "MapAndBatch")),
    "Prefetch": ("the prefetch buffer", ("Prefetch",)),
}


def _environment(report: Mapping[str, Any]) -> str:
    d, run, env = report["device"], report.get("run") or {}, report.get("environment") or {}
    rows = [
        ["device", f"{d['device_type']} {', '.join(d.get('gpus') or [])}".strip()],
        ["precision", run.get("policy", d["precision"])],
        ["XLA", f"{'on' if run.get('xla', d['xla']) else 'off'}: {run.get('xla_reason', '')}"],
        ["replicas", d["num_replicas"]],
        ["model", report["model"]],
        ["batch", report["batch_size"]],
        ["data", f"{report['data_dir']} [{report['split']}]"],
        *[[k, v] for k, v in sorted(env.items())],
    ]
    return _table(rows, ["", ""])


def render_html(report: Mapping[str, Any]) -> str:
    """One run's page: the verdict, rates, step timeline and distribution, the ablation, the
    capacity plan, the pipeline as built, the environment."""
    title = f"feedgpu bench-input: {report['model']} on {report['data_dir']}"
    return _page(title, [f"<h1>{_e(title)}</h1>", *_run_sections(report)])


def _run_sections(report: Mapping[str, Any], suffix: str = "") -> list[str]:
    """One run's banner and sections, their anchors ending in suffix (several runs a page)."""
    notes = [*(report.get("notes") or []), *(report["device"].get("notes") or [])]
    listed = "<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>"
    return [
        banner(report, f"verdict{suffix}"),
        *([_section(f"notes{suffix}", "Notes", listed)] if notes else []),
        _section(f"rates{suffix}", "Rates", _rates(report)),
        _section(f"steps{suffix}", "Steps", _steps(report)),
        _section(f"ablation{suffix}", "What each input stage costs", _ablation(report)),
        _section(f"capacity{suffix}", "Capacity plan", _capacity(report)),
        _section(f"pipeline{suffix}", "The pipeline as built", _pipeline(report)),
        _section(f"environment{suffix}", "Environment", _environment(report)),
    ]


def render_comparison(reports: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> str:
    """Several runs side by side (before and after a fix, two hosts, two pipelines), then
    each run's own page below."""
    rows = [
        [
            label,
            f"{r['data_dir']} [{r['split']}]",
            f"{r['model']}, batch {r['batch_size']}",
            _changed(r, reports[0]) if i else "(the first run)",
            r["verdict"],
            f"{r['input_share']:.1%}",
            f"{r['pipeline']['examples_per_s']:,.1f}",
            f"{r['ceiling']['examples_per_s']:,.1f}",
            f"{r['end_to_end']['examples_per_s']:,.1f}",
            f"{r['fraction_of_ceiling']:.0%}",
        ]
        for i, (label, r) in enumerate(zip(labels, reports, strict=True))
    ]
    head = ["run", "data", "model", "changed from the first", "verdict", "input wait"]
    head += ["pipeline", "ceiling", "end to end", "of ceiling"]
    side = _table(rows, head, numeric=(5, 6, 7, 8, 9)) + _figure(
        "compared", charts.compared(reports, labels)
    )
    parts = [
        f"<h1>feedgpu: {len(reports)} runs side by side</h1>",
        _section("compared", "Side by side", side),
    ]
    for label, r in zip(labels, reports, strict=True):
        parts += [f"<h1 id='run-{_e(label)}'>{_e(label)}</h1>", *_run_sections(r, f"-{label}")]
    return _page("feedgpu: runs side by side", parts)


def _changed(run: Mapping[str, Any], first: Mapping[str, Any]) -> str:
    """What this run was given that the first was not: spec fields, the batches' shape, the
    step's precision and XLA, the device's replicas."""
    changes = []
    for part in ("spec", "ran_with", "run"):
        mine, theirs = run.get(part) or {}, first.get(part) or {}
        changes += [
            f"{k} {theirs.get(k)} -> {mine.get(k)}"
            for k in sorted(set(mine) | set(theirs))
            if mine.get(k) != theirs.get(k) and k not in ("compile_s", "other_xla_step_ms")
        ]
    if run["device"]["num_replicas"] != first["device"]["num_replicas"]:
        changes.append(
            f"replicas {first['device']['num_replicas']} -> {run['device']['num_replicas']}"
        )
    return "; ".join(changes) or "nothing recorded"


def render_monitor(windows: Sequence[Mapping[str, Any]], title: str) -> str:
    """A training run's monitored windows: input share, examples/s and verdict per window."""
    rows = [
        [
            f"{w['epoch']}:{w['first_step']}",
            w["steps"],
            f"{w['input_share']:.1%}",
            "-" if w.get("examples_per_s") is None else f"{w['examples_per_s']:,.1f}",
            f"{w['step_ms']:.1f}",
            w["verdict"],
        ]
        for w in windows
    ]
    head = ["window (epoch:step)", "steps", "input wait", "examples/s", "step ms", "verdict"]
    body = (
        _figure("windows", charts.windows(windows)) + _table(rows, head, numeric=(1, 2, 3, 4))
        if windows
        else "<p class='muted'>No window was traced (the run was shorter than the first).</p>"
    )
    last = windows[-1] if windows else None
    verdict = (
        _banner(last["verdict"], f"last window: input wait {last['input_share']:.1%} of step time")
        if last
        else ""
    )
    return _page(title, [f"<h1>{_e(title)}</h1>", verdict, _section("windows", "Windows", body)])
