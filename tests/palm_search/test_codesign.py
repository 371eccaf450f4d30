"""palm-search codesign: chips screened and refined, scored as PHAZE does, written for replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from palm_search.codesign.search import _dominates, front_ranks, run_codesign
from palm_search.codesign.spec import load_codesign
from palm_search.commands.cli import app
from simulator import InputError, Strategy, hardware_to_toml, load_hardware, load_model, simulate
from spaces.hardware import HardwareSpace, build_hardware

TECHNOLOGY = """name = "test"
name_source = "unit coefficients for a test"
[area]
""" + "".join(f'{k} = {v}\n{k}_source = "test"\n' for k, v in {
    "die_fixed_mm2": 20, "core_fixed_mm2": 2, "sram_mm2_per_MiB": 0.45, "matrix_engine_mm2_per_TFLOP_per_s": 0.5,
    "router_mm2_per_TB_per_s": 0.2, "dram_phy_mm2_per_TB_per_s": 30, "die_to_die_mm2_per_TB_per_s": 5}.items()) + """
[power]
""" + "".join(f'{k} = {v}\n{k}_source = "test"\n' for k, v in {
    "leakage_W_per_mm2": 0.05, "matrix_engine_pJ_per_flop": 0.5, "sram_pJ_per_byte": 1,
    "noc_pJ_per_byte_per_hop": 0.5, "dram_pJ_per_byte": 30, "die_to_die_pJ_per_byte": 5}.items())


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """Two small models on chips of a 2 x 2-die wafer, SRAM x matrix engine, budgets of the base."""
    return write_study(tmp_path)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The study's search with one worker (shared by the tests that only read it)."""
    return run_codesign(load_codesign(write_study(tmp_path_factory.mktemp("codesign"))), jobs=1)


def write_study(tmp_path: Path) -> Path:
    base = build_hardware(HardwareSpace(load_hardware("studies/hardware/wafer-tiled.toml"), {"dies": ("2x2",)}),
                          {"hw.dies": "2x2"})
    (tmp_path / "small.toml").write_text(hardware_to_toml(base))
    (tmp_path / "tech.toml").write_text(TECHNOLOGY)
    (tmp_path / "study.toml").write_text(f"""
[codesign]
models = ["T-1.7B", "T-3.6B"]
hardware = "{tmp_path / 'small.toml'}"
technology = "{tmp_path / 'tech.toml'}"
trials = 2
refine = 2
[hardware_space]
sram_MB_per_core = [1.0, 3.75, 5.0]
TFLOP_per_s_per_core = [8, 16]
[search]
dimensions = ["degrees", "microbatch_size", "recompute"]
microbatch_sizes = [1, 2]
""")
    return tmp_path / "study.toml"


def test_chips_over_the_budget_are_infeasible_and_the_best_is_the_best_refined(run):
    assert len(run.chips) == 6
    over = [c for c in run.chips if c.screen.area_m2 > run.area_budget_m2]
    assert over and all("area" in c.screen.reason and "over the budget" in c.screen.reason for c in over)
    refined = [c for c in run.chips if c.refined]
    assert len(refined) == 2
    best = run.best()
    assert best is not None and best.samples_per_s == max(c.samples_per_s for c in refined)
    # PHAZE's score: the mean over the models of each model's best simulated samples/s
    assert best.samples_per_s == pytest.approx(sum(r["samples_per_s"] for r in best.simulated.values()) / 2)
    # the budget counts simulations: models x refine per refined chip and the base chip
    assert run.simulations <= (2 + 1) * 2 * 2
    assert run.base.samples_per_s > 0


def test_the_answer_does_not_depend_on_the_workers(run):
    two = run_codesign(run.spec, jobs=2)
    assert [c.samples_per_s for c in run.chips] == [c.samples_per_s for c in two.chips]


