"""The answer explained: best against baseline, its bottleneck, near-ties, what matters, one
tie-break everywhere, readable names, the device count and a resumed study's new trials."""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from palm_search.commands.cli import app
from palm_search.views.explain import bottleneck, changes, effect_sizes, explain, near_ties, sentences
from palm_search.views.outputs import top_mappings, trials_frame
from palm_search.views.render import print_search_summary

DATA = Path(__file__).parent / "data"
BASE = {"tp": 8, "pp": 20, "dp": 2, "cp": 1, "microbatch_size": 1, "schedule": "1f1b", "recompute": "full",
        "zero_stage": 1, "placement": "s-shape", "group_layout": "compact", "group_order": "tp-major"}


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"state": "COMPLETE", "feasible": True, "baseline": False, **BASE, **r} for r in rows])


def test_ties_go_to_the_lower_trial_number_as_optunas_best_trial():
    study = optuna.create_study(direction="maximize")
    for number in range(6):
        value = 0.5 if number in (2, 3, 4) else 0.1
        study.add_trial(optuna.trial.create_trial(
            value=value, user_attrs={"strategy": {**BASE, "zero_stage": number}, "feasible": True,
                                     "samples_per_s": value, "baseline": number == 0}))
    top = top_mappings(trials_frame(study), 3)
    assert list(top["trial"]) == [2, 3, 4] and study.best_trial.number == 2


def test_best_against_baseline_names_the_fields_that_changed():
    best = {**BASE, "tp": 32, "pp": 5, "recompute": "selective", "schedule": "zb-h1"}
    assert changes(best, BASE, list(BASE)) == ["TP 8 -> 32", "PP 20 -> 5", "schedule 1f1b -> zb-h1",
                                               "recompute full -> selective"]


def test_the_bottleneck_is_one_sentence_from_time_shares_and_utilisation():
    sentence = bottleneck({"dram": {"max": 0.84, "mean": 0.5}, "link": {"max": 0.08, "mean": 0.01}},
                          {"compute": 0.17, "dram_stall": 0.79, "communication": 0.01, "bubble": 0.03})
    assert sentence.startswith("DRAM-bound") and "DRAM ports 84% busy" in sentence and "links <= 8%" in sentence


def test_a_utilisation_above_1_reads_as_demand_over_capacity_not_busy():
    sentence = bottleneck({"dram": {"max": 1.4, "mean": 0.5}}, {"dram_stall": 0.8, "compute": 0.2})
    assert "DRAM ports 140% demand (over capacity" in sentence and "busy" not in sentence


def test_the_resource_table_says_what_a_utilisation_above_100_percent_means():
    import dataclasses

    from rich.console import Console

    from palm_search.views.render import OVER_CAPACITY, print_result
    from simulator import ResourceUsage, Strategy, load_hardware, load_model, simulate

    result = simulate(load_model("T-1.7B"), load_hardware("wafer"), Strategy(tp=8, pp=4, dp=2, global_batch_size=64),
                      network="analytical")
    for over, said in ((0.9, False), (1.4, True)):
        usage = ResourceUsage(kind="dram", count=4, max_utilisation=over, mean_utilisation=0.5, busiest=())
        console = Console(width=400, record=True)
        print_result(dataclasses.replace(result, resources=(usage,)), console=console)
        assert (OVER_CAPACITY.split(" (")[0] in console.export_text()) is said


def test_near_ties_are_grouped_with_the_dimensions_that_do_not_matter():
    top = _frame([{"trial": 1, "samples_per_s": 1.0, "zero_stage": 1, "placement": "a"},
                  {"trial": 2, "samples_per_s": 0.9999, "zero_stage": 2, "placement": "b"},
                  {"trial": 3, "samples_per_s": 0.9, "zero_stage": 3}])
    (group,) = near_ties(top)
    assert group["trials"] == [1, 2] and group["varying"] == ["zero_stage", "placement"]
    line = sentences({"near_ties": [group]})[0]
    assert line.startswith("2 mappings within 0.05%") and "ZeRO stage and placement make no difference here" in line


def test_importance_is_an_effect_size_a_small_effect_cannot_rank_first():
    frame = _frame([{"trial": 0, "samples_per_s": 0.5, "baseline": True, "tp": 4},
                    {"trial": 1, "samples_per_s": 1.0, "schedule": "zb-h1", "placement": "a"},
                    {"trial": 2, "samples_per_s": 0.9995, "schedule": "zb-h1", "placement": "b"},
                    {"trial": 3, "samples_per_s": 0.98, "schedule": "1f1b", "placement": "a"}])
    effects = effect_sizes(frame)
    assert [e["field"] for e in effects] == ["schedule", "placement"]  # the baseline's TP 4 is left out
    assert effects[0]["spread"] == pytest.approx(0.02) and effects[1]["spread"] == pytest.approx(0.0005)
    explained = explain(frame, top_mappings(frame, 3), {})
    assert explained["effects_on"] == 3
    assert "schedule 2.00% (1f1b), placement 0.05% (b)" in sentences(explained)[-1]


