"""The search driver: exhaustive optimum, determinism, resume, failures, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from optuna.trial import TrialState
from typer.testing import CliRunner

import palm_search.search.evaluate
from palm_search.commands.cli import app
from palm_search.search.baseline import choose_baseline
from palm_search.search.driver import open_search, optimize, run_baseline
from palm_search.search.space import ScriptedTrial, candidate_builder, enumerate_points
from palm_search.search.storage import journal_storage
from palm_search.search.study import StudySpec, default_name, load_study
from simulator import InputError, load_hardware, load_model, simulate

DATA = Path(__file__).parent / "data"
STUDY = DATA / "small-study.toml"


def _spec(**changes):
    spec = load_study(STUDY)
    return spec.replace(hardware=str(DATA / "mini-mesh.toml"), **changes)


def _run(tmp_path, name="run", jobs=1, deterministic=True, **changes):
    spec = _spec(**changes)
    search = open_search(spec, run_dir=tmp_path / name, jobs=jobs, deterministic=deterministic)
    baseline, _ = choose_baseline(spec, search.model, search.hardware)
    run_baseline(search, baseline)
    optimize(search)
    return search


def _throughput(search):
    return max((t.values[0] for t in search.study.trials if t.state == TrialState.COMPLETE
                and t.user_attrs.get("feasible")), default=0.0)


def test_exhaustive_search_finds_the_optimum_of_evaluating_every_point(tmp_path):
    search = _run(tmp_path, trials=500)
    assert search.study.user_attrs["sampler"] == "exhaustive"
    points = enumerate_points(search.build, 10_000)
    assert len(search.study.trials) == len(points) + 1
    searched = [t.params for t in search.study.trials if not t.user_attrs.get("baseline")]
    assert sorted(map(str, searched)) == sorted(map(str, points))  # every point, none twice
    direct = []
    for params in points:
        candidate = search.build(ScriptedTrialFor(params))
        result = simulate(search.model, candidate.hardware, candidate.strategy)
        direct.append(result.samples_per_s if result.feasible else 0.0)
    assert _throughput(search) == pytest.approx(max(direct), rel=1e-12)


class ScriptedTrialFor(ScriptedTrial):
    """A scripted trial answering from a params dict."""

    def __init__(self, params):
        super().__init__([])
        self.answers = params

    def suggest_categorical(self, name, choices):
        self.params[name] = self.answers[name]
        return self.answers[name]


def _history(search):
    return [(t.params, t.values, t.state) for t in search.study.trials]


@pytest.mark.parametrize("sampler", ["tpe", "random"])  # TPE has 2 batches in flight, random 3
def test_deterministic_runs_give_identical_trials_with_one_and_two_jobs(tmp_path, sampler):
    one = _run(tmp_path, "one", jobs=1, sampler=sampler, trials=24)
    two = _run(tmp_path, "two", jobs=2, sampler=sampler, trials=24)
    assert _history(one) == _history(two)
    assert len(one.study.trials) == 24


def test_an_interrupted_study_resumes_without_losing_a_trial(tmp_path):
    first = _run(tmp_path, sampler="tpe", trials=10)
    stale = first.study.ask()  # the driver died while this trial was being simulated
    resumed = _run(tmp_path, sampler="tpe", trials=16)
    trials = resumed.study.trials
    assert len(trials) == 16
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)
    assert trials[stale.number].state == TrialState.COMPLETE
    assert sum(t.user_attrs.get("baseline", False) for t in trials) == 1


def test_a_worker_exception_fails_one_trial_not_the_study(tmp_path, monkeypatch):
    real = palm_search.search.evaluate.simulate

    def flaky(model, hardware, strategy, **kwargs):
        if strategy.tp == 2:
            raise RuntimeError("simulated crash")
        return real(model, hardware, strategy, **kwargs)

    monkeypatch.setattr(palm_search.search.evaluate, "simulate", flaky)
    search = _run(tmp_path, sampler="random", trials=30)
    states = [t.state for t in search.study.trials]
    failed = [t for t in search.study.trials if t.state == TrialState.FAIL]
    assert len(states) == 30 and failed and TrialState.COMPLETE in states
    assert all("simulated crash" in t.user_attrs["error"] for t in failed)


def test_identical_strategies_are_simulated_once(tmp_path, monkeypatch):
    real, simulated = palm_search.search.evaluate.simulate, []

    def counted(model, hardware, strategy, **kwargs):
        simulated.append(strategy)
        return real(model, hardware, strategy, **kwargs)

    monkeypatch.setattr(palm_search.search.evaluate, "simulate", counted)
    search = _run(tmp_path, sampler="random", trials=40, batch_size=4)  # repeats in batches in flight
    cached = [t for t in search.study.trials if t.user_attrs.get("cached")]
    keys = {json.dumps(t.user_attrs["strategy"], sort_keys=True) for t in search.study.trials}
    assert len(keys) + len(cached) == len(search.study.trials)
    assert len(simulated) == len(keys) < len(search.study.trials)


runner = CliRunner()


def test_cli_optimize_writes_the_run_directory(tmp_path):
    result = runner.invoke(app, ["optimize", "--study", str(STUDY), "--hw", str(DATA / "mini-mesh.toml"),
                                 "--trials", "12", "--sampler", "tpe", "--jobs", "1",
                                 "--run-dir", str(tmp_path / "r"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["trials"] == 12 and doc["best"]["samples_per_s"] > 0
    assert doc["dashboard"].endswith(f"palm-search dashboard {tmp_path / 'r'}")
    best = json.loads((tmp_path / "r" / "best.json").read_text())
    assert best["hardware"] == "mini-mesh" and best["machine"]["kind"] == "mesh"
    for flags in (["--model", "T-1.7B", "--hw", str(DATA / "mini-mesh.toml")], []):
        replay = runner.invoke(app, ["simulate", *flags, "--strategy", str(tmp_path / "r" / "best.json"), "--json"])
        assert replay.exit_code == 0, replay.output
        assert json.loads(replay.stdout)["samples_per_s"] == best["result"]["samples_per_s"]
    assert (tmp_path / "r" / "trials.csv").read_text().count("\n") == 13


def test_a_baseline_whose_degrees_fit_no_microbatch_is_a_trial_outside_the_space(tmp_path):
    # a bare Hugging Face config trains at its context length (131,072 for Llama 3.1 8B), batch 1:
    # no microbatch size fits at the baseline's degrees, so the walk to its point finds none
    config = Path(__file__).parents[1] / "simulator" / "workload" / "hf_configs" / "Llama-3.1-8B.json"
    result = runner.invoke(app, ["optimize", "--model", str(config), "--hw", "h100-cluster", "--trials", "3",
                                 "--jobs", "1", "--artifacts-top", "0", "--run-dir", str(tmp_path / "r"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["trials"] == 3


@pytest.mark.parametrize(("flags", "needle"), [
    (["--model", "T-1.7B"], "--hw"),
    (["--model", "T-1.7B", "--hw", "wafer", "--sampler", "magic"], "sampler"),
    (["--model", "T-1.7B", "--hw", "wafer", "--objective", "speed"], "objectives"),
    (["--model", "T-1.7B", "--hw", "wafer", "--objective", "memory"], '["throughput", "memory"]'),
])
def test_cli_optimize_bad_input_is_one_line_and_exit_code_2(tmp_path, flags, needle):
    result = runner.invoke(app, ["optimize", *flags, "--run-dir", str(tmp_path / "x")])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0]
    assert not (tmp_path / "x").exists()


def test_multi_objective_search_reports_a_pareto_front(tmp_path):
    result = runner.invoke(app, ["optimize", "--study", str(STUDY), "--hw", str(DATA / "mini-mesh.toml"),
                                 "--objective", "throughput", "--objective", "memory", "--sampler", "nsga2",
                                 "--trials", "16", "--jobs", "1", "--run-dir", str(tmp_path / "p"), "--json"])
    assert result.exit_code == 0, result.output
    front = json.loads(result.stdout)["pareto_front"]
    assert front
    for a in front:  # no point of the front dominates another
        assert not any(b["samples_per_s"] >= a["samples_per_s"] and b["peak_memory_GiB"] < a["peak_memory_GiB"]
                       for b in front if b is not a)


def test_rdb_storage_url_holds_the_study(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    result = runner.invoke(app, ["optimize", "--study", str(STUDY), "--hw", str(DATA / "mini-mesh.toml"),
                                 "--trials", "6", "--sampler", "random", "--jobs", "1", "--storage", url,
                                 "--run-dir", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    import optuna

    assert len(optuna.load_study(study_name="small", storage=url).trials) == 6
    assert not (tmp_path / "s" / "study.journal").exists()


def test_a_trial_on_a_hardware_variant_keeps_its_machine(tmp_path):
    from dataclasses import replace

    from palm_search.search.driver import candidate_of, key_of, load_cache, tell
    from simulator import Strategy
    from spaces import Candidate

    search = open_search(_spec(), run_dir=tmp_path / "r")
    sram = search.hardware.memory.sram
    bigger = replace(search.hardware.memory, sram=replace(sram, capacity_bytes=2 * sram.capacity_bytes))
    variant = replace(search.hardware, name="bigger-sram", memory=bigger)
    candidate = Candidate(hardware=variant, strategy=Strategy(tp=2, pp=2, global_batch_size=8))
    record = palm_search.search.evaluate.evaluate(search.model, variant, candidate.strategy, "contention")
    tell(search, search.study.ask(), candidate, record, cached=False)
    told = search.study.trials[-1]
    assert candidate_of(search, told) == candidate
    search.cache.clear()
    load_cache(search)
    assert search.cache[key_of(search, candidate)]["samples_per_s"] == record["samples_per_s"]


@pytest.mark.parametrize(("devices", "needle"), [("[0]", "integers >= 1"), ("[4, 9]", "more than the 8 devices")])
def test_a_device_count_the_machine_cannot_hold_is_one_line_and_exit_code_2(tmp_path, devices, needle):
    study = tmp_path / "study.toml"
    text = STUDY.read_text().replace("microbatch_sizes = [1, 2]", f"microbatch_sizes = [1, 2]\ndevices = {devices}")
    study.write_text(text.replace("tests/palm_search/data/mini-mesh.toml", str(DATA / "mini-mesh.toml")))
    result = runner.invoke(app, ["optimize", "--study", str(study), "--run-dir", str(tmp_path / "x")])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and needle in lines[0] and "devices" in lines[0]
    assert not (tmp_path / "x").exists()


def test_a_search_on_part_of_the_machine_uses_only_the_devices_it_is_given(tmp_path):
    search = _run(tmp_path, device_counts=(4,), trials=20)
    strategies = [t.user_attrs["strategy"] for t in search.study.trials if not t.user_attrs.get("baseline")]
    assert strategies and all(s["tp"] * s["pp"] * s["dp"] == 4 for s in strategies)


def test_a_study_where_nothing_fits_memory_is_one_line_and_exit_code_2(tmp_path):
    result = runner.invoke(app, ["optimize", "--study", str(STUDY), "--hw", "wafer", "--model", "T-1T",
                                 "--run-dir", str(tmp_path / "x")])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "fits the memory" in lines[0]
    assert not (tmp_path / "x").exists()


def test_a_search_proposes_only_mappings_that_fit_memory(tmp_path):
    search = _run(tmp_path, sampler="tpe", trials=25, model="T-18B")  # 37 of its 168 plans fit 8 cores
    trials = [t for t in search.study.trials if not t.user_attrs.get("baseline")]
    assert len(trials) == 24 and all(t.user_attrs["feasible"] for t in trials)
    screen = search.study.user_attrs["memory_prescreen"]
    assert 0 < screen["fitting"] < screen["plans"] and screen["checked"] <= screen["plans"]


def test_the_screened_space_is_exactly_the_points_that_fit_memory():
    # T-18B on 8 cores: 37 of 168 plans fit; walking the space with and without the pre-screen
    from dataclasses import replace

    import simulator

    spec = _spec(model="T-18B")
    model, hardware = simulator.load_model("T-18B"), simulator.load_hardware(spec.hardware)
    screened = candidate_builder(spec, model, hardware)
    free = replace(screened, space=replace(screened.space, plans=None, degree_choices=None))
    fitting = {free(ScriptedTrialFor(p)).strategy for p in enumerate_points(free, 10**5)}
    fitting = {s for s in fitting if not simulator.check_memory(model, hardware, s)}
    walked = [screened(ScriptedTrialFor(p)).strategy for p in enumerate_points(screened, 10**5)]
    assert fitting and len(walked) == len(set(walked)) and set(walked) == fitting


def _strict(text: str) -> dict:
    """Parse ``text`` as strict JSON (RFC 8259: no NaN or Infinity)."""
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_a_screened_search_estimates_every_point_and_simulates_the_best_in_order(tmp_path):
    result = runner.invoke(app, ["optimize", "--study", str(STUDY), "--hw", str(DATA / "mini-mesh.toml"),
                                 "--fidelity", "screen", "--trials", "6", "--jobs", "1",
                                 "--run-dir", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    doc = _strict(result.stdout)
    _strict((tmp_path / "s" / "best.json").read_text())
    search = open_search(load_study(STUDY).replace(hardware=str(DATA / "mini-mesh.toml"), fidelity="full",
                                                   sampler="exhaustive"), run_dir=tmp_path / "walk")
    assert doc["screen"]["points"] == len(search.points) > 6
    assert doc["trials"] == 6 and doc["screen"]["queued"] == 5
    study = optuna.load_study(study_name="small", storage=journal_storage(tmp_path / "s"))
    estimates = [t.user_attrs["screen_samples_per_s"] for t in study.trials if not t.user_attrs["baseline"]]
    assert len(estimates) == 5 and estimates == sorted(estimates, reverse=True)
    # certified: the best point left out is estimated below every queued one, all 5 simulated
    margin = doc["screen"]["margin"]
    assert 0 < margin < 1 and doc["screen"]["queued_simulated"] == 5
    assert (1 - margin) * estimates[0] <= estimates[-1]


def test_the_study_names_its_objectives(tmp_path):
    search = _run(tmp_path, sampler="random", trials=4)
    assert search.study.metric_names == ["samples/s"]


def test_models_whose_names_differ_after_a_dot_get_studies_of_their_own():
    # a preset's dots are its own (Llama-3.1-8B is not the file Llama-3 with the suffix .1-8B)
    names = {default_name(model, "wormhole-n150", ("throughput",), "inference")
             for model in ("Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.2-1B")}
    assert names == {"llama-3.1-8b-wormhole-n150-inference", "llama-3.1-70b-wormhole-n150-inference",
                     "llama-3.2-1b-wormhole-n150-inference"}
    assert default_name("studies/models/my.model.toml", "chips/wafer-tiled.toml", ("throughput", "memory"),
                        "training") == "my.model-wafer-tiled-throughput-memory"


def _keys(document) -> set[str]:
    """Every key of a nested JSON document."""
    if isinstance(document, dict):
        return set(document) | {k for v in document.values() for k in _keys(v)}
    if isinstance(document, list):
        return {k for v in document for k in _keys(v)}
    return set()


def test_every_json_output_is_strict_versioned_and_names_each_quantity_once(tmp_path):
    from simulator.result import SCHEMA_VERSION

    found = runner.invoke(app, ["optimize", "--study", str(STUDY), "--hw", str(DATA / "mini-mesh.toml"),
                                "--trials", "4", "--jobs", "1", "--run-dir", str(tmp_path / "r"), "--json"])
    assert found.exit_code == 0, found.output
    best_path = tmp_path / "r" / "best.json"
    replay = runner.invoke(app, ["simulate", "--strategy", str(best_path), "--json"])
    assert replay.exit_code == 0, replay.output
    summary, best, simulated = _strict(found.stdout), _strict(best_path.read_text()), _strict(replay.stdout)
    for document in (summary, best, simulated):
        assert document["schema_version"] == SCHEMA_VERSION
        assert not {"mfu", "number"} & _keys(document)  # one name each: model_flops_utilisation, trial
    columns = set(pd.read_csv(tmp_path / "r" / "trials.csv").columns)
    assert {"trial", "model_flops_utilisation"} <= columns and not {"mfu", "number"} & columns
    assert best["result"]["trial"] == summary["best"]["trial"] == summary["top"][0]["trial"]
    assert best["result"]["model_flops_utilisation"] == simulated["model_flops_utilisation"]


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 5_000), st.integers(1, 300))
def test_screen_tasks_cover_a_block_once_in_even_pieces_of_all_its_plans_where_they_fit(plans, layouts):
    from palm_search.search.screen import _TASK_PLANS, _TASK_POINTS, _pieces

    pieces = list(_pieces(3, plans, layouts))
    covered = [(p, q) for piece in pieces for p in range(plans)[piece.plans] for q in range(layouts)[piece.layouts]]
    assert sorted(covered) == [(p, q) for p in range(plans) for q in range(layouts)]
    assert all(piece.block == 3 and 0 < piece.size <= _TASK_POINTS for piece in pieces)
    assert all(piece.plans.stop - piece.plans.start <= _TASK_PLANS for piece in pieces)
    fewest = max(-(-plans * layouts // _TASK_POINTS), -(-plans // _TASK_PLANS))
    assert len(pieces) == 1 if fewest == 1 else len(pieces) <= 2 * fewest
    if plans <= _TASK_PLANS:  # each layout's placement is built by one task
        assert all(piece.plans == slice(0, plans) for piece in pieces)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 400), min_size=1, max_size=30), st.data())
def test_screen_tasks_go_largest_first_among_those_made_and_their_positions_follow(sizes, data):
    # longest processing time first: each task sent is the largest (the first of equals) of those
    # the walk has made and not sent yet; here the walk makes one more each time one is sent
    import queue

    from palm_search.search.screen import _END, Piece, _largest_first

    tasks = [(Piece(k, slice(0, n), slice(0, 1)), k) for k, n in enumerate(sizes)]
    made = data.draw(st.integers(1, len(tasks)))
    queued: queue.Queue = queue.Queue()
    for task in tasks[:made]:
        queued.put(task)
    if made == len(tasks):
        queued.put(_END)
    chunks: list = []
    sent: list[int] = []
    for k in _largest_first(queued, chunks):
        waiting = [j for j in range(made) if j not in sent]
        assert k == min(waiting, key=lambda j: (-sizes[j], j))
        sent.append(k)
        if made < len(tasks):
            queued.put(tasks[made])
            made += 1
            if made == len(tasks):
                queued.put(_END)
    assert sorted(sent) == list(range(len(tasks)))
    assert chunks == [tasks[k][0] for k in sent]


@pytest.mark.parametrize("fidelity", ["auto", "screen"])
def test_a_space_over_the_screen_limit_goes_to_the_sampler_or_is_refused(tmp_path, monkeypatch, fidelity):
    # the walk streams into the workers' estimates; past the limit, what they started is abandoned
    import palm_search.search.driver
    from simulator import InputError

    monkeypatch.setattr(palm_search.search.driver, "SCREEN_LIMIT", 8)
    spec = _spec(trials=5, fidelity=fidelity)
    if fidelity == "screen":
        with pytest.raises(InputError, match="more than 8 points or 40,000 plans, too many to screen"):
            open_search(spec, run_dir=tmp_path / "r", jobs=2)
        return
    search = open_search(spec, run_dir=tmp_path / "r", jobs=2)
    assert search.points is None and search.screened is None
    run_baseline(search, choose_baseline(spec, search.model, search.hardware)[0])
    optimize(search)
    assert len(search.study.trials) == 5 and "screen" not in search.study.user_attrs


def test_an_exhaustive_search_with_a_budget_below_its_points_queues_only_the_budget(tmp_path):
    # it queued every point of the walk (up to 10^6, minutes of journal writes) for a few trials
    search = _run(tmp_path, sampler="exhaustive", trials=4)
    assert len(search.points) > 4
    assert [t.state for t in search.study.trials] == [TrialState.COMPLETE] * 4  # nothing left WAITING


@pytest.mark.parametrize("fidelity", ["auto", "screen"])
def test_a_one_trial_study_runs_its_baseline_and_starts_no_screen(tmp_path, fidelity):
    # a screen started for one trial was never collected: its workers' callbacks failed at exit
    search = _run(tmp_path, jobs=2, trials=1, fidelity=fidelity)
    assert search.points is None and search.screened is None
    assert [t.state for t in search.study.trials] == [TrialState.COMPLETE]


@pytest.mark.parametrize("model", ["T-1.7B", "T-18B"])
def test_walking_one_set_of_degrees_at_a_time_gives_the_prescreened_walk(model):
    # DegreeWalk pre-screens each set of degrees as the walk reaches it (the screen's thread overlaps it)
    import simulator
    from palm_search.search.space import DegreeWalk, enumerate_candidates

    spec = _spec(model=model)
    model_spec, hardware = simulator.load_model(model), simulator.load_hardware(spec.hardware)
    built = candidate_builder(spec, model_spec, hardware)
    walk = DegreeWalk(spec, model_spec, hardware)
    walked = [(params, candidate.strategy) for params, candidate in walk]
    assert walked == [(params, c.strategy) for params, c in enumerate_candidates(built, 10**6)]
    assert walk.builder().space == built.space and len(walked) > 10


@pytest.mark.parametrize("task", ["palm_search.search.evaluate:evaluate", "palm_search.search.evaluate:estimate_block",
                                  "palm_search.views.plots:render_mapping"])
def test_a_worker_unpickles_its_task_without_optuna_or_pandas(task):
    """The simulations', the screen's and the pictures' worker tasks, unpickled in a fresh process
    as a joblib worker does, load neither Optuna nor pandas (about 0.4 s of CPU per worker)."""
    import importlib
    import pickle
    import subprocess
    import sys

    module, name = task.split(":")
    pickled = pickle.dumps(getattr(importlib.import_module(module), name))
    code = ("import pickle, sys\npickle.loads(sys.stdin.buffer.read())\n"
            "print(sorted({'optuna', 'pandas'} & set(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", code], input=pickled, capture_output=True, check=True).stdout
    assert loaded.decode().strip() == "[]"


BERT_ON_BLACKHOLE = Path(__file__).parents[2] / "studies" / "bert-base-blackhole.toml"


def test_a_study_whose_device_count_admits_no_degrees_says_so_in_one_line(tmp_path):
    # 130 = 2 x 5 x 13 cores: no TP x PP x DP of BERT-base (12 heads, 12 layers) uses them all
    study = tmp_path / "study.toml"
    study.write_text(BERT_ON_BLACKHOLE.read_text().replace("devices = [128, 130]", ""))
    result = runner.invoke(app, ["optimize", "--study", str(study), "--run-dir", str(tmp_path / "x")])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "uses 130 devices" in lines[0] and "[search] `devices`" in lines[0]
    assert not (tmp_path / "x").exists()


def test_the_baseline_uses_only_the_device_counts_the_study_allows():
    spec = load_study(BERT_ON_BLACKHOLE)
    model, hardware = load_model(spec.model), load_hardware(spec.hardware)
    strategy, note = choose_baseline(spec, model, hardware)
    assert strategy.tp * strategy.cp * strategy.pp * strategy.dp == 128, note
    assert simulate(model, hardware, strategy, network="analytical").feasible


class _Forgetful(dict):
    """A memo that keeps nothing (every table worked out afresh)."""

    def __setitem__(self, key, value) -> None:
        pass


WAFER_TP32_PP5 = dict(model="T-145B", hardware="wafer", fixed={"tp": 32, "pp": 5, "dp": 2, "global_batch_size": 8},
                      searched=("microbatch_size", "schedule", "recompute", "sequence_parallel", "zero_stage",
                                "groups", "placement"))
"""The default search's best degrees (T-145B on the wafer, batch 8) with every other default dimension."""


