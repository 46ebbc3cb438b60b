"""Reports: one self-contained HTML page of a real bench-input run (its sections, its numbers
equal to the JSON's, nothing fetched), the pipeline's per-stage settings equal to what
TensorFlow's trace says, saved runs side by side, FeedMonitor's page after a real model.fit,
a PNG, and one line when matplotlib is missing.
"""

from __future__ import annotations

import glob
import html
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import feedgpu
from feedgpu.bench.device import DeviceConfig, resolve_devices
from feedgpu.bench.spread import ROUNDS
from feedgpu.bench.stage_settings import trace_stage_settings
from feedgpu.cli import main
from feedgpu.report import charts, load_report, write_report
from feedgpu.report.page import render_html

# One real run for the module, built once: its tests stay on one xdist worker.
pytestmark = pytest.mark.xdist_group("report")
SECTIONS = ("verdict", "rates", "steps", "ablation", "capacity", "pipeline", "environment")


@pytest.fixture(scope="module")
def run(image_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real bench-input run on the test run's images, with a report and its JSON."""
    out = tmp_path_factory.mktemp("report")
    options = feedgpu.BenchOptions(
        batch_size=8,
        seconds=0.6,
        ablation="always",
        ablation_seconds=0.3,
        quiet=True,
        overrides={"image_size": (32, 32)},
        report=str(out / "run.html"),
    )
    report = feedgpu.bench_input(
        str(image_data), options, setup=resolve_devices(DeviceConfig(xla=False))
    )
    data = report.to_json()
    (out / "run.json").write_text(json.dumps(data))
    return {"dir": out, "json": data, "html": (out / "run.html").read_text()}


def test_the_page_holds_every_section_and_chart(run: dict[str, Any]) -> None:
    page = run["html"]
    for section in SECTIONS:
        assert f"id='{section}'" in page, section
    charts = re.findall(r"data-chart='(\w+)'", page)
    assert charts == ["rates", "timeline", "distribution", "ablation"]
    assert page.count("<svg") == len(charts)


def test_the_page_s_numbers_are_the_json_s(run: dict[str, Any]) -> None:
    page, data = run["html"], run["json"]
    assert f"<div class='verdict'>{data['verdict']}</div>" in page
    assert f"input wait is {data['input_share']:.1%} of step time" in page
    for part in ("pipeline", "ceiling", "end_to_end"):
        assert f"<td class='num'>{data[part]['examples_per_s']:,.1f}</td>" in page
    rounds = data["end_to_end"]["rounds"]
    assert (
        len(rounds) == ROUNDS
        and sum(len(r["steps"]) for r in rounds) == data["end_to_end"]["num_steps"]
    )
    for row in data["ablation"]["rows"]:
        assert f"<td>{row['variant']}</td>" in page
    for field, reason in data["spec_reasons"]:
        assert f"<td>{field}</td>" in page and reason.replace("'", "&#x27;") in page
    for name, value in data["environment"].items():  # the environment table's rows
        assert f"<tr><td>{name}</td><td>{html.escape(str(value))}</td></tr>" in page, name


def test_the_page_fetches_nothing(run: dict[str, Any]) -> None:
    page = run["html"]
    for needle in ("<script", "<link", "src=", "@import"):
        assert needle not in page, needle
    assert not re.search(r"url\((?!#)", page)  # only references inside the page (clip paths)
    # The only URLs are SVG's XML namespaces, which a browser never fetches.
    urls = set(re.findall(r"https?://[^\s'\"<>)]+", page))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
    assert "http://purl.org/dc/elements/1.1/" not in page  # no metadata block either


def test_stage_settings_are_what_tensorflow_traced(image_data: Path, tmp_path: Path) -> None:
    """The stages as the spec built them: its interleave's cycle length, parallel maps
    tuned by tf.data, a prefetch; the trace kept only where the caller asked."""
    spec = feedgpu.PipelineSpec.for_dataset(
        str(image_data), batch_size=8, training=True, image_size=(32, 32), autotune=True
    ).with_changes(repeat=True, cycle_length=3)
    settings = trace_stage_settings(feedgpu.build_pipeline(spec), logdir=str(tmp_path))
    assert settings is not None and "profiler trace" in settings.source
    last = {s.stage: s for s in settings.stages}  # each stage by its own name
    (interleave,) = [s for name, s in last.items() if "Interleave" in name]
    assert interleave.settings["cycle_length"] == spec.cycle_length
    assert last["ParallelBatch"].settings["batch_size"] == spec.batch_size
    parallel = [s for s in settings.stages if "parallelism" in s.settings]
    assert len(parallel) >= 3  # the interleave, the parse map, the decode map (or fused map)
    assert all(s.autotune and s.settings["parallelism"] >= 1 for s in parallel)
    assert last["Prefetch"].settings["buffer_limit"] >= 1
    assert glob.glob(str(tmp_path / "*" / "plugins" / "profile" / "*" / "*.xplane.pb"))
    # Without a folder of the caller's, the trace goes once read.
    before = set(glob.glob(f"{tempfile.gettempdir()}/feedgpu-stages-*"))
    again = trace_stage_settings(feedgpu.build_pipeline(spec))
    assert again is not None and again.stages
    assert set(glob.glob(f"{tempfile.gettempdir()}/feedgpu-stages-*")) == before
    # Inside someone else's profiler trace: no stages, and the run goes on.
    import tensorflow as tf

    tf.profiler.experimental.start(str(tmp_path / "theirs"))
    try:
        assert trace_stage_settings(feedgpu.build_pipeline(spec)) is None
    finally:
        tf.profiler.experimental.stop()


def test_saved_runs_side_by_side(run: dict[str, Any], tmp_path: Path, capsys) -> None:
    before = tmp_path / "before.json"
    after = tmp_path / "after.json"
    before.write_text(json.dumps(run["json"]))
    changed = dict(run["json"], verdict="saturated", input_share=0.01)
    changed["spec"] = dict(changed["spec"], shuffle_buffer=7)
    after.write_text(json.dumps(changed))
    out = tmp_path / "compare.html"
    assert main(["report", str(before), str(after), "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    page = out.read_text()
    assert "<td>before</td>" in page and "<td>after</td>" in page
    assert "data-chart='compared'" in page and "<td class='num'>1.0%</td>" in page
    assert page.count("id='verdict-") == 2 and "id='verdict'" not in page  # one id a run
    # each run's data, and what changed from the first
    assert f"<td>{run['json']['data_dir']} [train]</td>" in page
    assert (
        "<th>changed from the first</th>" in page
        and "shuffle_buffer " in page
        and " -&gt; 7" in page
    )


def test_an_image_page_shows_image_fields_only_and_wraps_long_cells(run: dict[str, Any]) -> None:
    page = run["html"]
    assert "<td>image_size</td>" in page
    assert "<td>max_length</td>" not in page and "<td>pad_id</td>" not in page
    assert "overflow-wrap: anywhere" in page  # a stage's long path wraps, never scrolls
    # a stage traced with an AUTOTUNE value, the autotuner off: not "autotune yes"
    data = json.loads(json.dumps(run["json"]))
    data["spec"]["autotune"] = False
    data["stages"]["stages"][0]["autotune"] = True
    assert "<td>AUTOTUNE value, autotuner off</td>" in render_html(data)
    data["spec"]["autotune"] = True
    assert "<td>AUTOTUNE value, autotuner off</td>" not in render_html(data)


def test_a_file_that_is_not_a_report_is_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    assert main(["report", str(bad), "-o", str(tmp_path / "x.html")]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("is not a bench-input report (no feedgpu.bench-input/N schema)")
    )


def test_the_main_charts_as_one_picture(run: dict[str, Any], tmp_path: Path) -> None:
    import matplotlib

    styles, backend = dict(matplotlib.rcParams), matplotlib.get_backend()
    path = tmp_path / "run.png"
    report = load_report(str(run["dir"] / "run.json"))
    # The rates' bars of set lengths: as measured, their lengths are what the machine's load
    # made them (a compute ceiling a fifth of the pipeline's rate drew 1,452 green pixels).
    for part, rate in (("pipeline", 1000.0), ("ceiling", 900.0), ("end_to_end", 800.0)):
        report[part] = {**report[part], "examples_per_s": rate, "spread": None}
    write_report(str(path), [report])
    # the process's matplotlib (a notebook's, say) is left as it was
    assert dict(matplotlib.rcParams) == styles and matplotlib.get_backend() == backend
    with Image.open(path) as img:
        assert img.format == "PNG" and img.width > 800 and img.height > 600
        counts = {rgb: n for n, rgb in img.convert("RGB").getcolors(maxcolors=1 << 20) or []}

    def pixels(colour: str) -> int:
        return counts.get(tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5)), 0)

    # the bars are drawn (each phase's colour fills areas), not only text and axes
    for colour in (charts.WAIT, charts.CEILING, charts.COMPUTE):
        assert pixels(colour) > 2000, colour


def test_feedmonitor_writes_its_page_after_a_real_fit(image_data: Path, tmp_path: Path) -> None:
    import keras

    spec = feedgpu.PipelineSpec.for_dataset(
        str(image_data), batch_size=4, training=True, image_size=(16, 16)
    )
    ds = feedgpu.build_pipeline(spec)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.GlobalAveragePooling2D()(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3)(x))
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    page = tmp_path / "fit.html"
    monitor = feedgpu.FeedMonitor(window=3, start=1, batch_size=4, verbose=0, report=str(page))
    model.fit(ds, epochs=2, verbose=0, callbacks=[monitor])
    assert monitor.windows  # one a epoch, unless another profiler held the host's profiler
    text = page.read_text()
    assert text.count("<tr><td>") == len(monitor.windows)
    assert "data-chart='windows'" in text
    for window in monitor.windows:  # as the page has them: each window's JSON (rounded)
        shown = window.to_json()
        assert f"<td>{shown['epoch']}:{shown['first_step']}</td>" in text
        assert f"<td class='num'>{shown['input_share']:.1%}</td>" in text


