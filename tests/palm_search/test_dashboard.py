"""`palm-search dashboard RUN_DIR` serves the run's study (optuna-dashboard on loopback)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from palm_search.commands.cli import app

DATA = Path(__file__).parent / "data"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, deadline_s: float) -> bytes:
    end = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.read()
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.3)


def test_dashboard_serves_the_study(tmp_path):
    run_dir = tmp_path / "r"
    result = CliRunner().invoke(app, ["optimize", "--study", str(DATA / "small-study.toml"), "--hw",
                                      str(DATA / "mini-mesh.toml"), "--trials", "4", "--sampler", "random",
                                      "--jobs", "1", "--run-dir", str(run_dir), "--json"])
    assert result.exit_code == 0, result.output
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "palm_search", "dashboard", str(run_dir), "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        studies = json.loads(_get(f"http://127.0.0.1:{port}/api/studies", deadline_s=30))
        assert [s["study_name"] for s in studies["study_summaries"]] == ["small"]
        # an illustrated trial's page shows its pictures: its note links the served PNGs
        study_id = studies["study_summaries"][0]["study_id"]
        detail = json.loads(_get(f"http://127.0.0.1:{port}/api/studies/{study_id}", deadline_s=10))
        notes = [t["note"]["body"] for t in detail["trials"] if t.get("note", {}).get("body")]
        links = re.findall(r"!\[(\w+)\]\((/artifacts/[0-9a-f/-]+)\)", notes[0]) if notes else []
        assert [name for name, _ in links] == ["timeline", "placement", "heatmap"], notes
        assert _get(f"http://127.0.0.1:{port}{links[0][1]}", deadline_s=10)[:8] == b"\x89PNG\r\n\x1a\n"
        # the study's note explains the answer and the encodings; the best trial is best.json's
        assert "What the parameters encode" in detail["note"]["body"]
        assert detail["best_trials"][0]["number"] == json.loads(result.stdout)["best"]["trial"]
        # every trial, the baseline included, shows the mapping by readable names
        baseline = next(t for t in detail["trials"] if t["number"] == 0)
        assert {"tp", "pp", "dp", "schedule"} <= {a["key"] for a in baseline["user_attrs"]}
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_dashboard_of_a_missing_run_is_exit_code_2(tmp_path):
    result = CliRunner().invoke(app, ["dashboard", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "does not exist" in result.stderr


def test_a_busy_port_is_one_line_and_exit_code_2(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "study.journal").write_text("")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "palm_search", "dashboard", str(run_dir), "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and f"cannot listen on 127.0.0.1:{port}" in done.stderr


def test_the_printed_dashboard_command_serves_the_pictures(tmp_path):
    from palm_search.views.outputs import dashboard_command

    program, *rest = dashboard_command(tmp_path, None).split()
    assert shutil.which(program) and Path(program).name == "palm-search" and rest == ["dashboard", str(tmp_path)]
    url = "postgresql://palm@db/palm"
    program, *rest = dashboard_command(tmp_path, url).split()
    assert shutil.which(program) and Path(program).name == "optuna-dashboard"
    assert rest == [url, "--artifact-dir", str(tmp_path / "artifacts")]