@pytest.mark.parametrize("changes", [dict(model="T-18B"), WAFER_TP32_PP5], ids=["T-18B-mini-mesh", "T-145B-wafer"])
def test_the_screens_estimates_are_each_points_estimate_alone(changes, monkeypatch):
    # the screen's tasks estimate their blocks' points together (simulator.estimate_product:
    # numpy over plans and placements); each value must be what the point's estimate gives
    # alone (the closed form of its one pair), with no table remembered, to 1e-12 (sums taken
    # in another order)
    import simulator
    from palm_search.search.evaluate import estimate_block
    from palm_search.search.space import DegreeWalk
    from simulator.timing import vectorised

    spec = _spec().replace(**changes) if "hardware" in changes else _spec(**changes)
    model_spec, hardware = simulator.load_model(spec.model), simulator.load_hardware(spec.hardware)
    blocks = list(DegreeWalk(spec, model_spec, hardware).blocks())
    walk = [point for block in blocks for point in block.points()]
    screened = [value for block in blocks for value in estimate_block(
        model_spec, hardware, [s for _, s in block.plans], [v for _, v in block.layouts]).reshape(-1).tolist()]
    monkeypatch.setattr(vectorised, "_PLANS", _Forgetful())
    monkeypatch.setattr(vectorised, "_FLOWS", _Forgetful())
    alone = [simulator.estimate_samples_per_s(model_spec, hardware, c.strategy) for _, c in walk]
    assert sum(v > 0 for v in alone) > 10
    assert screened == pytest.approx(alone, rel=1e-12, abs=0)


