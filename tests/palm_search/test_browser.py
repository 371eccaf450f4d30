"""The HTML report in a real browser: headless Chromium (Debian's, installed by
``tests/services/chromium.sh`` when missing) renders ``palm-search report RUN_DIR``; its plots
are drawn with data, its pictures load and its top-mappings table fits 1,400 px."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from palm_search.commands.cli import app

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
CHROMIUM_SH = ROOT / "tests" / "services" / "chromium.sh"
WIDTH_PX = 1400


@pytest.fixture(scope="module")
def chromium() -> str:
    """The chromium binary (apt-get installed by the service script when missing; never skipped)."""
    done = subprocess.run(["bash", str(CHROMIUM_SH)], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    result = CliRunner().invoke(app, ["optimize", "--study", str(DATA / "small-study.toml"), "--hw",
                                      str(DATA / "mini-mesh.toml"), "--trials", "8", "--jobs", "1",
                                      "--artifacts-top", "1", "--run-dir", str(run_dir), "--json"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    return run_dir / "report.html"


def _measure(chromium: str, page: Path, tmp_path: Path) -> dict:
    """Load a copy of ``page`` with the probe script in headless Chromium at 1,400 px; its measures."""
    probed = tmp_path / "probed.html"
    shutil.copy(DATA / "report-probe.js", tmp_path / "probe.js")
    probed.write_text(page.read_text().replace("</body>", "<script src='probe.js'></script></body>"))
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WIDTH_PX},1000",
                           "--virtual-time-budget=20000", "--dump-dom", probed.as_uri()],
                          capture_output=True, text=True, timeout=300)
    found = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.S)
    assert found, f"no measures in the rendered page (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def test_chromium_renders_the_report_with_its_plots_drawn_and_its_table_within_1400_px(chromium, report, tmp_path):
    measured = _measure(chromium, report, tmp_path)
    plots = {p["id"]: p for p in measured["plots"]}
    assert {"history", "parallel-coordinates", "importance"} <= set(plots), plots
    for plot in plots.values():
        assert plot["traces"] > 0 and plot["points"] > 0 and plot["height"] > 100, plot
    assert len(measured["images"]) >= 3 and all(width > 0 for width in measured["images"]), measured["images"]
    assert measured["table"] is not None and measured["table"] <= WIDTH_PX, measured
    assert measured["page"] <= WIDTH_PX, measured
