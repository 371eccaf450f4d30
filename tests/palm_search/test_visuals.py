"""Pictures, traces, artifacts and the HTML report."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import pytest
from typer.testing import CliRunner

from palm_search.commands.cli import app

DATA = Path(__file__).parent / "data"
MINI = str(DATA / "mini-mesh.toml")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _check_pictures(directory: Path, paper: bool = True) -> None:
    """PNG pictures, and with ``paper`` their SVG and PDF too."""
    for name in ("timeline", "placement", "heatmap"):
        assert (directory / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
        if paper:
            root = ElementTree.parse(directory / f"{name}.svg").getroot()
            assert root.tag.endswith("svg")
            assert (directory / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"


def test_simulate_writes_trace_and_plots_from_the_extrapolations_runs_and_one_recorded_window(tmp_path, monkeypatch):
    from simulator.engine import Engine

    runs: list[int] = []
    real_run = Engine.run
    monkeypatch.setattr(Engine, "run", lambda self, m: runs.append(m) or real_run(self, m))
    result = CliRunner().invoke(app, ["simulate", "--model", "T-1.7B", "--hw", MINI, "--tp", "2", "--pp", "4",
                                      "--global-batch-size", "64", "--trace", str(tmp_path / "t.json"),
                                      "--plots", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    # the short runs (2 and 4 microbatches, not yet steady on PP 4), p and 2p, one recorded window
    assert runs == [2, 4, 4, 8, 8]
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    _check_pictures(tmp_path / "plots")


@pytest.mark.parametrize(("hw", "box", "legend"), [("a100-cluster", "node", "NVSwitch"),
                                                   ("tpu-v4-cube", "z-plane", "wrap-around")])
def test_cluster_and_torus_pictures(tmp_path, hw, box, legend):
    from palm_search.views.plots import write_plots
    from simulator import Strategy, load_hardware, load_model, simulate_timeline

    torus = hw == "tpu-v4-cube"
    strategy = Strategy(tp=4 if torus else 8, pp=2, dp=2, global_batch_size=16, precision="bf16" if torus else "fp16")
    timeline = simulate_timeline(load_model("T-1.7B"), load_hardware(hw), strategy)
    drawing = timeline.topology.drawing(16)
    assert drawing.box_name == box and legend in drawing.legend
    assert {m.resource for m in drawing.marks} <= set(range(timeline.topology.num_resources))
    write_plots(timeline, tmp_path)
    _check_pictures(tmp_path)


def test_infeasible_strategy_is_a_one_line_error(tmp_path):
    result = CliRunner().invoke(app, ["simulate", "--model", "T-145B", "--hw", MINI, "--tp", "8",
                                      "--plots", str(tmp_path)])
    assert result.exit_code == 2
    assert "error:" in result.output and "infeasible" in result.output


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("run")
    result = CliRunner().invoke(app, _OPTIMIZE + ["--run-dir", str(directory)])
    assert result.exit_code == 0, result.output
    return directory


_OPTIMIZE = ["optimize", "--study", str(DATA / "small-study.toml"), "--hw", MINI, "--trials", "8", "--jobs", "1",
             "--artifacts-top", "2", "--json"]


def test_top_trials_get_artifacts(run_dir):
    from palm_search.views.artifacts import trial_artifacts
    from palm_search.views.outputs import top_mappings, trials_frame
    from palm_search.views.plots import timeline_window_s
    from palm_search.views.report import load_run

    study = load_run(run_dir)
    attached = trial_artifacts(study)
    for number in top_mappings(trials_frame(study), 2)["trial"]:
        own = [name for name in attached[int(number)] if not name.startswith("timeline-common-")]
        assert sorted(own) == ["heatmap.png", "placement.png", "timeline.png", "trace.json"]
        _check_pictures(run_dir / "mappings" / f"trial-{int(number)}", paper=False)
    assert set(study.user_attrs["artifacts"]) == {str(n) for n in attached}
    # the dashboard's timelines share one time axis: the shorter ones are redrawn on the longest's
    windows = {n: timeline_window_s(run_dir / "mappings" / f"trial-{n}") for n in attached}
    longest = max(windows.values())
    for number, names in attached.items():
        common = [name for name in names if name.startswith("timeline-common-")]
        assert common == ([f"timeline-common-{longest:.6g}.png"] if windows[number] < longest else [])


def test_running_a_finished_study_again_draws_nothing_again(run_dir):
    pictures = sorted((run_dir / "mappings").rglob("*.png"))
    drawn = {path: path.stat().st_mtime_ns for path in pictures}
    result = CliRunner().invoke(app, _OPTIMIZE + ["--run-dir", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert pictures and {path: path.stat().st_mtime_ns for path in pictures} == drawn


def test_report_is_self_contained(run_dir):
    result = CliRunner().invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    page = (run_dir / "report.html").read_text()
    assert str(run_dir / "report.html") in result.output
    assert '<script src="http' not in page and "<script src='http" not in page
    for anchor in ("summary", "top-mappings", "history", "parallel-coordinates", "importance", "best-vs-baseline"):
        assert f"id='{anchor}'" in page
    assert "class='note'>not available" not in page  # plotly is a dependency: every study plot is drawn
    assert page.count("class=\"plotly-graph-div\"") >= 3
    assert page.count("data:image/png;base64,") >= 3


def test_report_explains_the_answer_drops_constant_columns_and_shares_the_timelines_time_axis(run_dir):
    from palm_search.views.plots import timeline_window_s

    result = CliRunner().invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    page = (run_dir / "report.html").read_text()
    assert "id='explanation'" in page and "against the baseline" in page
    assert "The same in every row:" in page and "<th>cp</th>" not in page
    assert "feasible searched trials (baseline excluded)" in page and "Optuna default evaluator" not in page
    # parallel coordinates by readable names (not the sampler's `degrees`, `name|only=...`)
    assert '"label":"PP"' in page and '"label":"schedule"' in page and "|only=" not in page and "|dp=" not in page
    windows = {timeline_window_s(d) for d in (run_dir / "mappings").iterdir()}
    if len(windows) > 1:  # the shorter timeline is redrawn on the longer one's axis
        assert list((run_dir / "mappings").rglob("timeline-common-*.png"))


def test_a_timeline_drawn_on_a_shared_window_runs_its_axis_to_it():
    from palm_search.views.plots import plot_timeline
    from simulator import Strategy, load_hardware, load_model, simulate_timeline

    timeline = simulate_timeline(load_model("T-1.7B"), load_hardware(MINI),
                                 Strategy(tp=2, pp=4, global_batch_size=16))
    assert plot_timeline(timeline).axes[0].get_xlim()[1] == pytest.approx(timeline.window_s)
    shared = plot_timeline(timeline, 3 * timeline.window_s).axes[0]
    assert shared.get_xlim()[1] == pytest.approx(3 * timeline.window_s) and "shared" in shared.get_xlabel()


def test_the_placement_and_heat_map_of_1024_gpus_are_drawn_one_cell_per_node():
    from palm_search.views.plots import plot_heatmap, plot_placement
    from simulator import Strategy, load_hardware, load_model, simulate_timeline

    timeline = simulate_timeline(load_model("T-1.7B"), load_hardware("h100-cluster"),
                                 Strategy(tp=8, pp=8, dp=16, global_batch_size=256))
    axes = plot_placement(timeline).axes[0]
    assert len(axes.texts) == 128 and {t.get_text() for t in axes.texts} == {f"s{i}" for i in range(8)}
    assert "one cell per node" in axes.get_title()
    heat = plot_heatmap(timeline).axes[0]  # the heat map too: each node's busiest link, port or NIC
    assert "one cell per node (128)" in heat.get_title()
    assert 0 < len(heat.texts) <= 128 and all(t.get_text().endswith("%") for t in heat.texts)


def test_report_of_a_missing_run_is_an_error(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "study.journal" in result.output


def test_the_timeline_of_zb_h1_colours_and_names_its_weight_gradient_passes():
    from palm_search.views.plots import PASS_COLOURS, plot_timeline
    from simulator import Strategy, load_hardware, load_model, simulate_timeline
    from simulator.passes import PassKind

    strategy = Strategy(tp=2, pp=4, recompute="full", global_batch_size=16, schedule="zb-h1")
    figure = plot_timeline(simulate_timeline(load_model("T-1.7B"), load_hardware(MINI), strategy))
    axes = figure.axes[0]
    labels = [t.get_text() for t in axes.get_legend().get_texts()]
    assert {"input-gradient backward", "weight-gradient backward", "forward", "recompute"} <= set(labels)
    colours = {tuple(c.get_facecolor()[0]) for c in axes.collections}
    from matplotlib.colors import to_rgba
    assert to_rgba(PASS_COLOURS[PassKind.BACKWARD_WEIGHT]) in colours


def test_a_trace_into_a_folder_that_does_not_exist_yet_creates_it(tmp_path):
    # the README writes --trace runs/t.json (under the ignored runs/) on a fresh clone
    result = CliRunner().invoke(app, ["simulate", "--model", "T-1.7B", "--hw", MINI, "--tp", "2", "--pp", "2",
                                      "--global-batch-size", "8", "--trace", str(tmp_path / "runs" / "t.json")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "runs" / "t.json").read_text())["traceEvents"]