def test_the_point_of_an_expert_parallel_strategy_is_found():
    # the walk around a strategy keeps all its degrees (`ep` was dropped once: no MoE point found)
    from palm_search.search.space import SpaceBuilder, point_of
    from simulator import Strategy
    from spaces import SearchedSpace

    space = SearchedSpace(model=load_model("Mixtral-8x7B"), searched=frozenset({"degrees"}), device_counts=(8,))
    build = SpaceBuilder(space=space, hardware=load_hardware("a100-cluster"), fixed={})
    strategy = Strategy(dp=8, ep=8)
    assert point_of(build, strategy) == {"degrees": "1x1x8e8"}


@pytest.mark.parametrize(("model", "fixed", "points"), [("Mixtral-8x7B", {}, 50), ("Mixtral-8x7B", {"etp": None}, 30),
                                                        ("LLaMA2-7B", {}, 16)])
def test_the_walk_counts_expert_tensor_parallel_points_in_closed_form(model, fixed, points):
    # 8 A100s (attention unfused: cp 1), degrees and sequence parallelism searched, no memory
    # pre-screen. (tp, pp) with tp pp | 8 (every tp splits both models), dp = 8 / (tp pp).
    # Mixtral (8 experts): under etp tp, ep in 1, 2, 4, 8 dividing dp; under etp 1 (tp > 1 only,
    # sequence parallel forced), ep dividing tp dp. Sequence parallelism: 2 choices when tp > 1
    # and etp is tp, else 1.
    #   etp tp: tp 1: dp 8, 4, 2, 1 -> 4+3+2+1 = 10 points; tp 2: dp 4, 2, 1 -> (3+2+1) x 2 = 12;
    #           tp 4: dp 2, 1 -> (2+1) x 2 = 6; tp 8: dp 1 -> 2. 30 in all (fixing etp None).
    #   etp 1:  tp 2: tp dp 8, 4, 2 -> 4+3+2 = 9; tp 4: tp dp 8, 4 -> 4+3 = 7; tp 8: 4. 20 more.
    # LLaMA2-7B (dense, unchanged): tp 1: 4 degrees x 1; tp 2: 3 x 2; tp 4: 2 x 2; tp 8: 1 x 2 = 16.
    from palm_search.search.space import SpaceBuilder
    from spaces import SearchedSpace

    space = SearchedSpace(model=load_model(model), searched=frozenset({"degrees", "sequence_parallel"}),
                          device_counts=(8,))
    build = SpaceBuilder(space=space, hardware=load_hardware("a100-cluster"), fixed=fixed)
    walked = enumerate_points(build, 10_000)
    assert walked is not None and len(walked) == points
    with_etp_one = [p for p in walked if p["degrees"].endswith("t1")]
    assert len(with_etp_one) == (20 if model == "Mixtral-8x7B" and not fixed else 0)
    assert all("sequence_parallel" not in p for p in with_etp_one)  # taken, not suggested