def test_without_matplotlib_a_report_is_one_line_before_measuring(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    code = main(["bench-input", str(tmp_path / "nowhere"), "--report", str(tmp_path / "r.html")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("feedgpu: error: a report draws its charts with matplotlib")
    assert "pip install" in err and not (tmp_path / "r.html").exists()


def test_a_parallel_stage_tensorflow_did_not_trace_is_not_available(run: dict[str, Any]) -> None:
    from feedgpu.report.page import render_html

    data = json.loads(json.dumps(run["json"]))
    assert any("Interleave" in s["stage"] for s in data["stages"]["stages"])  # traced here
    shown = render_html(data)
    assert "<td>ParallelInterleave</td>" not in shown
    data["stages"]["stages"] = [
        s for s in data["stages"]["stages"] if "Interleave" not in s["stage"]
    ]
    page = render_html(data)
    assert "<td>ParallelInterleave</td><td>parallel reading of the shard files</td>" in page
    assert "<td>not available</td>" in page


def test_rates_far_apart_are_drawn_on_a_log_scale(run: dict[str, Any]) -> None:
    data = json.loads(json.dumps(run["json"]))
    for part, rate in (("pipeline", 100.0), ("ceiling", 90.0), ("end_to_end", 80.0)):
        data[part]["examples_per_s"] = rate
    assert charts.rates(data).axes[0].get_xscale() == "linear"
    data["pipeline"]["examples_per_s"] = 192_568.0
    assert charts.rates(data).axes[0].get_xscale() == "log"  # the other bars stay visible