def test_the_best_chip_and_mapping_replay_from_the_run_directory(study, tmp_path):
    result = CliRunner().invoke(app, ["codesign", "--study", str(study), "--run-dir", str(tmp_path / "run"),
                                      "--jobs", "1", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    run = tmp_path / "run"
    assert {p.name for p in run.iterdir()} >= {"best-hardware.toml", "best.json", "trials.csv", "report.html",
                                                "study.journal", "best-T-1.7B.json", "best-T-3.6B.json"}
    hardware = load_hardware(str(run / "best-hardware.toml"))
    document = json.loads((run / "best-T-1.7B.json").read_text())
    replayed = simulate(load_model("T-1.7B"), hardware, Strategy.from_dict(document["strategy"]))
    assert replayed.samples_per_s == pytest.approx(summary["best"]["per_model"]["T-1.7B"]["samples_per_s"], rel=1e-9)
    # the summary's best.json replays one model's mapping (--model), or says which to choose in one line
    cli = CliRunner().invoke(app, ["simulate", "--strategy", str(run / "best.json"), "--model", "T-1.7B", "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout)["samples_per_s"] == pytest.approx(replayed.samples_per_s, rel=1e-9)
    for more in ([], ["--model", "T-18B"]):
        refused = CliRunner().invoke(app, ["simulate", "--strategy", str(run / "best.json"), *more])
        assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1, refused.output
        assert "T-1.7B, T-3.6B" in refused.output and "best-<model>.json" in refused.output


def test_a_bad_study_is_one_line_naming_the_file_and_key(study):
    study.write_text(study.read_text().replace('refine = 2', 'refine = 2\nobjective = "speed"'))
    result = CliRunner().invoke(app, ["codesign", "--study", str(study)])
    assert result.exit_code == 2
    assert "study.toml" in result.output and "objective" in result.output and "speed" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_bad_hardware_choice_names_the_study_file(study):
    study.write_text(study.read_text().replace("TFLOP_per_s_per_core = [8, 16]", "TFLOP_per_s_per_core = [8, -1]"))
    with pytest.raises(InputError, match=r"study\.toml: .*TFLOP_per_s_per_core.*positive"):
        load_codesign(study)


points = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=1, max_size=30)


@given(points)
def test_front_ranks_sort_points_into_successive_non_dominated_fronts(values):
    ranks = front_ranks(values)
    for i, rank in enumerate(ranks):
        same_or_better = [j for j, r in enumerate(ranks) if r < rank]
        assert not any(_dominates(values[j], values[i]) for j, r in enumerate(ranks) if r == rank)
        if rank:
            assert any(_dominates(values[j], values[i]) for j in same_or_better if ranks[j] == rank - 1)


def test_chips_of_one_grid_and_memory_propose_the_same_mappings(study):
    """The search enumerates a mapping space once per grid and memory (SRAM, peaks and bandwidths
    do not change which plans are proposed): fresh enumerations on two distant chips agree."""
    from palm_search.codesign.evaluate import chip_space
    from palm_search.search.space import candidate_builder, enumerate_candidates

    spec = load_codesign(study)
    walks = []
    for params in ({"hw.sram_MB_per_core": 1.0, "hw.TFLOP_per_s_per_core": 16},
                   {"hw.sram_MB_per_core": 5.0, "hw.TFLOP_per_s_per_core": 8}):
        hardware = build_hardware(chip_space(spec), params)
        build = candidate_builder(spec.mapping_spec("T-3.6B"), load_model("T-3.6B"), hardware)
        walks.append([c.strategy for _, c in enumerate_candidates(build, 10_000)])
    assert walks[0] == walks[1] and walks[0]


def test_a_sampled_screen_proposes_distinct_chips_and_does_not_depend_on_the_workers(run):
    """``screen_chips``: a seeded sampler proposes distinct chips until that many had their
    mappings screened (those over a budget do not count), asked in fixed batches, so one and two
    workers screen the same chips and find the same best."""
    spec = run.spec.replace(screen_chips=3, seed=3)
    one, two = run_codesign(spec, jobs=1), run_codesign(spec, jobs=2)
    over = [c for c in one.chips if "over the budget" in c.screen.reason]
    assert len(one.chips) - len(over) == 3
    assert len({tuple(sorted(c.screen.params.items())) for c in one.chips}) == len(one.chips)
    assert [c.screen.params for c in one.chips] == [c.screen.params for c in two.chips]
    assert [c.samples_per_s for c in one.chips] == [c.samples_per_s for c in two.chips]


def test_a_space_too_big_to_screen_whole_asks_for_a_sampler(run):
    spec = run.spec.replace(hardware_choices={"sram_MB_per_core": tuple(range(1, 46)),
                                              "TFLOP_per_s_per_core": tuple(range(1, 46))})
    with pytest.raises(InputError, match="screen_chips"):
        run_codesign(spec, jobs=1)


def test_hardware_cost_prints_the_check_and_a_chips_parts():
    from simulator.hardware.silicon import hardware_cost, load_technology

    result = CliRunner().invoke(app, ["hardware", "cost", "--hw", "wafer"])
    assert result.exit_code == 0, result.output
    area = hardware_cost(load_hardware("wafer"), load_technology()).area_m2
    assert "Cerebras WSE-2" in result.output and f"{area * 1e6:,.0f} mm^2" in result.output
    refused = CliRunner().invoke(app, ["hardware", "cost", "--hw", "a100-cluster"])
    assert refused.exit_code == 2 and refused.output.count("\n") == 1 and "mesh" in refused.output


def test_each_objective_scores_the_refined_chips_as_it_says(run):
    import dataclasses

    refined = [c for c in run.chips if c.samples_per_s > 0]
    per_area = dataclasses.replace(run, spec=run.spec.replace(objective="throughput_per_area")).best()
    assert per_area.samples_per_s / per_area.screen.area_m2 == max(c.samples_per_s / c.screen.area_m2 for c in refined)
    per_watt = dataclasses.replace(run, spec=run.spec.replace(objective="throughput_per_power")).best()
    assert per_watt.samples_per_s / per_watt.screen.power_W == max(c.samples_per_s / c.screen.power_W for c in refined)


def test_the_report_draws_the_front_the_base_and_the_budget(run, tmp_path):
    from palm_search.codesign.outputs import write_codesign

    summary = write_codesign(run, tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text()
    assert all(text in page for text in ("front", "base chip", "budget", "Sensitivity"))
    refined = page[page.index("<h2>Refined chips"):]
    assert "<th>area_mm2</th>" in refined and "area_m2" not in refined  # the unit the text says
    from palm_search.codesign.outputs import chips_frame
    from palm_search.codesign.report import sensitivity

    table = sensitivity(run, chips_frame(run))  # a choice none of whose chips ran says so, not 0
    for column in ("best estimated samples/s", "best simulated samples/s"):
        assert all(v in ("none fits", "not simulated") or float(v) > 0 for v in table[column])
    assert summary["best"]["samples_per_s"] == run.best().samples_per_s
    assert summary["base"]["samples_per_s"] == run.base.samples_per_s


@pytest.mark.parametrize(("change", "message"), [
    (("[search]\n", '[search]\ndimensions = ["warp"]\n'), "dimensions.*warp"),
    (("sram_MB_per_core = [1.0, 3.75, 5.0]", "sram_MB_per_core = [1e300]"), "sram_MB_per_core.*must lie in"),
    (('technology = "', 'technology = "/no/such/'), "technology"),
])
def test_what_a_study_names_is_checked_before_any_chip_is_screened(study, change, message):
    text = study.read_text().replace("dimensions = [\"degrees\", \"microbatch_size\", \"recompute\"]\n", "")
    study.write_text(text.replace(*change))
    with pytest.raises(InputError, match=message):
        load_codesign(study)


def test_a_model_given_on_the_command_line_is_checked_too(study):
    result = CliRunner().invoke(app, ["codesign", "--study", str(study), "--model", "T-999B"])
    assert result.exit_code == 2 and "T-999B" in result.output and result.output.count("\n") == 1


def test_a_study_names_its_files_relative_to_itself_so_it_runs_from_any_directory(tmp_path, monkeypatch):
    # studies/codesign-small.toml says hardware = "hardware/wafer-2x2-tiled.toml", beside itself
    from palm_search.codesign.spec import load_codesign

    monkeypatch.chdir(tmp_path)
    spec = load_codesign(Path(__file__).parents[2] / "studies" / "codesign-small.toml")
    assert Path(spec.hardware).is_file() and Path(spec.hardware).name == "wafer-2x2-tiled.toml"


def test_the_printed_answer_names_the_base_chip_once(capsys):
    from palm_search.commands.codesign import _print_summary

    chip = {"samples_per_s": 5.197, "area_m2": 0.0462, "power_W": 15000.0, "per_model": {}}
    summary = {"chips": 2, "feasible_chips": 2, "area_budget_m2": 0.05, "power_budget_W": 20000.0,
               "estimated_mappings": 10, "simulations": 4, "screen_s": 1.0, "refine_s": 2.0, "rank_agreement": None,
               "base": {**chip, "label": "base"}, "best": {**chip, "label": "sram 2x", "speedup_over_base": 1.0},
               "run_dir": "runs/c"}
    _print_summary(summary)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("base: 5.197 samples/s (mean)") and lines[2].startswith("best: sram 2x: 5.197")


def test_a_summary_of_models_whose_names_differ_after_a_dot_replays_the_one_named(tmp_path):
    from palm_search.commands.cli import _one_mapping

    summary = tmp_path / "best.json"
    summary.write_text(json.dumps({"best": {"per_model": {"Llama-3.1-8B": {}, "Llama-3.1-70B": {}}}}))
    assert _one_mapping(summary, "Llama-3.1-70B") == tmp_path / "best-Llama-3.1-70B.json"
    assert _one_mapping(summary, "Llama-3.1-8B") == tmp_path / "best-Llama-3.1-8B.json"
    with pytest.raises(InputError, match="choose one with --model"):
        _one_mapping(summary, None)