def test_every_plan_that_fits_memory_is_a_plan_of_the_walk_and_hybrid_sharding_adds_one():
    # the walk's blocks hold each fitting plan once, and a ZeRO-3 plan once more with its node
    # shard group (16 A100s: two nodes of 8), so the fitting plans bound the walk's from below
    # and a space whose fitting plans exceed the screen's is known too large before its walk
    from palm_search.search.space import DegreeWalk

    spec = StudySpec(model="LLaMA2-7B", hardware="a100-cluster").replace(device_counts=(16,))
    walk = DegreeWalk(spec, load_model(spec.model), load_hardware(spec.hardware))
    plans = [strategy for block in walk.blocks() for _, strategy in block.plans]
    hybrid = sum(1 for strategy in plans if strategy.shard_group_size)
    assert hybrid > 0 and len(plans) == walk.fitting_plans() + hybrid


def test_a_space_whose_fitting_plans_exceed_the_screens_is_not_walked(tmp_path, monkeypatch):
    import palm_search.search.driver

    def walked(*args, **kwargs):
        raise AssertionError("the screen's walk started")

    monkeypatch.setattr(palm_search.search.driver, "SCREEN_PLANS", 1)
    monkeypatch.setattr(palm_search.search.driver, "start_screen", walked)
    search = open_search(_spec(trials=5), run_dir=tmp_path / "r", jobs=2)
    assert search.points is None and search.screened is None