def test_a_context_parallel_row_reads_dp_times_cp():
    row = {"trial": 1, **BASE, "dp": 8, "cp": 16, "samples_per_s": 1.0}
    summary = {"study": "s", "trials": 1, "feasible": 1, "failed": 0, "sampler": "tpe", "top": [row],
               "baseline": {}, "run_dir": "r", "dashboard": "d"}
    for width in (80, 160):
        console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
        print_search_summary(summary, console)
        assert ("DP 8 x CP 16" if width == 160 else "8 x CP 16") in console.export_text()


def test_the_device_count_says_where_it_comes_from():
    from palm_search.commands.optimize import devices_used
    from palm_search.search.study import StudySpec
    from simulator import load_hardware

    spec = StudySpec(model="LLaMA2-70B", hardware="h100-cluster")
    assert devices_used(spec, load_hardware("h100-cluster")).startswith("1,024 GPUs: the h100-cluster preset's size")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("run")
    command = ["optimize", "--study", str(DATA / "small-study.toml"), "--hw", str(DATA / "mini-mesh.toml"),
               "--trials", "8", "--jobs", "1", "--artifacts-top", "0", "--run-dir", str(directory)]
    first, again = (CliRunner().invoke(app, command) for _ in range(2))
    assert first.exit_code == 0 and again.exit_code == 0, first.output + again.output
    return directory, first.output, again.output


def test_the_summary_explains_the_answer_and_a_resumed_finished_study_says_0_new_trials(runs):
    _, first, again = runs
    assert "8 new trials" in first and "0 new trials (the study had already finished" in again
    assert "cores: the size of the machine in" in first
    assert "against the baseline:" in first and "what matters (spread of the best samples/s" in first


def test_every_trial_the_baseline_included_carries_readable_names_and_the_study_a_note(runs):
    from palm_search.views.report import load_run

    study = load_run(runs[0])
    assert study.metric_names == ["samples/s"]
    for trial in study.trials:
        assert {"tp", "pp", "dp", "schedule", "recompute"} <= set(trial.user_attrs)
    from optuna_dashboard._note import get_note

    note = get_note(study)
    assert "What the parameters encode" in note and "against the baseline" in note


def test_the_baseline_trial_is_its_point_of_the_space_so_the_dashboard_plots_it(runs):
    from palm_search.search.space import ReplayTrial, candidate_builder
    from palm_search.search.study import load_study
    from palm_search.views.report import load_run
    from simulator import Strategy, load_hardware, load_model

    study = load_run(runs[0])
    baseline = next(t for t in study.trials if t.user_attrs["baseline"])
    assert baseline.params and baseline.distributions.keys() == baseline.params.keys()
    spec = load_study(DATA / "small-study.toml").replace(hardware=str(DATA / "mini-mesh.toml"))
    build = candidate_builder(spec, load_model(spec.model), load_hardware(spec.hardware))
    assert build(ReplayTrial(baseline.params)).strategy == Strategy.from_dict(baseline.user_attrs["strategy"])


def test_a_strategy_outside_the_space_has_no_point():
    from palm_search.search.space import ScriptedTrial, candidate_builder, point_of
    from palm_search.search.study import load_study
    from simulator import load_hardware, load_model

    spec = load_study(DATA / "small-study.toml").replace(hardware=str(DATA / "mini-mesh.toml"))
    build = candidate_builder(spec, load_model(spec.model), load_hardware(spec.hardware))
    inside = build(ScriptedTrial([]))  # the space's first point
    assert point_of(build, inside.strategy) is not None
    assert point_of(build, inside.strategy.with_fields(microbatch_size=10**6)) is None


def test_a_study_resumed_without_metric_names_gets_them(tmp_path):
    from palm_search.search.driver import open_search, storage_for
    from palm_search.search.study import load_study

    spec = load_study(DATA / "small-study.toml").replace(hardware=str(DATA / "mini-mesh.toml"), trials=4)
    begun = optuna.create_study(study_name=spec.name, storage=storage_for(tmp_path, None), direction="maximize")
    begun.add_trial(optuna.trial.create_trial(value=1.0))
    assert begun.metric_names is None
    assert open_search(spec, run_dir=tmp_path, jobs=1).study.metric_names == ["samples/s"]
