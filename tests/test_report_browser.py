"""A real report opened in a real headless browser (Debian's chromium, installed by
`.ci/browser`): it renders offline, with no request leaving the machine, and shows the
banner, the rates, the step timeline, the ablation and the spec table at a laptop's width.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from PIL import Image

from feedgpu.report.charts import CEILING, COMPUTE, VERDICT_COLOURS, WAIT

WIDTH, HEIGHT = 1366, 4000  # a laptop's width; tall enough for the whole page


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-headless-shell")
    if found is None:
        pytest.fail("no headless chromium: run `bash .ci/browser` (README, 'Run the tests')")
    return found


class Trap:
    """A proxy that answers nothing and records who called: the browser is sent through it,
    so any request the page makes (scripts, fonts, styles from a CDN) is recorded here, as
    are the browser's own (its updater, its clock), which a blank page shows too."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.requests: list[str] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.requests.append(conn.recv(512).decode("latin-1").split("\r\n")[0])
                except OSError:
                    self.requests.append("(no request line)")

    def hosts(self) -> set[str]:
        """The hosts asked for ("CONNECT host:443" or "GET http://host/...")."""
        out = set()
        for line in self.requests:
            parts = line.split()
            target = parts[1] if len(parts) > 1 else line
            out.add(target.split("://")[-1].split("/")[0].split(":")[0])
        return out

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.server.close()


def browse(page: Path, *extra: str, proxy: int) -> subprocess.CompletedProcess[str]:
    args = [
        chromium(),
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-domain-reliability",
        "--disable-client-side-phishing-detection",
        "--no-pings",
        "--metrics-recording-only",
        "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,Translate,"
        "AutofillServerCommunication,CertificateTransparencyComponentUpdater",
        f"--proxy-server=http://127.0.0.1:{proxy}",
        "--proxy-bypass-list=<-loopback>",  # even localhost goes through the trap
        f"--window-size={WIDTH},{HEIGHT}",
        *extra,
        page.as_uri(),
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_the_default_run_s_report_renders_offline_in_a_real_browser(tmp_path: Path) -> None:
    page, data = tmp_path / "report.html", tmp_path / "report.json"
    # The command as a user runs it, in a process of its own (its devices set up first).
    args = ["--sample-per-class", "8", "--image-size", "32", "--batch-size", "8"]
    args += ["--seconds", "0.6", "--ablation", "always", "--ablation-seconds", "0.3"]
    args += ["--quiet", "--report", str(page), "--json", str(data)]
    done = subprocess.run(
        [sys.executable, "-m", "feedgpu", "bench-input", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(data.read_text())
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body>blank</body></html>")
    own, trap = Trap(), Trap()
    try:
        browse(blank, "--dump-dom", proxy=own.port)  # the browser's own requests
        shot = tmp_path / "shot.png"
        done = browse(page, f"--screenshot={shot}", proxy=trap.port)
        assert shot.exists(), done.stderr[-2000:]
        dom = browse(page, "--dump-dom", proxy=trap.port).stdout
        browse(blank, "--dump-dom", proxy=own.port)
    finally:
        own.close()
        trap.close()
    # Nothing the page asked for left the machine: only what a blank page's browser asks too.
    assert trap.hosts() <= own.hosts(), (trap.requests, own.requests)

    # What the browser built: the banner's words and every chart, drawn.
    assert f'<div class="verdict">{report["verdict"]}</div>' in dom
    for section in ("rates", "steps", "ablation", "pipeline", "environment"):
        assert f'id="{section}"' in dom, section
    charts = dom.split('data-chart="')[1:]
    assert [c.split('"')[0] for c in charts] == ["rates", "timeline", "distribution", "ablation"]
    for chart in charts:  # drawn, not empty axes: each in the colours of what it shows
        name = chart.split('"')[0]
        wanted = {
            "rates": [WAIT, CEILING, COMPUTE],  # pipeline, ceiling, end to end
            "timeline": [WAIT, COMPUTE],
            "distribution": [CEILING, COMPUTE],
            "ablation": [],  # a bar only for a measurable effect (its words are glyph paths)
        }[name]
        assert all(colour in chart for colour in wanted), name
        assert chart.count("<path") + chart.count("<rect") > 5, name  # not empty axes
    assert "<td>image_size</td>" in dom and "<td>shuffle_buffer</td>" in dom  # the spec table

    # What it showed: the banner in its verdict's colour at the top, and the page not blank.
    with Image.open(shot) as img:
        pixels = img.convert("RGB")
    assert pixels.size == (WIDTH, HEIGHT)
    colour = VERDICT_COLOURS[report["verdict"]]
    banner = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    top = pixels.crop((0, 0, WIDTH, 300)).getcolors(maxcolors=1 << 20) or []
    assert any(rgb == banner and n > 5000 for n, rgb in top), "no verdict banner on screen"
    body = pixels.crop((0, 300, WIDTH, 2400)).convert("L")
    dark = sum(1 for v in body.getdata() if v < 200)
    assert dark > 0.02 * body.width * body.height  # charts and tables drawn, not blank