def test_the_prescreen_on_two_workers_finds_what_one_process_finds():
    # sets of degrees that differ only in pp and dp go to one worker; the plans found, counted and
    # their tree are those of pre-screening each set in this process
    from palm_search.search.space import DegreeWalk
    from palm_search.search.study import StudySpec

    spec = StudySpec(model="Mixtral-8x7B", hardware="a100-cluster").replace(device_counts=(16,))
    model, hardware = load_model(spec.model), load_hardware(spec.hardware)
    alone, shared = DegreeWalk(spec, model, hardware), DegreeWalk(spec, model, hardware)
    shared.prescreen(2)
    assert len(shared.found) == len(shared.degrees) > 10
    assert [shared.found[d] for d in shared.degrees] == [alone._plans(d) for d in alone.degrees]
    assert shared.builder().space == alone.builder().space


def test_a_screen_reports_its_estimates_as_they_come_in(tmp_path):
    # a screen of minutes said nothing before its end (Qwen3-30B-A3B on wafer-4: half an hour)
    from palm_search.search.driver import _walks
    from palm_search.search.space import DegreeWalk

    spec = _spec(trials=5)
    model, hardware = load_model(spec.model), load_hardware(spec.hardware)
    screened = _walks(spec, model, DegreeWalk(spec, model, hardware), jobs=1)[1]
    assert screened is not None and screened.points > 5
    calls: list[tuple[int, int]] = []
    screened.on_progress = lambda done, points: calls.append((done, points))
    ranked, _ = screened.ranked()
    assert [points for _, points in calls] == [len(ranked)] * len(calls)
    done = [d for d, _ in calls]
    assert done == sorted(set(done)) and done[-1] == len(ranked) == screened.points


def test_plain_progress_lines_show_a_changed_description_at_most_every_quiet_interval(monkeypatch, capsys):
    import palm_search.commands.optimize as command

    clock = iter([0.0, 0.0, 1.0, 2.0, 12.5, 13.0, 14.0])
    monkeypatch.setattr(command.time, "monotonic", lambda: next(clock))
    lines = command._ProgressLines("trials", 50)
    lines.update(0, description="baseline, then screening 900 points")  # t=0: the first, at once
    lines.update(0, description="screen: 10 of 900 points estimated")  # t=1: too soon
    lines.update(0, description="screen: 20 of 900 points estimated")  # t=2: too soon
    lines.update(0, description="screen: 30 of 900 points estimated")  # t=12.5: shown
    lines.update(0, completed=5, description="feasible 5")  # t=13: a tenth of the trials, shown whatever the time
    lines.update(0, completed=5, description="feasible 5")  # t=14: unchanged, not shown
    assert capsys.readouterr().err.splitlines() == [
        "trials 0/50 after 0 s baseline, then screening 900 points",
        "trials 0/50 after 12 s screen: 30 of 900 points estimated",
        "trials 5/50 after 13 s feasible 5"]


def test_opening_a_study_that_takes_long_says_so_in_one_line_and_a_quick_one_says_nothing(monkeypatch, capsys):
    import palm_search.commands.optimize as command

    spec = StudySpec(model="T-18B", hardware="wafer")
    monkeypatch.setattr(command.opening_notice, "AFTER_S", 0.05)
    with command.opening_notice(spec, 2) as notice:
        pass  # done before the notice is due: nothing said
    notice.timer.join(1.0)
    assert capsys.readouterr().err == ""
    with command.opening_notice(spec, 2) as notice:
        notice.timer.join(5.0)  # still opening when the notice is due
    assert capsys.readouterr().err.splitlines() == [
        f"opening study {spec.name}: pre-screening the space's plans for memory on 2 workers and walking it"]


def test_a_study_whose_number_format_the_machine_lacks_is_refused_for_that_not_for_memory():
    # tpu-v4-cube has bf16 and int8 peaks only: the default fp16 would refuse every plan, which the
    # memory pre-screen used to report as no mapping fitting memory; likewise a math fidelity on
    # a machine without matrix-engine passes
    from palm_search.search.space import DegreeWalk

    spec = StudySpec(model="T-18B", hardware="tpu-v4-cube")
    model, hardware = load_model(spec.model), load_hardware(spec.hardware)
    with pytest.raises(InputError, match=r"^study: precision 'fp16' has no peak on hardware 'tpu-v4-cube' \(has "
                                         r"\['bf16', 'int8'\]\) \(the defaults; set it with --precision"):
        DegreeWalk(spec, model, hardware)
    walk = DegreeWalk(spec.replace(fixed={"precision": "bf16"}), model, hardware)
    assert walk.builder().prescreen["fitting"] > 0
    wafer = StudySpec(model="T-18B", hardware="wafer").replace(fixed={"math_fidelity": "HiFi2"})
    with pytest.raises(InputError, match=r"^study: math_fidelity 'HiFi2' is not offered by hardware 'wafer' .*"
                                         r"\(the study's \[fixed\]\)$"):
        DegreeWalk(wafer, model, load_hardware("wafer"))
